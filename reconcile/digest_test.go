package reconcile

import (
	"os"
	"strings"
	"testing"

	"github.com/meshbus/meshctl/plan"
)

// A converged plan knows the accounts config in use to be its rendering from two digests —
// the file's, read through SHA-256, and the rendering's, written a user at a time — so it
// holds neither text nor the principals. A change of the description, or a file edited by
// hand, is read whole and planned user by user, as before.
func TestAConvergedPlanReadsTheAccountsConfigByDigest(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, quickMesh)
	s := f.connect(ctx)
	f.mustApply(ctx, s)

	p, tg, err := s.plan(ctx, f.mesh(), plan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Empty() {
		t.Fatalf("the applied mesh plans %d change(s)", len(p.Changes))
	}
	if tg.Bus.Principals != nil {
		t.Error("a converged plan derived the principals")
	}
	live, err := s.readLive(ctx, nil, nil, func() (plan.Target, bool) { return tg, true })
	if err != nil {
		t.Fatal(err)
	}
	if !live.AccountsRendered || live.Accounts != nil || live.AccountsNotServed != "" {
		t.Fatalf("the accounts config in use was read as rendered %v, %d bytes, not served %q; want known by digest",
			live.AccountsRendered, len(live.Accounts), live.AccountsNotServed)
	}

	// A description that changes a user's grants.
	f.write(strings.Replace(quickMesh, "emits: [order.placed]", "emits: [order.placed, order.paid]", 1))
	changed, tg, err := s.plan(ctx, f.mesh(), plan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if changed.Accounts == nil || tg.Bus.Principals == nil {
		t.Fatalf("a change of grants planned no accounts config (%d changes)", len(changed.Changes))
	}
	f.write(quickMesh)

	// The same file, edited by hand: no longer the one meshctl recorded.
	data, err := os.ReadFile(s.Accounts.Path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.Accounts.Path, append([]byte("# edited\n"), data...), 0o600); err != nil {
		t.Fatal(err)
	}
	p, _, err = s.plan(ctx, f.mesh(), plan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Empty() || p.Accounts == nil {
		t.Fatal("a file edited by hand was taken for the rendering")
	}
}
