package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/meshbus/meshctl/render"
)

// A Sync that does not return (a reconcile held up for good) keeps the loop no longer than the
// sync timeout: the enrolment is settled, the failure logged, and the loop goes on hearing the
// nodes.
func TestASyncThatNeverEndsHoldsTheLoopOnlyUntilTheTimeout(t *testing.T) {
	t.Parallel()
	f := start(t, twoNodes, func(c *Config) {
		c.SyncTimeout = 300 * time.Millisecond
		c.Sync = func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	})
	f.ctrl.Mesh(f.mesh)
	ident := f.join(render.EnrolUser("one"))
	pub, _, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if _, err := ident.Enrol(ctx, "one", pub); err != nil {
		t.Fatal(err)
	}
	_, next := f.waitEvent(0, func(e Event) bool { return e.Kind == KindEnrol && e.Settle.Verb == Ack })
	two := f.join(render.NodeUser("two"))
	if err := two.Heartbeat(ctx, "two", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	f.waitEvent(next, func(e Event) bool { return e.Kind == KindHeartbeat && e.Node == "two" })
	// The declaration pass that followed waited on Sync too, and failed with the timeout.
	e, _ := f.waitEvent(0, func(e Event) bool { return e.Kind == KindUnknown && e.Err != nil })
	if !errors.Is(e.Err, context.DeadlineExceeded) {
		t.Errorf("the declaration pass failed with %v, want the sync timeout", e.Err)
	}
}
