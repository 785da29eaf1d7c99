package state

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Instance is one module running on one node.
type Instance struct {
	Node, Module string
}

// Holder says which instance holds a seat.
type Holder struct {
	Seat, Node, Module string
}

// Inventory is the desired state as last applied: what meshctl compares the next apply with to
// tell which seats changed hands.
type Inventory struct {
	Nodes     []string
	Instances []Instance
	Seats     []string
	Holders   []Holder // at most one per seat; a seat without a holder is absent
}

// HolderChange is one change of a seat's holder, recorded by SaveInventory.
type HolderChange struct {
	At       time.Time
	Seat     string
	From, To *Instance // nil: no holder (before the seat existed, or after it was removed)
	ApplyID  int64     // the apply that made the change, 0 if none was given
}

// SaveInventory replaces the stored inventory with inv and, in the same transaction, appends a
// HolderChange for every seat whose holder differs from the previously stored inventory: a new
// seat with a holder (From nil), a holder that moved, a seat that lost its holder or was removed
// (To nil). applyID names the apply (from RecordApply) that made the change, or is 0.
//
// inv must be consistent: instances on listed nodes, holders of listed seats that are listed
// instances, one holder per seat. Repeated identical entries are stored once.
func (s *Store) SaveInventory(ctx context.Context, inv Inventory, applyID int64) error {
	inv, err := normalizeInventory(inv)
	if err != nil {
		return fmt.Errorf("saving the inventory: %w", err)
	}
	at := time.Now()
	return s.change(ctx, fmt.Sprintf("saving the inventory (apply %d) in %s", applyID, s.dir), func(tx *sql.Tx, c *changes) error {
		prev, err := readInventory(ctx, tx)
		if err != nil {
			return err
		}
		// An unchanged inventory is no change: nothing is written — rewriting the rows of a
		// 20,000-instance mesh took a third of a second of every apply that changed anything
		// else — and the bus is sent nothing.
		if sameInventory(prev, inv) {
			return nil
		}
		if err := replaceInventory(ctx, tx, inv); err != nil {
			return err
		}
		c.add(&inventoryRecord, nil)
		for _, hc := range holderChanges(prev.Holders, inv.Holders) {
			id, err := insertHolderChange(ctx, tx, at, hc, applyID)
			if err != nil {
				return err
			}
			c.add(&holderChangeRecords, id)
		}
		return nil
	})
}

// sameInventory reports whether two sorted inventories are equal.
func sameInventory(a, b Inventory) bool {
	return slices.Equal(a.Nodes, b.Nodes) && slices.Equal(a.Instances, b.Instances) &&
		slices.Equal(a.Seats, b.Seats) && slices.Equal(a.Holders, b.Holders)
}

// Inventory returns the last saved inventory, sorted; the zero Inventory if none was ever saved.
func (s *Store) Inventory(ctx context.Context) (Inventory, error) {
	// One read transaction, so that the four tables are read at one point in time even while
	// another process saves.
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return Inventory{}, fmt.Errorf("reading the inventory: %w", err)
	}
	defer tx.Rollback()
	inv, err := readInventory(ctx, tx)
	if err != nil {
		return Inventory{}, fmt.Errorf("reading the inventory: %w", err)
	}
	return inv, nil
}

// Holders returns the seats' holders of the last saved inventory, sorted by seat: what a plan
// compares the description's holders with, without the inventory's every node and instance.
func (s *Store) Holders(ctx context.Context) ([]Holder, error) {
	var holders []Holder
	err := queryEach(ctx, s.db, "SELECT seat, node, module FROM inventory_holders ORDER BY seat", func(rows *sql.Rows) error {
		var h Holder
		err := rows.Scan(&h.Seat, &h.Node, &h.Module)
		holders = append(holders, h)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the inventory's holders: %w", err)
	}
	return holders, nil
}

// HolderChanges returns up to limit holder changes, newest first (limit <= 0: all of them).
func (s *Store) HolderChanges(ctx context.Context, limit int) ([]HolderChange, error) {
	return s.queryHolderChanges(ctx, `SELECT at, seat, from_node, from_module, to_node, to_module, apply_id
		FROM holder_changes ORDER BY id DESC LIMIT ?`, sqlLimit(limit))
}

// Handovers returns the holder changes recorded at since or later that took a seat from a
// holder (From set), oldest first: a seat's former holder may still acknowledge the work it
// took for one ack wait from its handover's time, which SaveInventory records once the apply
// that made it succeeded.
func (s *Store) Handovers(ctx context.Context, since time.Time) ([]HolderChange, error) {
	// The times are written in one fixed-width layout, so they compare as text.
	return s.queryHolderChanges(ctx, `SELECT at, seat, from_node, from_module, to_node, to_module, apply_id
		FROM holder_changes WHERE from_node IS NOT NULL AND at >= ? ORDER BY id`, formatTime(since))
}

// queryHolderChanges runs query, a SELECT of holder_changes' columns, with args.
func (s *Store) queryHolderChanges(ctx context.Context, query string, args ...any) ([]HolderChange, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("reading the holder changes: %w", err)
	}
	defer rows.Close()
	var changes []HolderChange
	for rows.Next() {
		var (
			c                                      HolderChange
			at                                     string
			fromNode, fromModule, toNode, toModule sql.NullString
			applyID                                sql.NullInt64
		)
		if err := rows.Scan(&at, &c.Seat, &fromNode, &fromModule, &toNode, &toModule, &applyID); err != nil {
			return nil, fmt.Errorf("reading the holder changes: %w", err)
		}
		if c.At, err = parseTime(at); err != nil {
			return nil, fmt.Errorf("reading the holder changes: %w", err)
		}
		c.From = nullableInstance(fromNode, fromModule)
		c.To = nullableInstance(toNode, toModule)
		c.ApplyID = applyID.Int64
		changes = append(changes, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the holder changes: %w", err)
	}
	return changes, nil
}

// normalizeInventory checks inv's consistency, reporting every problem at once, and returns it
// sorted and without repeated entries. A holder that is not a listed instance would make the
// next apply's holder changes (and the foreign keys) meaningless.
func normalizeInventory(inv Inventory) (Inventory, error) {
	var errs []error
	nodes := make(map[string]bool)
	for _, n := range inv.Nodes {
		if n == "" {
			errs = append(errs, errors.New("a node name is empty"))
		}
		nodes[n] = true
	}
	instances := make(map[Instance]bool)
	for _, in := range inv.Instances {
		switch {
		case in.Module == "":
			errs = append(errs, fmt.Errorf("an instance on node %q has an empty module name", in.Node))
		case !nodes[in.Node]:
			errs = append(errs, fmt.Errorf("instance %s/%s is on node %q, which is not in the inventory", in.Node, in.Module, in.Node))
		}
		instances[in] = true
	}
	seats := make(map[string]bool)
	for _, seat := range inv.Seats {
		if seat == "" {
			errs = append(errs, errors.New("a seat name is empty"))
		}
		seats[seat] = true
	}
	holders := make(map[string]Instance)
	for _, h := range inv.Holders {
		in := Instance{Node: h.Node, Module: h.Module}
		if prev, ok := holders[h.Seat]; ok && prev != in {
			errs = append(errs, fmt.Errorf("seat %q has two holders, %s/%s and %s/%s", h.Seat, prev.Node, prev.Module, in.Node, in.Module))
		}
		if !seats[h.Seat] {
			errs = append(errs, fmt.Errorf("the holder of seat %q: the seat is not in the inventory", h.Seat))
		}
		if !instances[in] {
			errs = append(errs, fmt.Errorf("the holder of seat %q: instance %s/%s is not in the inventory", h.Seat, in.Node, in.Module))
		}
		holders[h.Seat] = in
	}
	if err := errors.Join(errs...); err != nil {
		return Inventory{}, err
	}
	out := Inventory{Nodes: sortedKeys(nodes), Seats: sortedKeys(seats)}
	for in := range instances {
		out.Instances = append(out.Instances, in)
	}
	slices.SortFunc(out.Instances, func(a, b Instance) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Module, b.Module))
	})
	for _, seat := range sortedKeys(holders) {
		in := holders[seat]
		out.Holders = append(out.Holders, Holder{Seat: seat, Node: in.Node, Module: in.Module})
	}
	return out, nil
}

// sortedKeys returns m's keys in order, nil for an empty map (like the rest of a zero Inventory).
func sortedKeys[V any](m map[string]V) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// holderChanges compares the holders before and after, both sorted by seat, and returns the
// changes sorted by seat (From and To left nil where a seat had or has no holder).
func holderChanges(before, after []Holder) []HolderChange {
	was := make(map[string]Instance, len(before))
	for _, h := range before {
		was[h.Seat] = Instance{Node: h.Node, Module: h.Module}
	}
	is := make(map[string]Instance, len(after))
	for _, h := range after {
		is[h.Seat] = Instance{Node: h.Node, Module: h.Module}
	}
	seats := make(map[string]bool)
	for seat := range was {
		seats[seat] = true
	}
	for seat := range is {
		seats[seat] = true
	}
	var changes []HolderChange
	for _, seat := range sortedKeys(seats) {
		from, hadHolder := was[seat]
		to, hasHolder := is[seat]
		if hadHolder == hasHolder && from == to {
			continue
		}
		c := HolderChange{Seat: seat}
		if hadHolder {
			c.From = &from
		}
		if hasHolder {
			c.To = &to
		}
		changes = append(changes, c)
	}
	return changes
}

// readInventory reads the stored inventory in q, sorted.
func readInventory(ctx context.Context, q querier) (Inventory, error) {
	var inv Inventory
	err := queryEach(ctx, q, "SELECT node FROM inventory_nodes ORDER BY node", func(rows *sql.Rows) error {
		var n string
		err := rows.Scan(&n)
		inv.Nodes = append(inv.Nodes, n)
		return err
	})
	if err != nil {
		return Inventory{}, err
	}
	err = queryEach(ctx, q, "SELECT node, module FROM inventory_instances ORDER BY node, module", func(rows *sql.Rows) error {
		var in Instance
		err := rows.Scan(&in.Node, &in.Module)
		inv.Instances = append(inv.Instances, in)
		return err
	})
	if err != nil {
		return Inventory{}, err
	}
	err = queryEach(ctx, q, "SELECT seat FROM inventory_seats ORDER BY seat", func(rows *sql.Rows) error {
		var seat string
		err := rows.Scan(&seat)
		inv.Seats = append(inv.Seats, seat)
		return err
	})
	if err != nil {
		return Inventory{}, err
	}
	err = queryEach(ctx, q, "SELECT seat, node, module FROM inventory_holders ORDER BY seat", func(rows *sql.Rows) error {
		var h Holder
		err := rows.Scan(&h.Seat, &h.Node, &h.Module)
		inv.Holders = append(inv.Holders, h)
		return err
	})
	if err != nil {
		return Inventory{}, err
	}
	return inv, nil
}

// queryEach runs query with args in q and calls scan for every row.
func queryEach(ctx context.Context, q querier, query string, scan func(*sql.Rows) error, args ...any) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// replaceInventory deletes the stored inventory and inserts inv. Children go first on delete and
// last on insert, for the foreign keys.
func replaceInventory(ctx context.Context, tx *sql.Tx, inv Inventory) error {
	for _, table := range []string{"inventory_holders", "inventory_instances", "inventory_seats", "inventory_nodes"} {
		if _, err := tx.ExecContext(ctx, "DELETE FROM "+table); err != nil {
			return fmt.Errorf("clearing %s: %w", table, err)
		}
	}
	for _, n := range inv.Nodes {
		if _, err := tx.ExecContext(ctx, "INSERT INTO inventory_nodes (node) VALUES (?)", n); err != nil {
			return fmt.Errorf("storing node %q: %w", n, err)
		}
	}
	for _, in := range inv.Instances {
		if _, err := tx.ExecContext(ctx, "INSERT INTO inventory_instances (node, module) VALUES (?, ?)", in.Node, in.Module); err != nil {
			return fmt.Errorf("storing instance %s/%s: %w", in.Node, in.Module, err)
		}
	}
	for _, seat := range inv.Seats {
		if _, err := tx.ExecContext(ctx, "INSERT INTO inventory_seats (seat) VALUES (?)", seat); err != nil {
			return fmt.Errorf("storing seat %q: %w", seat, err)
		}
	}
	for _, h := range inv.Holders {
		if _, err := tx.ExecContext(ctx, "INSERT INTO inventory_holders (seat, node, module) VALUES (?, ?, ?)", h.Seat, h.Node, h.Module); err != nil {
			return fmt.Errorf("storing the holder of seat %q: %w", h.Seat, err)
		}
	}
	return nil
}

// insertHolderChange appends c to the log and returns its id. An applyID of 0 is stored as
// NULL: no apply.
func insertHolderChange(ctx context.Context, tx *sql.Tx, at time.Time, c HolderChange, applyID int64) (int64, error) {
	var fromNode, fromModule, toNode, toModule sql.NullString
	if c.From != nil {
		fromNode, fromModule = sql.NullString{String: c.From.Node, Valid: true}, sql.NullString{String: c.From.Module, Valid: true}
	}
	if c.To != nil {
		toNode, toModule = sql.NullString{String: c.To.Node, Valid: true}, sql.NullString{String: c.To.Module, Valid: true}
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO holder_changes (at, seat, from_node, from_module, to_node, to_module, apply_id)
		VALUES (?, ?, ?, ?, ?, ?, ?)`,
		formatTime(at), c.Seat, fromNode, fromModule, toNode, toModule, sql.NullInt64{Int64: applyID, Valid: applyID != 0})
	if err != nil {
		return 0, fmt.Errorf("recording the holder change of seat %q: %w", c.Seat, err)
	}
	return res.LastInsertId()
}

// nullableInstance is the instance named by two nullable columns, or nil.
func nullableInstance(node, module sql.NullString) *Instance {
	if !node.Valid {
		return nil
	}
	return &Instance{Node: node.String, Module: module.String}
}

// sqlLimit turns "limit <= 0 means all" into SQLite's "LIMIT -1 means all".
func sqlLimit(limit int) int {
	if limit <= 0 {
		return -1
	}
	return limit
}
