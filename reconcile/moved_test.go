package reconcile

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshbus/meshctl/plan"
)

// Item 10 of issue 22: a state directory restored from a backup to another path rewrote the
// accounts file on its next apply, "edited by hand?", and reloaded the bus for nothing. The
// directory is what meshctl keeps; where it is kept is not part of it.
func TestAMovedStateDirectoryConvergesWithNothingRewritten(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, quickMesh)
	s := f.connect(ctx)
	f.mustApply(ctx, s)
	f.mustConverge(ctx, s)
	s.Close()
	f.store.Close()

	moved := filepath.Join(t.TempDir(), "restored")
	if out, err := exec.Command("cp", "-a", f.stateDi, moved).CombinedOutput(); err != nil {
		t.Fatalf("copying the state directory: %v: %s", err, out)
	}
	g := fixtureWithState(t, quickMesh, moved)
	g.dir = f.dir
	s = g.connect(ctx)
	p, err := s.Plan(ctx, g.mesh(), plan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Empty() {
		var b strings.Builder
		_ = p.Text(&b, false)
		t.Errorf("a state directory moved elsewhere plans changes:\n%s", b.String())
	}
	g.mustConverge(ctx, s)
}
