package reconcile

import (
	"errors"
	"strings"
	"testing"
)

// A description cut down to one node (what an emptied file, a wrong directory or a merge
// that lost a file looks like) would delete most of the mesh: the apply refuses it whole,
// with the counts, and performs it only when the operator allows it.
func TestAnApplyDeletingMostOfTheMeshIsRefusedUnlessAllowed(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, quickMesh)
	s := f.connect(ctx)
	f.mustApply(ctx, s)

	f.write("bus:\n  listen: \"127.0.0.1:-1\"\nnodes:\n  - name: alpha\n")
	res, counting, err := f.apply(ctx, s, RunOptions{})
	if !errors.Is(err, ErrBlocked) || counting.Mutations.Load() != 0 {
		t.Fatalf("a plan deleting most of the mesh: %v, %d mutating call(s); want it refused whole", err, counting.Mutations.Load())
	}
	m := res.Plan.MassDelete
	if m == nil || m.Refused == "" || !strings.Contains(err.Error(), "--allow-mass-delete") {
		t.Fatalf("the refusal does not give the counts and the way out: %v %+v", err, m)
	}
	t.Logf("refused: %v", err)
	if _, err := mustStream(ctx, t, f.js(s), "SEAT_MAILER").Info(ctx); err != nil {
		t.Fatalf("the refused apply deleted the seat's stream: %v", err)
	}

	if _, _, err := f.apply(ctx, s, RunOptions{AllowMassDelete: true}); err != nil {
		t.Fatalf("with --allow-mass-delete: %v", err)
	}
	f.mustConverge(ctx, s)
}
