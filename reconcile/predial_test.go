package reconcile

import (
	"context"
	"errors"
	"testing"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/state"
)

// servedMesh is quickMesh applied to an embedded bus this process serves, as a watch would
// serve it to a command in another terminal.
func servedMesh(t *testing.T) (*fixture, *Session) {
	t.Helper()
	f := newFixture(t, quickMesh)
	served, err := Connect(testContext(t), f.mesh(), f.store, Options{Cost: 4, OwnEmbedded: true, Logf: f.logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(served.Close)
	f.ownSecrets()
	f.mustApply(testContext(t), served)
	return f, served
}

// A connection started before the description is read is the session's only when it reached
// the bus the session goes to, as the controller the store vouches for; otherwise it is
// closed and the session dials its own.
func TestAPredialIsUsedOnlyWhereItFits(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f, served := servedMesh(t)

	pre := StartPredial(ctx, f.stateDi)
	if pre == nil {
		t.Fatal("no predial to the embedded bus served from the state directory")
	}
	s, err := Connect(ctx, f.mesh(), f.store, Options{Cost: 4, ReadOnly: true, Predial: pre, Logf: f.logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Conn != pre.conn {
		t.Fatal("the session dialed again beside a predial that fits")
	}
	if _, err := s.Plan(ctx, f.mesh(), plan.Options{}); err != nil {
		t.Fatalf("planning over the predialed connection: %v", err)
	}

	// A read-only plan's listing made on the predial's connection is the plan's: the
	// session reads no stream or consumer itself, and plans the same as reading them.
	listing := StartPredialAndList(ctx, f.stateDi)
	ro, err := Connect(ctx, f.mesh(), f.store, Options{Cost: 4, ReadOnly: true, Predial: listing, Logf: f.logf})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	counting := &Counting{API: ro.API}
	ro.API = counting
	p, err := ro.Plan(ctx, f.mesh(), plan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n := counting.Reads.Load(); n != 0 {
		t.Fatalf("the plan read the bus itself (%d calls) beside a predial that listed it", n)
	}
	if !p.Empty() {
		t.Fatalf("the plan on the predial's listing is not empty on a converged bus:\n%+v", p.Changes)
	}
	if _, err := ro.Plan(ctx, f.mesh(), plan.Options{}); err != nil || counting.Reads.Load() == 0 {
		t.Fatalf("a second plan did not read the bus anew (%d calls, %v)", counting.Reads.Load(), err)
	}

	// The controller rotated meanwhile: the predial holds the old password, and is closed,
	// not used.
	stale := StartPredial(ctx, f.stateDi)
	rotated, err := f.store.RotateControllerPassword(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	minted := rotated.Password
	f.ownSecrets()
	if conn := stale.take(served.Target.URL, minted); conn != nil {
		t.Fatal("a predial was taken with a password it did not log in with")
	}
	if stale.err != nil {
		t.Fatalf("the predial did not connect: %v", stale.err)
	}
	if !stale.conn.IsClosed() {
		t.Fatal("a predial not taken was left open")
	}
	// Taken once at most, and closing it after is harmless.
	stale.Close()

	// No bus served from a state directory: nothing to start.
	if p := StartPredial(ctx, t.TempDir()); p != nil {
		p.Close()
		t.Fatal("a predial was started where no bus is served")
	}
}

// An apply that gets the lock at once reads the bus under it while the description loads:
// its cycle holds that lock through the connect and the reconcile rather than taking it
// again, plans on that reading, and lets the lock go. With the lock held elsewhere, only the
// connection is started.
func TestAnApplyListsEarlyOnlyUnderTheLock(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f, _ := servedMesh(t)

	var l cycleLock
	pre := startApply(ctx, f.stateDi, &l, nil)
	if pre == nil || l.lock == nil || !pre.list {
		t.Fatalf("a free lock gave no early listing (predial %v, lock %v)", pre != nil, l.lock != nil)
	}
	pre.Close()
	l.release()

	cycles := &Cycles{StateDir: f.stateDi, Options: func() Options { return Options{Cost: 4, Logf: f.logf} }}
	defer cycles.Close()
	var counting *Counting
	res, err := cycles.Run(ctx, CycleOptions{
		Predial: true,
		Load: func(ctx context.Context) (*model.Mesh, *state.Store, error) {
			if other, err := state.AcquireLock(ctx, f.stateDi, false, nil); !errors.Is(err, state.ErrLocked) {
				if other != nil {
					_ = other.Unlock()
				}
				t.Errorf("the description was loaded outside the lock the predial took: %v", err)
			}
			return f.mesh(), f.store, nil
		},
		Ready: func(_ context.Context, s *Session, _ *model.Mesh, origin SessionOrigin) {
			if origin != NewSession || s.opts.Predial == nil || s.Conn != s.opts.Predial.conn {
				t.Errorf("the cycle did not connect over its predial (origin %v)", origin)
			}
			counting = &Counting{API: s.API}
			s.API = counting
		},
	})
	if err != nil {
		t.Fatalf("the apply holding the lock it was given: %v", err)
	}
	if !res.Plan.Empty() || counting.Reads.Load() != 0 || counting.Mutations.Load() != 0 {
		t.Fatalf("a converged apply on the early listing: empty %v, %d reads, %d mutations", res.Plan.Empty(), counting.Reads.Load(), counting.Mutations.Load())
	}
	again, err := state.AcquireLock(ctx, f.stateDi, false, nil)
	if err != nil {
		t.Fatalf("the lock given to the apply was not let go: %v", err)
	}
	// Held by another: the connection alone.
	var other cycleLock
	pre = startApply(ctx, f.stateDi, &other, nil)
	if other.lock != nil || pre == nil || pre.list {
		t.Fatalf("with the lock held elsewhere: predial %v, lock %v", pre != nil, other.lock != nil)
	}
	pre.Close()
	if err := again.Unlock(); err != nil {
		t.Fatal(err)
	}
}
