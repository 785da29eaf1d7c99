package state

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// ID is the store's identity: made once, with the store (migration 5), and kept by every copy
// of the state directory — a restore from backup is the same store. It names the store as the
// manager of the buses it applies to.
func (s *Store) ID(ctx context.Context) (string, error) {
	var id string
	if err := s.db.QueryRowContext(ctx, "SELECT id FROM identity LIMIT 1").Scan(&id); err != nil {
		return "", fmt.Errorf("reading the store's identity in %s: %w", s.dir, err)
	}
	return id, nil
}

// CopyID names this copy of the store: this file, told apart from the other copies of the same
// store (restored from its copy on the bus) that share its ID.
func (s *Store) CopyID(ctx context.Context) (string, error) {
	var id string
	if err := s.db.QueryRowContext(ctx, "SELECT copy FROM replica").Scan(&id); err != nil {
		return "", fmt.Errorf("reading which copy of the store %s holds: %w", s.dir, err)
	}
	return id, nil
}

// Known returns every principal whose credential this store minted and still holds, or took
// away (revoked, or an enrolment identity locked again by its node's enrolment): the principals
// whose entry on a server this store may replace. Any other principal's working hash on a
// server is a credential this store knows nothing of, and a plan must not lock it out.
func (s *Store) Known(ctx context.Context) (map[string]bool, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT principal FROM credentials UNION SELECT principal FROM revocations")
	if err != nil {
		return nil, fmt.Errorf("reading the principals the store knows: %w", err)
	}
	defer rows.Close()
	known := map[string]bool{}
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return nil, fmt.Errorf("reading the principals the store knows: %w", err)
		}
		known[p] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the principals the store knows: %w", err)
	}
	return known, nil
}

// recordRevocation notes, in tx and in c, that this store took principal's credential away at
// at.
func recordRevocation(ctx context.Context, tx *sql.Tx, c *changes, principal string, at time.Time) error {
	c.add(&revocations, principal)
	_, err := tx.ExecContext(ctx, `INSERT INTO revocations (principal, revoked_at) VALUES (?, ?)
		ON CONFLICT (principal) DO UPDATE SET revoked_at = excluded.revoked_at`, principal, formatTime(at))
	return err
}
