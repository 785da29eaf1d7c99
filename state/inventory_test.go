package state

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestInventoryNeverSaved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	inv, err := s.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Inventory{}, inv); diff != "" {
		t.Errorf("Inventory of a new store (-want +got):\n%s", diff)
	}
	changes, err := s.HolderChanges(ctx, 0)
	if err != nil || len(changes) != 0 {
		t.Errorf("HolderChanges of a new store = %v, %v", changes, err)
	}
}

func TestSaveInventoryRecordsHolderChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	in := func(node, module string) *Instance { return &Instance{Node: node, Module: module} }

	// Save 1, no apply: two seats get their first holders. Given unsorted, with a repeat.
	save1 := Inventory{
		Nodes:     []string{"two", "one"},
		Instances: []Instance{{"two", "telegram"}, {"one", "telegram"}, {"one", "builder"}, {"one", "builder"}},
		Seats:     []string{"telegram-sender", "mesh-build-machine"},
		Holders:   []Holder{{"telegram-sender", "one", "telegram"}, {"mesh-build-machine", "one", "builder"}},
	}
	start := time.Now()
	if err := s.SaveInventory(ctx, save1, 0); err != nil {
		t.Fatal(err)
	}
	got, err := s.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := Inventory{
		Nodes:     []string{"one", "two"},
		Instances: []Instance{{"one", "builder"}, {"one", "telegram"}, {"two", "telegram"}},
		Seats:     []string{"mesh-build-machine", "telegram-sender"},
		Holders:   []Holder{{"mesh-build-machine", "one", "builder"}, {"telegram-sender", "one", "telegram"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Inventory after save 1 (-want +got):\n%s", diff)
	}

	// Save 2: telegram-sender moves to two, mesh-build-machine loses its holder, a new seat
	// gets one.
	apply2, err := s.RecordApply(ctx, ApplyRecord{Summary: "save 2"})
	if err != nil {
		t.Fatal(err)
	}
	save2 := Inventory{
		Nodes:     []string{"one", "two"},
		Instances: []Instance{{"one", "builder"}, {"one", "telegram"}, {"two", "telegram"}},
		Seats:     []string{"mesh-build-machine", "telegram-sender", "alerts"},
		Holders:   []Holder{{"telegram-sender", "two", "telegram"}, {"alerts", "one", "telegram"}},
	}
	if err := s.SaveInventory(ctx, save2, apply2); err != nil {
		t.Fatal(err)
	}

	// Save 3: telegram-sender is removed with its holder; alerts keeps its holder; node two goes.
	apply3, err := s.RecordApply(ctx, ApplyRecord{Summary: "save 3"})
	if err != nil {
		t.Fatal(err)
	}
	save3 := Inventory{
		Nodes:     []string{"one"},
		Instances: []Instance{{"one", "builder"}, {"one", "telegram"}},
		Seats:     []string{"mesh-build-machine", "alerts"},
		Holders:   []Holder{{"alerts", "one", "telegram"}},
	}
	if err := s.SaveInventory(ctx, save3, apply3); err != nil {
		t.Fatal(err)
	}
	end := time.Now()

	got, err = s.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want = Inventory{
		Nodes:     []string{"one"},
		Instances: []Instance{{"one", "builder"}, {"one", "telegram"}},
		Seats:     []string{"alerts", "mesh-build-machine"},
		Holders:   []Holder{{"alerts", "one", "telegram"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Inventory after save 3 (-want +got):\n%s", diff)
	}

	changes, err := s.HolderChanges(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Newest first; within one save, the later row (by seat) first.
	wantChanges := []HolderChange{
		{Seat: "telegram-sender", From: in("two", "telegram"), To: nil, ApplyID: apply3},
		{Seat: "telegram-sender", From: in("one", "telegram"), To: in("two", "telegram"), ApplyID: apply2},
		{Seat: "mesh-build-machine", From: in("one", "builder"), To: nil, ApplyID: apply2},
		{Seat: "alerts", From: nil, To: in("one", "telegram"), ApplyID: apply2},
		{Seat: "telegram-sender", From: nil, To: in("one", "telegram"), ApplyID: 0},
		{Seat: "mesh-build-machine", From: nil, To: in("one", "builder"), ApplyID: 0},
	}
	if diff := cmp.Diff(wantChanges, changes, cmpopts.IgnoreFields(HolderChange{}, "At")); diff != "" {
		t.Errorf("HolderChanges (-want +got):\n%s", diff)
	}
	for i, c := range changes {
		if c.At.Before(start.Truncate(time.Microsecond)) || c.At.After(end) {
			t.Errorf("change %d: At = %v, want between %v and %v", i, c.At, start, end)
		}
		if i > 0 && c.At.After(changes[i-1].At) {
			t.Errorf("change %d is newer than change %d", i, i-1)
		}
	}

	// The handovers are the changes that took a seat from a holder, oldest first, from a time on.
	handovers, err := s.Handovers(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]HolderChange{wantChanges[2], wantChanges[1], wantChanges[0]}, handovers, cmpopts.IgnoreFields(HolderChange{}, "At")); diff != "" {
		t.Errorf("Handovers (-want +got):\n%s", diff)
	}
	if since, err := s.Handovers(ctx, changes[0].At); err != nil || len(since) != 1 || !since[0].At.Equal(changes[0].At) {
		t.Errorf("Handovers since the last one = %+v, %v; want that one", since, err)
	}
	if later, err := s.Handovers(ctx, changes[0].At.Add(time.Nanosecond)); err != nil || len(later) != 0 {
		t.Errorf("Handovers since after the last one = %+v, %v; want none", later, err)
	}

	limited, err := s.HolderChanges(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantChanges[:2], limited, cmpopts.IgnoreFields(HolderChange{}, "At")); diff != "" {
		t.Errorf("HolderChanges(2) (-want +got):\n%s", diff)
	}

	// Saving the same inventory again records nothing.
	if err := s.SaveInventory(ctx, save3, 0); err != nil {
		t.Fatal(err)
	}
	if again, err := s.HolderChanges(ctx, 0); err != nil || len(again) != len(changes) {
		t.Errorf("an unchanged save recorded %d changes (%v)", len(again)-len(changes), err)
	}
}

func TestSaveInventoryRefusesInconsistentInventory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	good := Inventory{
		Nodes:     []string{"one"},
		Instances: []Instance{{"one", "telegram"}},
		Seats:     []string{"telegram-sender"},
		Holders:   []Holder{{"telegram-sender", "one", "telegram"}},
	}
	if err := s.SaveInventory(ctx, good, 0); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		inv     Inventory
		applyID int64
	}{
		"instance on an unknown node": {Inventory{Instances: []Instance{{"ghost", "telegram"}}}, 0},
		"holder of an unknown seat": {Inventory{Nodes: []string{"one"}, Instances: []Instance{{"one", "telegram"}},
			Holders: []Holder{{"ghost-seat", "one", "telegram"}}}, 0},
		"holder that is not an instance": {Inventory{Nodes: []string{"one"}, Seats: []string{"telegram-sender"},
			Holders: []Holder{{"telegram-sender", "one", "telegram"}}}, 0},
		"two holders for one seat": {Inventory{Nodes: []string{"one"}, Instances: []Instance{{"one", "a"}, {"one", "b"}},
			Seats: []string{"s"}, Holders: []Holder{{"s", "one", "a"}, {"s", "one", "b"}}}, 0},
		"empty names":                            {Inventory{Nodes: []string{""}, Seats: []string{""}}, 0},
		"a holder change by an apply never made": {Inventory{Nodes: good.Nodes, Instances: good.Instances, Seats: good.Seats}, 4242},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if err := s.SaveInventory(ctx, tc.inv, tc.applyID); err == nil {
				t.Error("SaveInventory accepted it")
			}
		})
	}
	t.Cleanup(func() {
		got, err := s.Inventory(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(good, got); diff != "" {
			t.Errorf("refused saves changed the inventory (-want +got):\n%s", diff)
		}
		if changes, err := s.HolderChanges(ctx, 0); err != nil || len(changes) != 1 {
			t.Errorf("refused saves recorded changes: %d (%v), want the first save's 1", len(changes), err)
		}
	})
}
