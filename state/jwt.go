package state

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// JWT principals (bus.auth: jwt). Each principal is a user of the mesh's account: the store
// keeps its user public key and the user JWT last issued for it, neither secret (the seed
// exists once, in what issued it). The servers learn of a user only through the account's
// JWT, so the store follows what a push proved:
//
//   - A fresh key (IssueJWTUser) needs no push: any server that holds the account takes a
//     user JWT its signer signed. The principal's earlier key, if any, is kept to revoke.
//   - A new JWT for the same key (grants changed) is pending (SetJWTPending) until the push
//     revoking the key's older JWTs is proven; then it is the principal's (SettleJWT). A crash
//     between leaves it pending, and the next run reads the servers' JWT to settle it.
//   - A revoked key (RevokeJWTUsers) stays to revoke until a proven push carries it, and is
//     kept after, settled: the trace of its user's deletion a copy of the store catching up
//     is told of (replica.go's catchUp).
//
// Every change is a change of the store's records (jwt-user.<principal>,
// jwt-revoked.<key>), sent to its replica as the others are.

// JWTUser is a principal's user in a jwt mesh.
type JWTUser struct {
	Principal string
	UserKey   string
	// JWT is the user JWT last issued and in force; Pending a newer one for the same key,
	// issued but not yet proven in force.
	JWT, Pending string
	IssuedAt     time.Time
	Operation    string
}

// ByHand reports a user whose credential an operator issued (and delivered) by hand.
func (u JWTUser) ByHand() bool { return issuedByHand(u.Operation) }

// JWTRevoked is a user key to revoke, of principal, as of At (Unix seconds).
type JWTRevoked struct {
	UserKey, Principal string
	At                 int64
}

// JWTUsers returns every principal's user, by principal.
func (s *Store) JWTUsers(ctx context.Context) (map[string]JWTUser, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT principal, user_key, jwt, pending, issued_at, operation FROM jwt_users")
	if err != nil {
		return nil, fmt.Errorf("reading the users' JWTs: %w", err)
	}
	defer rows.Close()
	out := map[string]JWTUser{}
	for rows.Next() {
		var u JWTUser
		var at string
		if err := rows.Scan(&u.Principal, &u.UserKey, &u.JWT, &u.Pending, &at, &u.Operation); err != nil {
			return nil, fmt.Errorf("reading the users' JWTs: %w", err)
		}
		if u.IssuedAt, err = parseTime(at); err != nil {
			return nil, corrupt(fmt.Errorf("the JWT of %s: %w", u.Principal, err))
		}
		out[u.Principal] = u
	}
	return out, rows.Err()
}

// JWTRevokedKeys returns the keys still to revoke: those no proven push carried yet.
func (s *Store) JWTRevokedKeys(ctx context.Context) ([]JWTRevoked, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT user_key, principal, at FROM jwt_revoked WHERE settled = 0 ORDER BY user_key")
	if err != nil {
		return nil, fmt.Errorf("reading the keys to revoke: %w", err)
	}
	defer rows.Close()
	var out []JWTRevoked
	for rows.Next() {
		var r JWTRevoked
		if err := rows.Scan(&r.UserKey, &r.Principal, &r.At); err != nil {
			return nil, fmt.Errorf("reading the keys to revoke: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// IssueJWTUser records u, a fresh key and its JWT, as principal's user; the key it held
// before, if another, is kept to revoke as of now.
func (s *Store) IssueJWTUser(ctx context.Context, u JWTUser) error {
	if u.Principal == "" || u.UserKey == "" || u.JWT == "" {
		return errors.New("recording a user JWT: principal, key and JWT are required")
	}
	return s.change(ctx, "recording the JWT of "+u.Principal, func(tx *sql.Tx, c *changes) error {
		return issueJWTUser(ctx, tx, c, u, time.Now())
	})
}

func issueJWTUser(ctx context.Context, tx *sql.Tx, c *changes, u JWTUser, now time.Time) error {
	if err := revokeJWTUser(ctx, tx, c, u.Principal, now.Unix(), u.UserKey); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO jwt_users (principal, user_key, jwt, pending, issued_at, operation)
		VALUES (?, ?, ?, '', ?, ?)`, u.Principal, u.UserKey, u.JWT, formatTime(u.IssuedAt), u.Operation)
	if err != nil {
		return fmt.Errorf("recording the JWT of %s: %w", u.Principal, err)
	}
	c.add(&jwtUserRecords, u.Principal)
	return nil
}

// enrolJWTNode is EnrolNode's part in a jwt mesh: the enrolment identity's user is the
// credential spent (ErrNoEnrolmentCredential where it has none), its key kept to revoke as of
// now, and e.JWT recorded as the node's user, with OpEnrol.
func enrolJWTNode(ctx context.Context, tx *sql.Tx, c *changes, e NodeEnrolment, now time.Time) error {
	var key string
	err := tx.QueryRowContext(ctx, "SELECT user_key FROM jwt_users WHERE principal = ?", e.EnrolPrincipal).Scan(&key)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w (%s)", ErrNoEnrolmentCredential, e.EnrolPrincipal)
	}
	if err != nil {
		return err
	}
	if err := revokeJWTUser(ctx, tx, c, e.EnrolPrincipal, now.Unix(), ""); err != nil {
		return err
	}
	u := *e.JWT
	u.Principal, u.Operation = e.NodePrincipal, opEnrol
	if u.UserKey == "" || u.JWT == "" {
		return errors.New("enrolling a node: its user's key and JWT are required")
	}
	return issueJWTUser(ctx, tx, c, u, now)
}

// SetJWTPending records token, a JWT for principal's key, as pending: issued, and in force
// only once SettleJWT says the push revoking the key's older JWTs was proven.
func (s *Store) SetJWTPending(ctx context.Context, principal, token string) error {
	return s.change(ctx, "recording the new JWT of "+principal, func(tx *sql.Tx, c *changes) error {
		res, err := tx.ExecContext(ctx, "UPDATE jwt_users SET pending = ? WHERE principal = ?", token, principal)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return fmt.Errorf("%s has no user", principal)
		}
		c.add(&jwtUserRecords, principal)
		return nil
	})
}

// SettleJWT ends what a push left open, in one transaction: the pending JWTs of promote are
// now their principals' (proven in force), those of drop are dropped (never in force), and
// the keys of revoked are revoked on every server, so no longer to revoke (kept, settled,
// as the trace a copy of the store catching up is told of). A call that changes no row sends
// the replica nothing.
func (s *Store) SettleJWT(ctx context.Context, promote, drop, revoked []string) error {
	now := formatTime(time.Now())
	return s.change(ctx, "settling the users' JWTs", func(tx *sql.Tx, c *changes) error {
		exec := func(f *family, name string, query string, args ...any) error {
			res, err := tx.ExecContext(ctx, query, args...)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n > 0 {
				c.add(f, name)
				return err
			}
			return nil
		}
		for _, p := range promote {
			if err := exec(&jwtUserRecords, p, "UPDATE jwt_users SET jwt = pending, pending = '', issued_at = ? WHERE principal = ? AND pending != ''", now, p); err != nil {
				return fmt.Errorf("recording the new JWT of %s: %w", p, err)
			}
		}
		for _, p := range drop {
			if err := exec(&jwtUserRecords, p, "UPDATE jwt_users SET pending = '' WHERE principal = ? AND pending != ''", p); err != nil {
				return fmt.Errorf("dropping the new JWT of %s: %w", p, err)
			}
		}
		for _, k := range revoked {
			if err := exec(&jwtRevokedRecords, k, "UPDATE jwt_revoked SET settled = 1 WHERE user_key = ? AND settled = 0", k); err != nil {
				return fmt.Errorf("recording the revocation of %s: %w", k, err)
			}
		}
		return nil
	})
}

// RevokeJWTUsers drops principals' users, each key kept to revoke as of at (Unix seconds),
// in one transaction; it reports the principals that had one. On ErrReplicaBehind the
// revocations stand, and the principals are reported.
func (s *Store) RevokeJWTUsers(ctx context.Context, principals []string, at int64) ([]string, error) {
	var had []string
	err := s.change(ctx, fmt.Sprintf("revoking %d users", len(principals)), func(tx *sql.Tx, c *changes) error {
		had = nil
		for _, p := range principals {
			var key string
			err := tx.QueryRowContext(ctx, "SELECT user_key FROM jwt_users WHERE principal = ?", p).Scan(&key)
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return err
			}
			if err := revokeJWTUser(ctx, tx, c, p, at, ""); err != nil {
				return err
			}
			had = append(had, p)
		}
		return nil
	})
	if err != nil && !errors.Is(err, ErrReplicaBehind) {
		return nil, err
	}
	return had, err
}

// revokeJWTUser deletes principal's user, its key kept to revoke as of at unless it is
// except (the key replacing it), noting both in c. A key revoked again later than a proven
// push revoked it is to revoke again.
func revokeJWTUser(ctx context.Context, tx *sql.Tx, c *changes, principal string, at int64, except string) error {
	var key string
	err := tx.QueryRowContext(ctx, "SELECT user_key FROM jwt_users WHERE principal = ?", principal).Scan(&key)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("revoking the user of %s: %w", principal, err)
	}
	if key != except {
		if _, err := tx.ExecContext(ctx, `INSERT INTO jwt_revoked (user_key, principal, at) VALUES (?, ?, ?)
			ON CONFLICT (user_key) DO UPDATE SET at = max(at, excluded.at), settled = settled AND excluded.at <= at`, key, principal, at); err != nil {
			return fmt.Errorf("revoking the user of %s: %w", principal, err)
		}
		c.add(&jwtRevokedRecords, key)
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM jwt_users WHERE principal = ?", principal); err != nil {
		return fmt.Errorf("revoking the user of %s: %w", principal, err)
	}
	c.add(&jwtUserRecords, principal)
	return nil
}

// OpControllerFirstUse is the operation of the controller's own credential minted on first
// use: meshctl's, never by hand.
const OpControllerFirstUse = opControllerFirstUse
