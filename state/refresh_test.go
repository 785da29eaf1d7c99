package state

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/bcrypt"
)

// changeFurther changes s as the host writing the copy on the bus goes on doing: a credential
// minted, another revoked, a second node enrolled and declared, an apply that moves a seat.
func changeFurther(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.Mint(ctx, []string{"three.shop", "_enrol.two"}, bcrypt.MinCost, "issue"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Revoke(ctx, "one.shop"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnrolNode(ctx, NodeEnrolment{Node: "two", EnrolPrincipal: "_enrol.two", NodePrincipal: "node.two", PublicKey: testKey}, bcrypt.MinCost); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordDeclaration(ctx, "two", testDeclared); err != nil {
		t.Fatal(err)
	}
	id, err := s.RecordApply(ctx, ApplyRecord{Started: time.Now(), Finished: time.Now(), User: "ops", Summary: "1 moved", Outcome: "applied"})
	if err != nil {
		t.Fatal(err)
	}
	moved := Inventory{
		Nodes:     []string{"one", "two"},
		Instances: []Instance{{Node: "one", Module: "shop"}, {Node: "two", Module: "shop"}},
		Seats:     []string{"shop.primary"},
		Holders:   []Holder{{Seat: "shop.primary", Node: "two", Module: "shop"}},
	}
	if err := s.SaveInventory(ctx, moved, id); err != nil {
		t.Fatal(err)
	}
}

// replicaBehind is the store's mark that its copy on the bus may be behind it.
func replicaBehind(t *testing.T, s *Store) int {
	t.Helper()
	var behind int
	if err := s.db.QueryRowContext(context.Background(), "SELECT behind FROM replica").Scan(&behind); err != nil {
		t.Fatal(err)
	}
	return behind
}

func TestRefreshMakesTheStoreEqualToTheRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary := newStore(t)
	populate(t, primary)
	standby := restored(t, snapshotOf(t, primary))
	controller, err := primary.ControllerPassword(ctx, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	if err := standby.AdoptControllerPassword(ctx, controller); err != nil {
		t.Fatal(err)
	}
	// An apply the standby kept to itself: the copy on the bus never had it.
	if _, err := standby.RecordApply(ctx, ApplyRecord{Started: time.Now(), Finished: time.Now(), Outcome: "in sync", Converged: true}); err != nil {
		t.Fatal(err)
	}
	changeFurther(t, primary)

	changed, err := standby.Refresh(ctx, snapshotOf(t, primary))
	if err != nil || !changed {
		t.Fatalf("Refresh = %v, %v; want true, nil", changed, err)
	}
	if diff := cmp.Diff(snapshotOf(t, primary), snapshotOf(t, standby)); diff != "" {
		t.Errorf("refreshed snapshot (-primary +standby):\n%s", diff)
	}
	if diff := cmp.Diff(viewOf(t, primary), viewOf(t, standby)); diff != "" {
		t.Errorf("refreshed store (-primary +standby):\n%s", diff)
	}
	// The controller's hash is the same, so the password file the standby adopted still is.
	if got, err := standby.StoredControllerPassword(ctx); err != nil || got != controller {
		t.Errorf("StoredControllerPassword after a refresh = %q, %v; want the controller's", got, err)
	}

	// Equal again: nothing changes, whether the records come as ReadAll gives them or as a
	// log with a key written twice and one deleted.
	if changed, err := standby.Refresh(ctx, snapshotOf(t, primary)); err != nil || changed {
		t.Errorf("a second Refresh = %v, %v; want false, nil", changed, err)
	}
	records := snapshotOf(t, primary)
	i := slices.IndexFunc(records, func(r Record) bool { return r.Key == "report.one" })
	logged := append(slices.Clone(records),
		Record{Key: "report.one", Value: []byte(`{"node":"one"}`)}, records[i],
		Record{Key: "credential.gone", Value: []byte(`{"principal":"gone"}`)}, Record{Key: "credential.gone"})
	if changed, err := standby.Refresh(ctx, logged); err != nil || changed {
		t.Errorf("Refresh with a log of the same content = %v, %v; want false, nil", changed, err)
	}
	if diff := cmp.Diff(snapshotOf(t, primary), snapshotOf(t, standby)); diff != "" {
		t.Errorf("snapshot after refreshing an equal store (-primary +standby):\n%s", diff)
	}
}

func TestRefreshRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary := newStore(t)
	populate(t, primary)
	before := snapshotOf(t, primary)
	changeFurther(t, primary)
	good := snapshotOf(t, primary)
	replaced := func(key string, value []byte) []Record {
		out := slices.Clone(good)
		for i := range out {
			if out[i].Key == key {
				out[i].Value = value
			}
		}
		return out
	}
	other := newStore(t)
	populate(t, other)
	otherID := viewOf(t, other).ID
	primaryID := viewOf(t, primary).ID
	tests := []struct {
		name    string
		records []Record
		want    []string
		is      error
	}{
		{"another store's records", snapshotOf(t, other), []string{otherID, primaryID}, ErrAnotherStore},
		{"an unknown kind", append(slices.Clone(good), Record{Key: "lease.x", Value: []byte("{}")}), []string{"lease.x"}, nil},
		{"no identity", slices.DeleteFunc(slices.Clone(good), func(r Record) bool { return r.Key == "identity" }), []string{`no "identity" record`}, nil},
		{"an identity naming no store", replaced("identity", []byte(`{}`)), []string{"names no store"}, nil},
		// Found once the rows are deleted: the transaction is rolled back.
		{"a record under another's key", replaced("credential.three.shop", []byte(`{"principal":"four.shop","hash":"h","minted_at":"2025-01-01T00:00:00.000000000Z","operation":"issue"}`)),
			[]string{"holds the row of credential.four.shop"}, nil},
		{"a record that is not JSON", replaced("report.one", []byte("{")), []string{"report.one"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			standby := restored(t, before)
			changed, err := standby.Refresh(ctx, tt.records)
			if err == nil || changed {
				t.Fatalf("Refresh = %v, %v; want it refused", changed, err)
			}
			if prefix := "refreshing the store in " + standby.Dir() + " from the bus: "; !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("Refresh: %v, want it to begin %q", err, prefix)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Refresh: %v, want it to say %q", err, w)
				}
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("Refresh: %v, want %v", err, tt.is)
			}
			if diff := cmp.Diff(before, snapshotOf(t, standby)); diff != "" {
				t.Errorf("a refused refresh changed the store (-before +after):\n%s", diff)
			}
		})
	}
}

// A refreshed store is its replica's content: keeping that replica next sends nothing.
func TestRefreshLeavesTheStoreInStepWithTheReplica(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary := newStore(t)
	populate(t, primary)
	standby := restored(t, snapshotOf(t, primary))
	// A change of the standby's own, with no replica kept: marked behind for good.
	if err := standby.RecordReport(ctx, Report{Node: "stray", ReportedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if got := replicaBehind(t, standby); got != 1 {
		t.Fatalf("behind after a change without a replica = %d, want 1", got)
	}

	if changed, err := standby.Refresh(ctx, snapshotOf(t, primary)); err != nil || !changed {
		t.Fatalf("Refresh = %v, %v; want true, nil", changed, err)
	}
	if got := replicaBehind(t, standby); got != 0 {
		t.Errorf("behind after a refresh = %d, want 0", got)
	}
	r := newMemReplica()
	standby.SetReplica(r)
	if err := standby.CatchUp(ctx, false); err != nil {
		t.Fatal(err)
	}
	if w := r.takeWrites(); len(w) != 0 {
		t.Errorf("a refreshed store caught its replica up with %v", w)
	}
}

// Every table the records fill is cleared by a refresh, and no other: a migration adding a
// table of records must add it to refreshedTables, or a refresh would keep its old rows.
func TestRefreshClearsEveryTableOfTheRecords(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	var tables []string
	err := queryEach(context.Background(), s.db, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name", func(rows *sql.Rows) error {
		var name string
		if err := rows.Scan(&name); err != nil {
			return err
		}
		switch name {
		case "identity", "refusals", "dead_letters", "dead_letter_messages", "replica", "sqlite_sequence":
		default:
			tables = append(tables, name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(tables, slices.Sorted(slices.Values(refreshedTables))); diff != "" {
		t.Errorf("tables a refresh clears (-schema +refreshedTables):\n%s", diff)
	}
}
