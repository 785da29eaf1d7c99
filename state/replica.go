package state

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Record is one row of the store as a replica keeps it: Key names the row, Value is its JSON;
// a nil Value says the row is gone.
type Record struct {
	Key   string
	Value []byte
}

// Replica keeps a copy of the store elsewhere. Write must hold records durably before it
// returns; records of one call are one change, written in order.
type Replica interface {
	Write(ctx context.Context, records []Record) error
}

// ErrReplicaBehind is returned (wrapped) by a change the store committed but its replica did
// not take. The change stands in the store, and the method's other results are valid (Mint's
// passwords exist nowhere else). The store's next change sends the replica the whole store.
var ErrReplicaBehind = errors.New("the store's copy on the bus is behind")

// ErrFenced is returned (wrapped) by a Replica's Write that the replica refused because another
// writer took it over since this one began writing to it (replica's Fence). A change refused so
// stands in this store, but not on the bus, whose copy is the authority: this store is no longer
// the one writer, and must be refreshed from the copy before it writes again.
var ErrFenced = errors.New("another meshctl writes the store on the bus now")

// SetReplica makes every change the store commits from now on go to r too (nil: none). It does
// not send what the store already holds: the caller sends Snapshot first where r is behind.
//
// Whether r is behind is the store's to remember across processes: a change committed by a
// process that died before its replica took it leaves the store marked behind (migration 6),
// and so does a store that never had a replica. CatchUp sends what r lacks.
func (s *Store) SetReplica(r Replica) {
	s.replicaMu.Lock()
	defer s.replicaMu.Unlock()
	s.replica, s.replicaBehind = r, false
}

// DropReplica stops the store writing to r, if it is the replica it writes to: the connection
// r writes through is closing. The changes made without a replica are marked behind, and sent
// whole by the next to keep one (CatchUp).
func (s *Store) DropReplica(r Replica) {
	s.replicaMu.Lock()
	defer s.replicaMu.Unlock()
	if s.replica != r {
		return
	}
	if !s.replicaBehind {
		// It took every change made while it was kept: no resend is owed. Failing to say so
		// costs one whole resend later, and loses nothing.
		_ = s.markCaughtUp(context.Background())
	}
	s.replica, s.replicaBehind = nil, false
}

// CatchUp sends the replica the whole store when it may be behind — a change it did not take, a
// process that died between a commit and its replica's answer, a replica never written — and
// nothing otherwise: a converged run writes nothing to the bus. behind says the replica was
// known to be behind (a fresh bucket) whatever the store remembers.
func (s *Store) CatchUp(ctx context.Context, behind bool) error {
	s.replicaMu.Lock()
	defer s.replicaMu.Unlock()
	if s.replica == nil {
		return nil
	}
	var marked int
	if err := s.db.QueryRowContext(ctx, "SELECT behind FROM replica").Scan(&marked); err != nil {
		return fmt.Errorf("reading whether the store's copy on the bus is behind: %w", err)
	}
	if !behind && !s.replicaBehind && marked == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("reading the store in %s: %w", s.dir, err)
	}
	records, err := catchUp(ctx, tx)
	tx.Rollback()
	if err != nil {
		return fmt.Errorf("reading the store in %s: %w", s.dir, err)
	}
	if err := s.replica.Write(ctx, records); err != nil {
		s.replicaBehind = true
		if errors.Is(err, ErrFenced) {
			return fmt.Errorf("the store in %s could not be sent to the bus: %w", s.dir, err)
		}
		return fmt.Errorf("%w: the store in %s could not be sent to the bus: %w", ErrReplicaBehind, s.dir, err)
	}
	s.replicaBehind = false
	return s.markCaughtUp(ctx)
}

// markCaughtUp clears the mark that the replica may be behind, once it is known to hold every
// change: after a catch-up, and when it is let go in step (DropReplica). Not after each change:
// the mark is set in the transaction of the first change since, and clearing it after each one
// would cost every change a second commit, for a process that dies mid-run to resend the store
// once instead of never. Failing leaves it set, which costs one whole resend later and loses
// nothing.
func (s *Store) markCaughtUp(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, "UPDATE replica SET behind = 0 WHERE behind = 1"); err != nil {
		return DiskError(fmt.Errorf("recording that the store's copy on the bus caught up: %w", err), s.dir)
	}
	return nil
}

// Snapshot is every record of the store, sorted by key.
func (s *Store) Snapshot(ctx context.Context) ([]Record, error) {
	// One read transaction: the records are of one point in time even while another process
	// writes.
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("reading the store in %s: %w", s.dir, err)
	}
	defer tx.Rollback()
	records, err := snapshot(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("reading the store in %s: %w", s.dir, err)
	}
	return records, nil
}

// change runs fn in a write transaction, as inWriteTx does, and once it has committed hands the
// replica the records of the rows fn noted in its changes, read back inside the transaction so
// that they are what was committed. what says what failed when the transaction does; a replica
// that fails is said as ErrReplicaBehind, the commit standing.
//
// Why the whole store after a failure: a Write that failed may have been taken in part, or not
// at all, and later changes must not land on a replica missing an earlier one. So the store
// remembers that its replica is behind and sends, with its next change, every record and a
// deletion of every key it may have dropped since (catchUp); a replica that took that is equal
// to the store again, whatever of the failed Writes it kept. A record that tells the replica to
// drop everything else would have it empty for a moment, and empty for good if the writer died
// then: an empty copy of the hashes is the one a restore must never find.
//
// replicaMu is held from the transaction's start to the replica's answer, so this Store hands
// its replica changes in the order they committed: two changes of one row sent the other way
// round would leave the replica with the older. Changes made through another Store of the
// same directory are not ordered with these: one Store writes a given replica.
func (s *Store) change(ctx context.Context, what string, fn func(*sql.Tx, *changes) error) error {
	s.replicaMu.Lock()
	defer s.replicaMu.Unlock()
	var records []Record
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		c := &changes{rows: map[*family][]any{}}
		if err := fn(tx, c); err != nil {
			return err
		}
		var err error
		if !c.local && len(c.rows) > 0 {
			// Marked in the same transaction as the change: set until a replica took it,
			// and for good where none is kept now (the next to keep one sends the store).
			if _, err := tx.ExecContext(ctx, "UPDATE replica SET behind = 1 WHERE behind = 0"); err != nil {
				return err
			}
		}
		switch {
		case s.replica == nil, c.local:
		case s.replicaBehind:
			records, err = catchUp(ctx, tx)
		default:
			records, err = c.records(ctx, tx)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	// A change that wrote nothing (a converged inventory, a password found to match) is
	// not sent: a converged run writes nothing to the bus.
	if len(records) == 0 {
		return nil
	}
	if err := s.replica.Write(ctx, records); err != nil {
		s.replicaBehind = true
		if errors.Is(err, ErrFenced) {
			// Not behind but overtaken: what this store committed is not the mesh's, and
			// the caller must not act on it (answer a node, say it is done).
			return fmt.Errorf("%s: committed to the store in %s but refused by the bus: %w", what, s.dir, err)
		}
		return fmt.Errorf("%w: committed to the store in %s but not yet to the bus (the next change sends the whole store): %w",
			ErrReplicaBehind, s.dir, err)
	}
	s.replicaBehind = false
	return nil
}

// changes names the rows a transaction wrote or deleted, by their records' family. A local
// change is kept by this store alone (keepLocal).
type changes struct {
	rows  map[*family][]any
	local bool
}

// add notes that the rows named names (a name or an id, as the family's rows are named)
// changed.
func (c *changes) add(f *family, names ...any) { c.rows[f] = append(c.rows[f], names...) }

// keepLocal says the change is not sent to the replica: it is in the store, and in the next
// whole copy sent, but no change of the mesh's on its own (an apply that found nothing to do),
// so a converged run writes nothing to the bus.
func (c *changes) keepLocal() { c.local = true }

// records reads back the records of every noted row, a deletion for a row that is gone,
// sorted by key.
func (c *changes) records(ctx context.Context, q querier) ([]Record, error) {
	var out []Record
	for f, names := range c.rows {
		got, err := f.read(ctx, f, q, names)
		if err != nil {
			return nil, err
		}
		have := make(map[string]bool, len(got))
		for _, r := range got {
			have[r.Key] = true
		}
		out = append(out, got...)
		for _, n := range names {
			if k := f.key(n); !have[k] {
				have[k] = true // a row noted twice is deleted once
				out = append(out, Record{Key: k})
			}
		}
	}
	sortRecords(out)
	return out, nil
}

// snapshot reads every record in q, sorted by key.
func snapshot(ctx context.Context, q querier) ([]Record, error) {
	var out []Record
	for _, f := range families {
		got, err := f.read(ctx, f, q, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	sortRecords(out)
	return out, nil
}

// catchUp is every record, with a deletion of every key the store may have held and no longer
// does, so that a replica holding any older copy of the store is made equal to it. The only
// rows the store deletes are credentials, revocations and jwt users, and each leaves a trace in
// its place: a credential and a revocation each the other (Revoke and EnrolNode record a
// revocation, a mint deletes it), and a jwt user its key kept revoked, never deleted (jwt.go).
// So the keys it may have dropped are the credential of every revoked principal, the
// revocation of every principal holding a credential, and the jwt user of every principal
// with a revoked key and no user now. A change that deletes another kind of row must leave
// such a trace too, or a replica behind would keep the row for ever.
func catchUp(ctx context.Context, q querier) ([]Record, error) {
	records, err := snapshot(ctx, q)
	if err != nil {
		return nil, err
	}
	have := make(map[string]bool, len(records))
	for _, r := range records {
		have[r.Key] = true
	}
	for _, r := range slices.Clone(records) {
		if name, ok := strings.CutPrefix(r.Key, credentials.prefix+"."); ok {
			records = append(records, Record{Key: revocations.prefix + "." + name})
		}
		if name, ok := strings.CutPrefix(r.Key, revocations.prefix+"."); ok {
			records = append(records, Record{Key: credentials.prefix + "." + name})
		}
		if strings.HasPrefix(r.Key, jwtRevokedRecords.prefix+".") {
			var v jwtRevokedValue
			if err := json.Unmarshal(r.Value, &v); err != nil {
				return nil, fmt.Errorf("record %s: %w", r.Key, err)
			}
			if k := jwtUserRecords.key(v.Principal); !have[k] {
				have[k] = true // a principal with several keys revoked is deleted once
				records = append(records, Record{Key: k})
			}
		}
	}
	sortRecords(records)
	return records, nil
}

func sortRecords(records []Record) {
	slices.SortFunc(records, func(a, b Record) int { return strings.Compare(a.Key, b.Key) })
}

// family is one kind of record: the rows of one table, with those stored with them, under keys
// that begin with prefix.
type family struct {
	prefix string
	// byID: the rows are named by an INTEGER id, and keys carry it zero-padded so that they
	// sort as the ids do; otherwise by a name, escaped (keyName). A singleton ignores both.
	byID, singleton bool
	// read returns the records of the rows named names, or of every row when names is nil.
	read func(ctx context.Context, f *family, q querier, names []any) ([]Record, error)
	// restore inserts a record's value; keyOf says which key that value must have come under.
	restore func(ctx context.Context, f *family, tx *sql.Tx, value []byte) (keyOf string, err error)
}

// key is the key of the row named name.
func (f *family) key(name any) string {
	switch {
	case f.singleton:
		return f.prefix
	case f.byID:
		return fmt.Sprintf("%s.%019d", f.prefix, name)
	}
	return f.prefix + "." + keyName(name.(string))
}

// keyName makes a name (a principal, a node) one or more tokens of a JetStream KV key, which
// allows only [-/_=.a-zA-Z0-9] and no empty token. Names in meshctl are [a-z0-9._-] and pass
// as they are, so an operator reading the bucket finds credential.node.one; any other byte,
// '=' itself, and a dot that would leave a token empty become =XX (hex), and the empty name
// "=": no two names share a key.
func keyName(name string) string {
	if name == "" {
		return "="
	}
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		safe := c == '-' || c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '.' && i > 0 && i < len(name)-1 && name[i-1] != '.'
		if safe {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "=%02X", c)
		}
	}
	return b.String()
}

// selectRows runs query, restricted to the rows whose column is one of names unless names is
// nil, and calls scan for each. The names go as one JSON array: a mint of thousands of
// principals would pass SQLite's limit of bound parameters.
func selectRows(ctx context.Context, q querier, query, column string, names []any, scan func(*sql.Rows) error) error {
	var args []any
	if names != nil {
		list, err := json.Marshal(names)
		if err != nil {
			return err
		}
		query += " WHERE " + column + " IN (SELECT value FROM json_each(?))"
		args = append(args, string(list))
	}
	return queryEach(ctx, q, query, scan, args...)
}

// record is the record of value, a row of f named name.
func (f *family) record(name any, value any) (Record, error) {
	data, err := json.Marshal(value)
	if err != nil {
		return Record{}, fmt.Errorf("encoding the record %s: %w", f.key(name), err)
	}
	return Record{Key: f.key(name), Value: data}, nil
}

// IdentityKey is the key of the record that names the store a replica is a copy of.
const IdentityKey = "identity"

// IdentityIn reads the store's identity from the value of its IdentityKey record.
func IdentityIn(value []byte) (string, error) {
	var v identityValue
	if err := json.Unmarshal(value, &v); err != nil || v.ID == "" {
		return "", fmt.Errorf("the record %s names no store: %v", IdentityKey, err)
	}
	return v.ID, nil
}
