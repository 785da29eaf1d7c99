package state

import (
	"context"
	"database/sql"
	"encoding/json"
)

// The records of the store, one a row a restore needs. Values carry the columns as stored,
// times as their text, so that a restored store holds the same bytes. Each value names its row
// too: Restore takes names from values and checks them against the keys. The refusals and the
// dead letters are left out: they are a log of the bus's complaints, not authority, and a
// restored store learns them anew.

var (
	identityRecord      = family{prefix: "identity", singleton: true, read: readIdentity, restore: restoreIdentity}
	credentials         = family{prefix: "credential", read: readCredentials, restore: restoreCredential}
	revocations         = family{prefix: "revocation", read: readRevocations, restore: restoreRevocation}
	enrolments          = family{prefix: "enrolment", read: readEnrolments, restore: restoreEnrolment}
	declarations        = family{prefix: "declaration", read: readDeclarations, restore: restoreDeclaration}
	reports             = family{prefix: "report", read: readReports, restore: restoreReport}
	applies             = family{prefix: "apply", byID: true, read: readApplies, restore: restoreApply}
	holderChangeRecords = family{prefix: "holder", byID: true, read: readHolderChanges, restore: restoreHolderChange}
	inventoryRecord     = family{prefix: "inventory", singleton: true, read: readInventoryRecord, restore: restoreInventory}
	jwtUserRecords      = family{prefix: "jwt-user", read: readJWTUsers, restore: restoreJWTUser}
	jwtRevokedRecords   = family{prefix: "jwt-revoked", read: readJWTRevoked, restore: restoreJWTRevoked}
)

// families is every kind of record, in the order Restore inserts them: a row after those its
// foreign keys refer to.
var families = []*family{
	&identityRecord, &credentials, &revocations, &enrolments, &declarations, &reports, &applies,
	&holderChangeRecords, &inventoryRecord, &jwtUserRecords, &jwtRevokedRecords,
}

type identityValue struct {
	ID        string `json:"id"`
	CreatedAt string `json:"created_at"`
}

func readIdentity(ctx context.Context, f *family, q querier, _ []any) ([]Record, error) {
	var out []Record
	err := queryEach(ctx, q, "SELECT id, created_at FROM identity", func(rows *sql.Rows) error {
		var v identityValue
		if err := rows.Scan(&v.ID, &v.CreatedAt); err != nil {
			return err
		}
		r, err := f.record(nil, v)
		out = append(out, r)
		return err
	})
	return out, err
}

func restoreIdentity(ctx context.Context, f *family, tx *sql.Tx, data []byte) (string, error) {
	var v identityValue
	if err := json.Unmarshal(data, &v); err != nil {
		return "", err
	}
	// The new store's own identity, made by its migration, gives way to the one restored:
	// a restored store is the same store.
	if _, err := tx.ExecContext(ctx, "DELETE FROM identity"); err != nil {
		return "", err
	}
	_, err := tx.ExecContext(ctx, "INSERT INTO identity (id, created_at) VALUES (?, ?)", v.ID, v.CreatedAt)
	return f.key(nil), err
}

type credentialValue struct {
	Principal string `json:"principal"`
	Hash      string `json:"hash"`
	MintedAt  string `json:"minted_at"`
	Operation string `json:"operation"`
}

func readCredentials(ctx context.Context, f *family, q querier, names []any) ([]Record, error) {
	var out []Record
	err := selectRows(ctx, q, "SELECT principal, hash, minted_at, operation FROM credentials", "principal", names, func(rows *sql.Rows) error {
		var v credentialValue
		if err := rows.Scan(&v.Principal, &v.Hash, &v.MintedAt, &v.Operation); err != nil {
			return err
		}
		r, err := f.record(v.Principal, v)
		out = append(out, r)
		return err
	})
	return out, err
}

func restoreCredential(ctx context.Context, f *family, tx *sql.Tx, data []byte) (string, error) {
	var v credentialValue
	if err := json.Unmarshal(data, &v); err != nil {
		return "", err
	}
	_, err := tx.ExecContext(ctx, "INSERT INTO credentials (principal, hash, minted_at, operation) VALUES (?, ?, ?, ?)",
		v.Principal, v.Hash, v.MintedAt, v.Operation)
	return f.key(v.Principal), err
}

type revocationValue struct {
	Principal string `json:"principal"`
	RevokedAt string `json:"revoked_at"`
}

func readRevocations(ctx context.Context, f *family, q querier, names []any) ([]Record, error) {
	var out []Record
	err := selectRows(ctx, q, "SELECT principal, revoked_at FROM revocations", "principal", names, func(rows *sql.Rows) error {
		var v revocationValue
		if err := rows.Scan(&v.Principal, &v.RevokedAt); err != nil {
			return err
		}
		r, err := f.record(v.Principal, v)
		out = append(out, r)
		return err
	})
	return out, err
}

func restoreRevocation(ctx context.Context, f *family, tx *sql.Tx, data []byte) (string, error) {
	var v revocationValue
	if err := json.Unmarshal(data, &v); err != nil {
		return "", err
	}
	_, err := tx.ExecContext(ctx, "INSERT INTO revocations (principal, revoked_at) VALUES (?, ?)", v.Principal, v.RevokedAt)
	return f.key(v.Principal), err
}

type enrolmentValue struct {
	Node       string `json:"node"`
	PublicKey  []byte `json:"public_key"`
	EnrolledAt string `json:"enrolled_at"`
}

func readEnrolments(ctx context.Context, f *family, q querier, names []any) ([]Record, error) {
	var out []Record
	err := selectRows(ctx, q, "SELECT node, public_key, enrolled_at FROM enrolments", "node", names, func(rows *sql.Rows) error {
		var v enrolmentValue
		if err := rows.Scan(&v.Node, &v.PublicKey, &v.EnrolledAt); err != nil {
			return err
		}
		r, err := f.record(v.Node, v)
		out = append(out, r)
		return err
	})
	return out, err
}

func restoreEnrolment(ctx context.Context, f *family, tx *sql.Tx, data []byte) (string, error) {
	var v enrolmentValue
	if err := json.Unmarshal(data, &v); err != nil {
		return "", err
	}
	_, err := tx.ExecContext(ctx, "INSERT INTO enrolments (node, public_key, enrolled_at) VALUES (?, ?, ?)", v.Node, v.PublicKey, v.EnrolledAt)
	return f.key(v.Node), err
}

// declarationValue is a node's declaration with its declared credentials: one record, because
// they are replaced together.
type declarationValue struct {
	Node        string                             `json:"node"`
	Generation  int64                              `json:"generation"`
	Digest      string                             `json:"digest"`
	DeclaredAt  string                             `json:"declared_at"`
	Credentials map[string]declaredCredentialValue `json:"credentials"` // by principal
}

type declaredCredentialValue struct {
	Hash   string `json:"hash"`
	Sealed []byte `json:"sealed"`
}

func readDeclarations(ctx context.Context, f *family, q querier, names []any) ([]Record, error) {
	// Two queries, not one per node: a full read of 5,000 nodes stays two statements.
	byNode := map[string]*declarationValue{}
	var order []string
	err := selectRows(ctx, q, "SELECT node, generation, digest, declared_at FROM declarations", "node", names, func(rows *sql.Rows) error {
		v := declarationValue{Credentials: map[string]declaredCredentialValue{}}
		if err := rows.Scan(&v.Node, &v.Generation, &v.Digest, &v.DeclaredAt); err != nil {
			return err
		}
		byNode[v.Node] = &v
		order = append(order, v.Node)
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = selectRows(ctx, q, "SELECT node, principal, hash, sealed FROM declared_credentials", "node", names, func(rows *sql.Rows) error {
		var node, principal string
		var c declaredCredentialValue
		if err := rows.Scan(&node, &principal, &c.Hash, &c.Sealed); err != nil {
			return err
		}
		if v := byNode[node]; v != nil {
			v.Credentials[principal] = c
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]Record, 0, len(order))
	for _, n := range order {
		r, err := f.record(n, byNode[n])
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func restoreDeclaration(ctx context.Context, f *family, tx *sql.Tx, data []byte) (string, error) {
	var v declarationValue
	if err := json.Unmarshal(data, &v); err != nil {
		return "", err
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO declarations (node, generation, digest, declared_at) VALUES (?, ?, ?, ?)",
		v.Node, v.Generation, v.Digest, v.DeclaredAt); err != nil {
		return "", err
	}
	for p, c := range v.Credentials {
		if _, err := tx.ExecContext(ctx, "INSERT INTO declared_credentials (node, principal, hash, sealed) VALUES (?, ?, ?, ?)",
			v.Node, p, c.Hash, c.Sealed); err != nil {
			return "", err
		}
	}
	return f.key(v.Node), nil
}

// reportValue keeps applied and failed as the JSON text they are stored as.
type reportValue struct {
	Node       string `json:"node"`
	Generation int64  `json:"generation"`
	Applied    string `json:"applied"`
	Failed     string `json:"failed"`
	ReportedAt string `json:"reported_at"`
	RecordedAt string `json:"recorded_at"`
}

func readReports(ctx context.Context, f *family, q querier, names []any) ([]Record, error) {
	var out []Record
	err := selectRows(ctx, q, "SELECT node, generation, applied, failed, reported_at, recorded_at FROM reports", "node", names, func(rows *sql.Rows) error {
		var v reportValue
		if err := rows.Scan(&v.Node, &v.Generation, &v.Applied, &v.Failed, &v.ReportedAt, &v.RecordedAt); err != nil {
			return err
		}
		r, err := f.record(v.Node, v)
		out = append(out, r)
		return err
	})
	return out, err
}

func restoreReport(ctx context.Context, f *family, tx *sql.Tx, data []byte) (string, error) {
	var v reportValue
	if err := json.Unmarshal(data, &v); err != nil {
		return "", err
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO reports (node, generation, applied, failed, reported_at, recorded_at)
		VALUES (?, ?, ?, ?, ?, ?)`, v.Node, v.Generation, v.Applied, v.Failed, v.ReportedAt, v.RecordedAt)
	return f.key(v.Node), err
}

type applyValue struct {
	ID       int64  `json:"id"`
	Started  string `json:"started"`
	Finished string `json:"finished"`
	User     string `json:"user"`
	Host     string `json:"host"`
	Commit   string `json:"git_commit"`
	Summary  string `json:"summary"`
	Outcome  string `json:"outcome"`
}

func readApplies(ctx context.Context, f *family, q querier, ids []any) ([]Record, error) {
	var out []Record
	err := selectRows(ctx, q, "SELECT id, started, finished, user, host, git_commit, summary, outcome FROM applies", "id", ids, func(rows *sql.Rows) error {
		var v applyValue
		if err := rows.Scan(&v.ID, &v.Started, &v.Finished, &v.User, &v.Host, &v.Commit, &v.Summary, &v.Outcome); err != nil {
			return err
		}
		r, err := f.record(v.ID, v)
		out = append(out, r)
		return err
	})
	return out, err
}

// restoreApply keeps the apply's id, which holder changes refer to; AUTOINCREMENT then goes on
// above the highest restored, so no id is ever reused.
func restoreApply(ctx context.Context, f *family, tx *sql.Tx, data []byte) (string, error) {
	var v applyValue
	if err := json.Unmarshal(data, &v); err != nil {
		return "", err
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO applies (id, started, finished, user, host, git_commit, summary, outcome)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, v.ID, v.Started, v.Finished, v.User, v.Host, v.Commit, v.Summary, v.Outcome)
	return f.key(v.ID), err
}

type holderChangeValue struct {
	ID         int64   `json:"id"`
	At         string  `json:"at"`
	Seat       string  `json:"seat"`
	FromNode   *string `json:"from_node"`
	FromModule *string `json:"from_module"`
	ToNode     *string `json:"to_node"`
	ToModule   *string `json:"to_module"`
	ApplyID    *int64  `json:"apply_id"`
}

func readHolderChanges(ctx context.Context, f *family, q querier, ids []any) ([]Record, error) {
	var out []Record
	err := selectRows(ctx, q, "SELECT id, at, seat, from_node, from_module, to_node, to_module, apply_id FROM holder_changes", "id", ids, func(rows *sql.Rows) error {
		var v holderChangeValue
		if err := rows.Scan(&v.ID, &v.At, &v.Seat, &v.FromNode, &v.FromModule, &v.ToNode, &v.ToModule, &v.ApplyID); err != nil {
			return err
		}
		r, err := f.record(v.ID, v)
		out = append(out, r)
		return err
	})
	return out, err
}

func restoreHolderChange(ctx context.Context, f *family, tx *sql.Tx, data []byte) (string, error) {
	var v holderChangeValue
	if err := json.Unmarshal(data, &v); err != nil {
		return "", err
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO holder_changes (id, at, seat, from_node, from_module, to_node, to_module, apply_id)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, v.ID, v.At, v.Seat, v.FromNode, v.FromModule, v.ToNode, v.ToModule, v.ApplyID)
	return f.key(v.ID), err
}

// inventoryValue is the whole last applied inventory: SaveInventory replaces it whole.
type inventoryValue struct {
	Nodes     []string        `json:"nodes"`
	Instances []instanceValue `json:"instances"`
	Seats     []string        `json:"seats"`
	Holders   []holderValue   `json:"holders"`
}

type instanceValue struct {
	Node   string `json:"node"`
	Module string `json:"module"`
}

type holderValue struct {
	Seat   string `json:"seat"`
	Node   string `json:"node"`
	Module string `json:"module"`
}

func readInventoryRecord(ctx context.Context, f *family, q querier, _ []any) ([]Record, error) {
	inv, err := readInventory(ctx, q)
	if err != nil {
		return nil, err
	}
	v := inventoryValue{Nodes: inv.Nodes, Seats: inv.Seats}
	for _, in := range inv.Instances {
		v.Instances = append(v.Instances, instanceValue(in))
	}
	for _, h := range inv.Holders {
		v.Holders = append(v.Holders, holderValue(h))
	}
	r, err := f.record(nil, v)
	return []Record{r}, err
}

func restoreInventory(ctx context.Context, f *family, tx *sql.Tx, data []byte) (string, error) {
	var v inventoryValue
	if err := json.Unmarshal(data, &v); err != nil {
		return "", err
	}
	inv := Inventory{Nodes: v.Nodes, Seats: v.Seats}
	for _, in := range v.Instances {
		inv.Instances = append(inv.Instances, Instance(in))
	}
	for _, h := range v.Holders {
		inv.Holders = append(inv.Holders, Holder(h))
	}
	return f.key(nil), replaceInventory(ctx, tx, inv)
}

// jwtUserValue is a principal's user in a jwt mesh (jwt.go): its key and JWTs, none secret.
type jwtUserValue struct {
	Principal string `json:"principal"`
	UserKey   string `json:"user_key"`
	JWT       string `json:"jwt"`
	Pending   string `json:"pending"`
	IssuedAt  string `json:"issued_at"`
	Operation string `json:"operation"`
}

func readJWTUsers(ctx context.Context, f *family, q querier, names []any) ([]Record, error) {
	var out []Record
	err := selectRows(ctx, q, "SELECT principal, user_key, jwt, pending, issued_at, operation FROM jwt_users", "principal", names, func(rows *sql.Rows) error {
		var v jwtUserValue
		if err := rows.Scan(&v.Principal, &v.UserKey, &v.JWT, &v.Pending, &v.IssuedAt, &v.Operation); err != nil {
			return err
		}
		r, err := f.record(v.Principal, v)
		out = append(out, r)
		return err
	})
	return out, err
}

func restoreJWTUser(ctx context.Context, f *family, tx *sql.Tx, data []byte) (string, error) {
	var v jwtUserValue
	if err := json.Unmarshal(data, &v); err != nil {
		return "", err
	}
	_, err := tx.ExecContext(ctx, "INSERT INTO jwt_users (principal, user_key, jwt, pending, issued_at, operation) VALUES (?, ?, ?, ?, ?, ?)",
		v.Principal, v.UserKey, v.JWT, v.Pending, v.IssuedAt, v.Operation)
	return f.key(v.Principal), err
}

// jwtRevokedValue is a user key revoked, of principal, as of at (Unix seconds); settled once
// a proven push carried it.
type jwtRevokedValue struct {
	UserKey   string `json:"user_key"`
	Principal string `json:"principal"`
	At        int64  `json:"at"`
	Settled   bool   `json:"settled"`
}

func readJWTRevoked(ctx context.Context, f *family, q querier, names []any) ([]Record, error) {
	var out []Record
	err := selectRows(ctx, q, "SELECT user_key, principal, at, settled FROM jwt_revoked", "user_key", names, func(rows *sql.Rows) error {
		var v jwtRevokedValue
		if err := rows.Scan(&v.UserKey, &v.Principal, &v.At, &v.Settled); err != nil {
			return err
		}
		r, err := f.record(v.UserKey, v)
		out = append(out, r)
		return err
	})
	return out, err
}

func restoreJWTRevoked(ctx context.Context, f *family, tx *sql.Tx, data []byte) (string, error) {
	var v jwtRevokedValue
	if err := json.Unmarshal(data, &v); err != nil {
		return "", err
	}
	_, err := tx.ExecContext(ctx, "INSERT INTO jwt_revoked (user_key, principal, at, settled) VALUES (?, ?, ?, ?)",
		v.UserKey, v.Principal, v.At, v.Settled)
	return f.key(v.UserKey), err
}
