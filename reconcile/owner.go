package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meshbus/meshctl/jsapi"
	"github.com/meshbus/meshctl/replica"
	"github.com/meshbus/meshctl/state"
)

// One owner at a time of a bus that keeps the store.
//
// Whoever changes the bus or the store does so under the apply lock on the bus
// (replica.LockKey): a one-shot apply from CI, and the leading watch for each of its reconciles,
// each on its own machine with its own copy of the store. Taking the lock, a session fences the
// store's bucket (replica's Fence) and so becomes its one writer: a writer fenced out — a watch
// frozen past its lease, the leader's controller while a CI apply holds the lock — has its late
// writes refused by the stream, and what it committed to its own copy is not the mesh's.
//
// Which copy's content is the store's is decided at the fence. The fence names the copy that
// wrote it last (state's CopyID). Where that is this copy, or nobody has fenced, the bus holds
// nothing this copy lacks, and the copy sends what it may have missed sending (CatchUp); a fence
// of this copy's is adopted as it is, not written again (replica's Adopt). Where
// another copy fenced since, the bus holds what that one did, and this copy is made equal to the
// bus before it changes anything (state's Refresh). The fence comes first, and the read after
// it: no write can land between the read and the fence.
//
// And nothing is changed by an owner that is no longer one: every mutating call of an apply,
// and every write of an accounts file, first asks whether the lock (and, for watch, the lead)
// is still this process's, by its own clock — a process frozen past its lease finds, the
// moment it runs again, that it owns nothing, before any other can have been let in.

// ownerRole is what a session holds the lock as, in its holder's value: watch's sessions own
// the embedded bus (Options.OwnEmbedded), a one-shot command does not.
func (s *Session) ownerRole() string {
	if s.opts.Role != "" {
		return s.opts.Role
	}
	return "apply"
}

// takeBusLock takes the apply lock on the bus, waiting while another holds it when wait is
// set (notice is told once who), and makes this session the store's one writer there. It does
// nothing on a bus that keeps no store (the embedded bus, a read-only session). The error of a
// lock held by another wraps state.ErrLocked and names the holder.
func (s *Session) takeBusLock(ctx context.Context, wait bool, notice func(string)) error {
	if s.onBus.kv == nil || s.onBus.lock != nil {
		return nil
	}
	me, err := s.holder(ctx)
	if err != nil {
		return err
	}
	told := false
	// Asked again while the bus is between leaders, as every call on a cluster is: a take
	// whose answer was lost finds its own holding, and keeps it (replica's Acquire).
	lock, err := jsapi.RetryCall(ctx, func(actx context.Context) (*replica.Lease, error) {
		if !wait {
			return s.onBus.leases.Acquire(actx, replica.LockKey, me)
		}
		return s.onBus.leases.AcquireWaiting(ctx, replica.LockKey, me, func(h *replica.HeldError) {
			if notice != nil && !told {
				notice(fmt.Sprintf("waiting for %s", h))
				told = true
			}
		})
	})
	if errors.Is(err, replica.ErrHeld) {
		return fmt.Errorf("%w: %w", state.ErrLocked, err)
	}
	if err != nil {
		return err
	}
	s.onBus.lock = lock
	if err := s.own(ctx, me); err != nil {
		s.releaseBusLock()
		return err
	}
	return nil
}

// releaseBusLock lets the apply lock on the bus go, if this session holds it.
func (s *Session) releaseBusLock() {
	if s.onBus.lock == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.onBus.lock.Release(ctx)
	s.onBus.lock = nil
}

// holder is this session as the holder of a lease.
func (s *Session) holder(ctx context.Context) (replica.Holder, error) {
	return Holder(ctx, s.Store, s.ownerRole())
}

// Holder is this process, with its copy of store, as the holder of a lease in role.
func Holder(ctx context.Context, store *state.Store, role string) (replica.Holder, error) {
	id, err := store.ID(ctx)
	if err != nil {
		return replica.Holder{}, err
	}
	copyID, err := store.CopyID(ctx)
	if err != nil {
		return replica.Holder{}, err
	}
	return replica.Me(id, copyID, role), nil
}

// own makes this session the store's one writer on the bus (see above), under the lock.
func (s *Session) own(ctx context.Context, me replica.Holder) error {
	fence, err := jsapi.RetryCall(ctx, s.onBus.kv.Fenced)
	if err != nil {
		return err
	}
	if fence.Mine {
		return nil
	}
	by := fence.By
	if fence.OK && by.Copy == me.Copy {
		s.onBus.kv.Adopt(fence)
	} else if err := jsapi.Retry(ctx, func(ctx context.Context) error { return s.onBus.kv.Fence(ctx, me) }); err != nil {
		// A fence whose answer was lost and is written again: the later one is the fence.
		return err
	}
	if !fence.OK || by.Copy == me.Copy {
		s.Store.SetReplica(s.onBus.kv)
		if err := s.Store.CatchUp(ctx, s.onBus.fresh); err != nil {
			return fmt.Errorf("keeping the store on the bus at %s: %w", s.Target.Address(), err)
		}
		s.onBus.fresh = false
		return nil
	}
	records, err := jsapi.RetryCall(ctx, s.onBus.kv.ReadAll)
	if err != nil {
		return fmt.Errorf("reading the store kept on the bus at %s, which %s wrote last: %w", s.Target.Address(), by, err)
	}
	changed, err := s.Store.Refresh(ctx, records)
	if err != nil {
		return err
	}
	if changed {
		s.logf("took the store's content from its copy on the bus, which %s wrote last", by)
	}
	s.Store.SetReplica(s.onBus.kv)
	s.onBus.fresh = false
	return nil
}

// owned returns nil while this session may change the bus: it holds the apply lock on the bus
// (where it keeps the store there), and the caller's Options.Owned says it still may.
func (s *Session) owned() error {
	if s.onBus.lock != nil {
		if err := s.onBus.lock.Held(context.Background()); err != nil {
			return err
		}
	}
	if s.opts.Owned != nil {
		return s.opts.Owned()
	}
	return nil
}
