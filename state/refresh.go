package state

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
)

// Keeping a standby's store equal to the copy on the bus, which another control host writes:
// the standby's store is not rebuilt but refreshed, so that it keeps what is its own (the
// password files, the refusals it learnt) and stays the same file for the processes that have
// it open.

// ErrAnotherStore is returned (wrapped) by Refresh when the records are a copy of another
// store than this one: made equal to them, the store would hold another's hashes under its own
// identity, and apply them to buses that another store manages.
var ErrAnotherStore = errors.New("the records are a copy of another state store")

// refreshedTables is every table the families restore into (records.go), each before the
// tables its rows refer to, so that deleting them in this order never breaks a foreign key.
// The identity, the refusals, the dead letters and the replica's mark are not among them: the first is equal
// to the records' by the time they are deleted, the others are this store's own.
var refreshedTables = []string{
	"declared_credentials", "declarations", "enrolments", "reports",
	"holder_changes", "applies",
	"inventory_holders", "inventory_instances", "inventory_seats", "inventory_nodes",
	"credentials", "revocations", "jwt_users", "jwt_revoked",
}

// Refresh makes the store equal to records, a replica's whole content as the bus holds it
// (taken as Restore takes them), in one write transaction, and reports whether anything changed.
// It is for a standby control host, whose store follows the copy on the bus that another host
// writes: that copy is the authority, so a row the store holds and the records do not is gone
// afterwards, the applies this store kept to itself among them; ids given later go on above the
// highest this store ever gave, so none is reused. Nothing changes on an error, and records of
// another store's identity are refused with ErrAnotherStore.
//
// Refusals, dead letters and the password files are not records and are kept. Where the
// records hold another controller hash than dir/controller.password was minted with (the
// controller rotated on another host), StoredControllerPassword and ControllerPassword refuse
// the file (ErrControllerMismatch), and the operator's new password is taken back with
// AdoptControllerPassword.
func (s *Store) Refresh(ctx context.Context, records []Record) (changed bool, err error) {
	what := fmt.Sprintf("refreshing the store in %s from the bus", s.dir)
	byFamily, err := restoredRecords(records)
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	identity := byFamily[&identityRecord][0]
	theirs, err := IdentityIn(identity.Value)
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	// The identity is made once with a store and never changed (migration 5): read before
	// the transaction, it is still this store's inside it.
	ours, err := s.ID(ctx)
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	if theirs != ours {
		return false, fmt.Errorf("%s: %w: the records are of store %s, and this store is %s", what, ErrAnotherStore, theirs, ours)
	}
	var content []Record
	for _, rs := range byFamily {
		content = append(content, rs...)
	}
	sortRecords(content)
	// The identity is equal: restored, it would be deleted and inserted again for nothing.
	delete(byFamily, &identityRecord)

	// Under replicaMu, as a change is: this Store's changes and the refresh come one after
	// the other, so that no change is between its commit and its replica's answer when the
	// refresh replaces its rows and clears the mark that the replica may be behind.
	s.replicaMu.Lock()
	defer s.replicaMu.Unlock()
	err = s.inWriteTx(ctx, func(tx *sql.Tx) error {
		current, err := snapshot(ctx, tx)
		if err != nil {
			return err
		}
		if slices.EqualFunc(current, content, func(a, b Record) bool {
			return a.Key == b.Key && bytes.Equal(a.Value, b.Value)
		}) {
			// Equal to its replica, whatever a refused change left this Store believing.
			_, err := tx.ExecContext(ctx, "UPDATE replica SET behind = 0 WHERE behind = 1")
			return err
		}
		changed = true
		for _, table := range refreshedTables {
			if _, err := tx.ExecContext(ctx, "DELETE FROM "+table); err != nil {
				return fmt.Errorf("clearing %s: %w", table, err)
			}
		}
		return restoreContent(ctx, tx, byFamily)
	})
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	s.replicaBehind = false
	return changed, nil
}
