package controller

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
	"github.com/meshbus/meshctl/wire"
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
	pub, _, err := wire.GenerateKey()
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

// A credential revoked in the store by another process (`credentials rotate`, which reloads the
// bus through its control socket and tells watch nothing) is noticed by the controller on its
// own: it declares a new one in a new generation without being handed a description again, and
// the old one no longer joins.
func TestARevokedCredentialIsDeclaredAgainWithoutAReconcile(t *testing.T) {
	t.Parallel()
	f := start(t, twoNodes, func(c *Config) { c.CredentialPoll = 50 * time.Millisecond })
	f.ctrl.Mesh(f.mesh)
	pub, priv, nm, _ := f.enrolled("one")
	node := f.joinAs(nm)
	d1 := takeDeclaration(t, node, "one", 0)
	_, before := f.instance(d1, "one.shop", pub, priv)

	ctx := context.Background()
	if _, err := f.store.Revoke(ctx, "one.shop"); err != nil {
		t.Fatal(err)
	}
	if err := f.sync(ctx); err != nil {
		t.Fatal(err)
	}
	d2 := takeDeclaration(t, node, "one", d1.Generation)
	_, after := f.instance(d2, "one.shop", pub, priv)
	if after.Password == before.Password {
		t.Fatal("declared again with the revoked password")
	}
	f.joinAs(after)
	if _, err := host.Join(ctx, before); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("the revoked credential still joins: %v", err)
	}
}

// A change the bus refused because another meshctl writes the store there (state.ErrFenced)
// asks for a reconcile on the loop's goroutine, as Config.Sync says of every Sync: the loop
// waits for it, at most the sync timeout, and no goroutine is left running Sync that nothing
// waits for once Run has returned.
func TestAFencedChangeIsSyncedOnTheLoop(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var loop string     // the goroutine the loop's events are observed on
	var synced []string // the goroutines Sync ran on since the store was fenced out
	fenced := make(chan struct{})
	f := start(t, twoNodes, func(c *Config) {
		observe, sync := c.Observe, c.Sync
		c.Observe = func(e Event) {
			mu.Lock()
			loop = goroutine()
			mu.Unlock()
			observe(e)
		}
		c.Sync = func(ctx context.Context) error {
			select {
			case <-fenced:
				mu.Lock()
				synced = append(synced, goroutine())
				mu.Unlock()
			default:
			}
			return sync(ctx)
		}
	})
	enrolAndDeclare(t, f, "one", 1)
	f.store.SetReplica(fencedOut{})
	close(fenced)
	f.report(f.join(render.NodeUser("one")), "one", wire.Report{Generation: 1})
	f.waitEvent(0, func(e Event) bool { return e.Kind == KindReport && e.Settle.Verb == Nak })
	testwait.Until(t, "a Sync after the fenced report", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(synced) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	for _, g := range synced {
		if g != loop {
			t.Fatalf("Sync ran on goroutine %s, not on the loop's (%s)", g, loop)
		}
	}
}

// fencedOut is the store's copy on the bus once another meshctl fenced this one out: it
// refuses every write.
type fencedOut struct{}

func (fencedOut) Write(context.Context, []state.Record) error {
	return fmt.Errorf("writing to the store's bucket: %w", state.ErrFenced)
}

// goroutine is the number of the calling goroutine, as its stack trace names it.
func goroutine() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(buf), "goroutine "), " ")
	return id
}
