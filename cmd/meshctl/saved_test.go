package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshbus/meshctl/bus/bustest"
	"github.com/nats-io/nats.go/jetstream"
)

// A plan saved for review (`diff --out`) is applied exactly (`apply --plan`) after the
// description moved on: only what it held is made. A saved plan the bus drifted from — a
// consumer deleted by hand since — is refused, exit 2, naming the consumer, and changes
// nothing.
func TestASavedPlanAppliesWhatWasReviewedAndNothingElse(t *testing.T) {
	t.Parallel()
	srv := bustest.StartTestServer(t, t.TempDir())
	base := srv.Mesh()
	withAudit := base + "  - name: audit\n    on: [alpha]\n    follows: [shop/order.placed]\n"
	withBoth := withAudit + "  - name: ledger\n    on: [alpha]\n    follows: [shop/order.placed]\n"
	dir := writeMesh(t, map[string]string{"mesh.yaml": base})
	st := t.TempDir()
	run := func(want int, args ...string) string {
		t.Helper()
		code, out, errOut := meshctl(t, append(args, "--state", st)...)
		if code != want {
			t.Fatalf("meshctl %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, want, out, errOut)
		}
		return out + errOut
	}
	run(exitOK, "apply", "-f", dir, "--bcrypt-cost", "4")

	// The review: audit added.
	writeFile(t, filepath.Join(dir, "mesh.yaml"), withAudit)
	reviewed := filepath.Join(t.TempDir(), "plan.json")
	run(exitChanges, "diff", "-f", dir, "--out", reviewed)
	// The tree moves on before the apply: ledger too.
	writeFile(t, filepath.Join(dir, "mesh.yaml"), withBoth)
	out := run(exitOK, "apply", "--plan", reviewed)
	if !strings.Contains(out, "EVENTS/alpha_audit") || strings.Contains(out, "ledger") {
		t.Fatalf("the saved plan's apply did not make exactly audit's consumer:\n%s", out)
	}
	js := controllerJS(t, srv, st)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.Consumer(ctx, "EVENTS", "alpha_ledger"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("ledger's consumer, not in the saved plan: %v; want it not made", err)
	}
	// Applied once, a saved plan is stale: the bus is no longer what it was made against.
	if out := run(exitError, "apply", "--plan", reviewed); !strings.Contains(out, "has changed since the plan was made") {
		t.Fatalf("a saved plan applied twice:\n%s", out)
	}

	// A plan of ledger, then audit's consumer deleted by hand before it is applied.
	drifted := filepath.Join(t.TempDir(), "plan.json")
	run(exitChanges, "diff", "-f", dir, "--out", drifted)
	if err := js.DeleteConsumer(ctx, "EVENTS", "alpha_audit"); err != nil {
		t.Fatal(err)
	}
	out = run(exitError, "apply", "--plan", drifted)
	if !strings.Contains(out, "has changed since the plan was made") || !strings.Contains(out, "consumer EVENTS/alpha_audit would now change too") ||
		!strings.Contains(out, "nothing was changed") {
		t.Fatalf("a saved plan the bus drifted from:\n%s", out)
	}
	for _, name := range []string{"alpha_audit", "alpha_ledger"} {
		if _, err := js.Consumer(ctx, "EVENTS", name); !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Errorf("consumer %s after the refused plan: %v; want it still absent", name, err)
		}
	}
}
