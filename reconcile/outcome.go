package reconcile

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/state"
)

// recordFailure records an apply that failed before it had a plan to apply (the lock was
// held, the bus could not be read or reached again after the lock was taken): every failed
// or refused apply is in the history, and when even that cannot be written, the reason is
// told rather than lost.
func (s *Session) recordFailure(ctx context.Context, dir string, started time.Time, p *plan.Plan, err error) {
	if p == nil {
		p = &plan.Plan{}
	}
	outcome := "failed: " + err.Error()
	if errors.Is(err, ErrBlocked) || errors.Is(err, state.ErrLocked) {
		outcome = "refused: " + err.Error()
	}
	if _, rerr := s.record(ctx, dir, started, p, outcome); rerr != nil {
		s.logf("this apply's outcome could not be recorded in the history: %v", rerr)
	}
}

// diskError says "no space left on device" where an apply failed for a full disk: an error
// the server gave for a store it could not write, on the embedded bus whose store is in the
// state directory (an external server's store is not meshctl's to inspect), or meshctl's own
// writes, which DiskError has marked already.
func (s *Session) diskError(err error) error {
	var apiErr *jetstream.APIError
	if err == nil || s.Embedded == nil && s.release == nil || !errors.As(err, &apiErr) {
		return err
	}
	return state.StoreFailure(err, filepath.Join(s.Store.Dir(), "bus", "jetstream"))
}
