package reconcile

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/jsapi"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/state"
)

// interrupting is an API whose first read of the streams runs interrupt first: the reconcile
// is under way, its session connected, when it happens.
type interrupting struct {
	jsapi.API
	interrupt func()
	done      atomic.Bool
}

func (a *interrupting) ListStreams(ctx context.Context) ([]*jetstream.StreamInfo, error) {
	if a.done.CompareAndSwap(false, true) {
		a.interrupt()
	}
	return a.API.ListStreams(ctx)
}

// A cycle that stops on a disconnect says it lost the connection when the server went away
// under its reconcile, and only then: a cycle cancelled by its caller, or one that ran to its
// end, lost nothing.
func TestACycleSaysItLostTheConnectionOnlyWhenItDropped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		stop     func(s *Session, cancel context.CancelFunc)
		wantLost bool
	}{
		{"the server stopped", func(s *Session, _ context.CancelFunc) { s.Embedded.Server().Shutdown() }, true},
		{"the caller cancelled", func(_ *Session, cancel context.CancelFunc) { cancel() }, false},
		{"the caller cancelled, then the server stopped", func(s *Session, cancel context.CancelFunc) {
			cancel()
			s.Embedded.Server().Shutdown()
		}, false},
		{"nothing happened", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(testContext(t))
			defer cancel()
			f := newFixture(t, quickMesh)
			cycles := &Cycles{StateDir: f.stateDi, Options: func() Options { return Options{Cost: bcrypt.MinCost, Logf: f.logf} }}
			defer cycles.Close()
			var api *interrupting
			res, err := cycles.Run(ctx, CycleOptions{
				StopOnDisconnect: true,
				Load: func(context.Context) (*model.Mesh, *state.Store, error) {
					return f.mesh(), f.store, nil
				},
				Ready: func(_ context.Context, s *Session, _ *model.Mesh, _ SessionOrigin) {
					api = &interrupting{API: s.API, interrupt: func() {}}
					if tc.stop != nil {
						api.interrupt = func() { tc.stop(s, cancel) }
					}
					s.API = api
				},
			})
			f.ownSecrets()
			if api == nil || !api.done.Load() {
				t.Fatalf("the cycle never read the bus: %v", err)
			}
			if !res.Reconciled || res.Lost != tc.wantLost {
				t.Errorf("reconciled %v, lost %v (error %v); want reconciled, lost %v", res.Reconciled, res.Lost, err, tc.wantLost)
			}
			if (err == nil) != (tc.stop == nil) {
				t.Errorf("the cycle's error: %v", err)
			}
		})
	}
}
