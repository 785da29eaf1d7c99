package reconcile

import (
	"context"
	"errors"
	"fmt"
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
	if err == nil || s.Embedded == nil && s.release == nil || !serverStoreFailed(err) {
		return err
	}
	return state.StoreFailure(err, s.storeDir())
}

// storeDir is where the embedded bus keeps its JetStream store.
func (s *Session) storeDir() string { return filepath.Join(s.Store.Dir(), "bus", "jetstream") }

// halting is the error an apply stops at, or nil: a full disk, or a store the server could
// not create. Every stream and consumer after it is a store on the same disk and would fail
// the same way, a line each (815 on a first apply), so the first is said once, naming the
// place: the embedded bus's store directory, or the operator's server, whose store and log
// meshctl cannot read.
func (s *Session) halting(err error) error {
	if err = s.diskError(err); errors.Is(err, state.ErrNoSpace) {
		return err
	}
	if serverStoreFailed(err) {
		return fmt.Errorf("the server at %s could not create a store on its disk (is its JetStream store_dir full? its log says why): %w",
			s.Target.Address(), err)
	}
	return nil
}

// consumerStoreFailed is the description the server answers a consumer whose store it could
// not create with: it replaces its own error (JSConsumerStoreFailedErrF, which carries the
// cause, logged as a warning) by this text under the generic consumer-creation code 10012,
// which other refusals share, so the text is the only signal there is.
const consumerStoreFailed = "error creating store for consumer"

// jsErrCodeStreamStoreFailed is the server's code for a stream whose store it could not set
// up (JSStreamStoreFailedF), which nats.go does not name.
const jsErrCodeStreamStoreFailed jetstream.ErrorCode = 10077

// serverStoreFailed reports whether err is the server saying it could not create a stream's
// or a consumer's store on its disk.
func serverStoreFailed(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case jetstream.JSErrCodeConsumerCreate:
		return apiErr.Description == consumerStoreFailed
	case jsErrCodeStreamStoreFailed:
		return true
	}
	return false
}
