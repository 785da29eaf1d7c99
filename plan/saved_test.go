package plan

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// A saved plan reads back as written and matches the plan it was made from; what at-stake
// counts say may differ, a change more or less may not, and neither may the store.
func TestASavedPlanMatchesOnlyItsOwnPlan(t *testing.T) {
	t.Parallel()
	seed := description(t, "../examples/seed")
	added := seedWith(t, "testdata/constructed/seed-module-added/ledger.yaml")
	before := TargetOf(render.Derive(seed), nil).ForMesh("store-1")
	target := TargetOf(render.Derive(added), nil).ForMesh("store-1")
	p := Compute(target, LiveOf(before), Options{})
	saved, err := Save(p, target, []model.File{{Name: "mesh.yaml", Data: []byte("nodes: []\n")}}, "")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := saved.Write(&b); err != nil {
		t.Fatal(err)
	}
	back, err := ReadSaved(&b)
	if err != nil {
		t.Fatal(err)
	}
	if err := back.Matches(p, target); err != nil {
		t.Fatalf("a saved plan against its own plan: %v", err)
	}

	counted := Compute(target, LiveOf(before), Options{})
	counted.Changes[0].AtStake = &AtStake{Messages: 7}
	if err := back.Matches(counted, target); err != nil {
		t.Errorf("a plan differing only in what is at stake: %v", err)
	}
	fewer := Compute(target, LiveOf(before), Options{})
	fewer.Changes = fewer.Changes[1:]
	if err := back.Matches(fewer, target); !errors.Is(err, ErrStale) || !strings.Contains(err.Error(), "is no longer to change") {
		t.Errorf("a plan with a change fewer: %v; want stale, naming it", err)
	}
	if err := back.Matches(p, target.ForMesh("store-2")); !errors.Is(err, ErrStale) {
		t.Errorf("the plan for another store: %v; want stale", err)
	}
	if _, err := ReadSaved(strings.NewReader(`{"schema":"meshctl.saved-plan/v0","plan":{},"description":[{"name":"a","data":""}]}`)); err == nil {
		t.Error("a saved plan of another schema was read")
	}
}
