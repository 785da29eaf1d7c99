package watch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meshbus/meshctl/internal/backoff"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/replica"
	"github.com/meshbus/meshctl/state"
)

// Leading the mesh.
//
// On a bus that keeps the store (an external server or cluster), several `meshctl watch` may
// run, on several control hosts, with the same description and the same controller password:
// exactly one leads — its reconciles run and its controller answers the nodes — through the
// lead on the bus (replica.LeaderKey, a lease). The others stand by: they ask for the lead every
// standbyPoll and keep their store equal to its copy on the bus meanwhile, so that the one that
// takes over starts from what the leader left. The lead lapses LeaseTTL after the leader's last
// renewal; a standby takes it within standbyPoll of that.
//
// A leader that loses the lead — its renewal refused because the lease lapsed while it was
// frozen or cut off, and another took it — stops at once: the reconcile in flight is cancelled,
// the controller stopped, and it stands by. Whatever it would still do is refused besides: each
// change to the bus asks whether it still leads (the session's Owned), and its late writes to
// the store's copy are fenced out (reconcile's owner.go).
//
// On the embedded bus nothing of this applies: the bus is this watch's own, and so is its lead.

// standbyPoll is how often a standby asks for the lead and looks for the leader's changes.
const standbyPoll = time.Second

// lead runs the loop for as long as this watch leads, standing by before and between, until
// ctx ends.
func (l *loop) lead(ctx context.Context) {
	for ctx.Err() == nil {
		sb, lease := l.standBy(ctx)
		if lease != nil {
			l.leadTerm(ctx, sb, lease)
			continue
		}
		if ctx.Err() != nil {
			return
		}
		// The embedded bus, this watch's own; or a description that does not load, which
		// the loop reports as it reports every invalid one, until a cycle finds it names a
		// bus that keeps the store (errNeedsLead): then it stands by again.
		l.needsLead = false
		l.run(ctx)
		if !l.needsLead {
			return
		}
	}
}

// errNeedsLead ends a cycle of a watch that does not lead, whose description names a bus that
// keeps the store: it must take the lead first.
var errNeedsLead = errors.New("the description names a bus with its store on it: this watch must take the lead first")

// leadTerm runs the loop while lease is held, and lets it go.
func (l *loop) leadTerm(ctx context.Context, sb *reconcile.Standby, lease *replica.Lease) {
	defer sb.Close()
	leadCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-lease.Lost():
			l.log.Error("this watch no longer leads the mesh: another took the lead while this one could not renew it; "+
				"stopping its reconciles and its controller, and standing by", "error", lease.Held(context.Background()))
			cancel()
		case <-leadCtx.Done():
		}
	}()
	me := lease.Holder()
	l.log.Info("leading the mesh", "bus", sb.Target().Address(), "leader", me.String())
	l.state.lead(LeadState{Leading: true, Leader: me.String(), Since: me.Since, At: time.Now()})
	l.owned = func() error { return lease.Held(context.Background()) }
	l.run(leadCtx)
	l.owned = nil
	released, done := context.WithTimeout(context.Background(), 5*time.Second)
	lease.Release(released)
	done()
}

// standBy asks for the lead until this watch has it, keeping the store current meanwhile, and
// returns it with the standby connection it is renewed on. It returns no lease when the
// description names the embedded bus (no standby either), or when ctx ended.
func (l *loop) standBy(ctx context.Context) (*reconcile.Standby, *replica.Lease) {
	var sb *reconcile.Standby
	var said string // what was last said, so that a standby says each news once
	say := func(msg string, args ...any) {
		if msg != said {
			l.log.Info(msg, args...)
			said = msg
		}
	}
	warn := func(msg string, err error) {
		if msg+err.Error() != said {
			l.log.Warn(msg, "error", err)
			said = msg + err.Error()
		}
	}
	for {
		if ctx.Err() != nil {
			if sb != nil {
				sb.Close()
			}
			return nil, nil
		}
		wait := standbyPoll
		m, err := model.Load(l.cfg.Dir)
		switch {
		case err != nil, m.Bus.Embedded():
			if sb != nil {
				sb.Close()
			}
			return nil, nil
		case sb == nil:
			if sb, err = reconcile.StandBy(ctx, m, l.store); err != nil {
				sb = nil
				if errors.Is(err, state.ErrNoController) {
					// A store that never applied: connecting mints the controller's credential,
					// or is refused by a bus another store manages.
					err = l.firstConnect(ctx, m)
				}
				if err != nil {
					warn("standing by: the bus cannot be joined as the controller", err)
					wait = l.cfg.RetryMax
				} else {
					wait = 0
				}
			}
		default:
			if lease := l.askForLead(ctx, sb, say, warn); lease != nil {
				return sb, lease
			}
		}
		backoff.Sleep(ctx, wait) // an ended ctx is seen at the loop's top
	}
}

// askForLead asks for the lead once on sb; while another leads, it brings the store up to date
// with the leader's changes and records that this watch stands by.
func (l *loop) askForLead(ctx context.Context, sb *reconcile.Standby, say func(string, ...any), warn func(string, error)) *replica.Lease {
	me, err := reconcile.Holder(ctx, l.store, "watch")
	if err != nil {
		warn("standing by: the store cannot say which it is", err)
		return nil
	}
	lease, err := sb.Lead(ctx, me)
	var held *replica.HeldError
	switch {
	case err == nil:
		// The leader's last changes first: the first reconcile takes them from the bus
		// anyway (owner.go), but the controller starts from the store as it is.
		if _, err := sb.Refresh(ctx); err != nil {
			l.log.Warn("took the lead, but could not bring the store up to date from the bus first; the first reconcile does", "error", err)
		}
		return lease
	case errors.As(err, &held):
		say("standing by: another watch leads the mesh", "leader", held.Holder.String())
		changed, rerr := sb.Refresh(ctx)
		if rerr != nil {
			warn("standing by: the store could not be brought up to date from the bus", rerr)
		} else if changed {
			l.log.Info("standing by: took the leader's changes to the store from the bus")
		}
		behind, _ := sb.Behind(ctx)
		l.state.lead(LeadState{Leader: held.Holder.String(), Since: held.Holder.Since, Behind: behind, At: time.Now()})
	default:
		warn("standing by: the lead could not be asked for", err)
	}
	return nil
}

// firstConnect connects once as a first apply would, for a store that never applied: it mints
// the controller's credential and, where the bus lets no controller in yet, installs the
// accounts config that does — or is refused by a bus another store manages. It changes nothing
// else; the lead comes next.
func (l *loop) firstConnect(ctx context.Context, m *model.Mesh) error {
	sess, err := reconcile.Connect(ctx, m, l.store, reconcile.Options{
		Cost: l.cfg.Cost,
		Logf: func(format string, args ...any) { l.log.Info(fmt.Sprintf(format, args...)) },
	})
	if err != nil {
		return err
	}
	sess.Close()
	return nil
}
