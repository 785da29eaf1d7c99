package watch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/internal/redact"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/state"
)

// connection is what watch keeps beside the session its cycles keep (loop.cycles): it is nil
// exactly when they keep none.
type connection struct {
	sess *reconcile.Session
	// mesh is the description the last reconcile on this connection brought the bus to.
	mesh *model.Mesh
	// dialled is set when the session logged in afresh, perhaps with a controller credential
	// minted since: the controller loop beside it may be knocking with the old one.
	dialled bool
	// heard listens to the bus's advisories on it; nil until the server grants them.
	heard *advisoryListener
}

// embeddedBus is the embedded bus this process serves, if any. The reconcile goroutine sets
// it when it starts or stops the bus; the loop reloads it on SIGHUP. The mutex keeps a
// reload off a bus that is being shut down.
type embeddedBus struct {
	mu sync.Mutex
	e  *bus.Embedded
}

func (b *embeddedBus) set(e *bus.Embedded) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.e = e
}

// reload reloads the bus and reports whether there was one to reload.
func (b *embeddedBus) reload() (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.e == nil {
		return false, nil
	}
	return true, b.e.Reload()
}

// disconnect lets go of what watch keeps beside a session its cycles close: the embedded bus
// a SIGHUP reloads, and the advisories heard on the session's connection.
func (l *loop) disconnect(c *connection) {
	l.embedded.set(nil)
	if c.heard != nil {
		c.heard.stop()
	}
}

// sessionOptions is how watch's cycles connect a session: owning the embedded bus, whose log
// tells the refusals, holding the locks as watch, and changing the bus only while it leads.
func (l *loop) sessionOptions() reconcile.Options {
	// The server names an nkey host by its public key; the store names it by principal.
	busLog := l.refusals.serverLog()
	busLog.Principals = l.store.NkeyPrincipals()
	return reconcile.Options{
		Cost:        l.cfg.Cost,
		Logf:        func(format string, args ...any) { l.log.Info(fmt.Sprintf(format, args...)) },
		OwnEmbedded: true,
		BusLog:      busLog,
		Role:        "watch",
		Owned:       l.owned,
	}
}

// cycle is one reconcile, a cycle of l.cycles, run on a goroutine of its own with the
// connection the loop handed over; it hands back the connection to keep (nil when there is
// none) and what the cycle's outcome means.
func (l *loop) cycle(ctx context.Context, conn *connection, t Trigger) (Cycle, *connection) {
	started := time.Now()
	ctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()
	res, err := l.cycles.Run(ctx, reconcile.CycleOptions{
		Load:             l.load,
		StopOnDisconnect: true,
		Closing: func(s *reconcile.Session, m *model.Mesh, busChanged bool) {
			if busChanged {
				l.log.Info("the bus section changed: reconnecting", "from", describeBus(s.Bus()), "to", describeBus(m.Bus))
			}
			l.disconnect(conn)
			conn = nil
		},
		Ready: func(ctx context.Context, s *reconcile.Session, m *model.Mesh, origin reconcile.SessionOrigin) {
			conn = l.ready(ctx, conn, s, m, origin, t)
		},
		Run: reconcile.RunOptions{
			WaitForLock: true,
			RecordNoop:  false,
			Dir:         l.cfg.Dir,
			LockNotice:  func(msg string) { l.log.Warn(msg) },
		},
	})
	cy := Cycle{Trigger: t &^ triggerReload, Plan: res.Plan, Applied: res.Applied, GraceEnds: res.GraceEnds}
	cy.Outcome, cy.Err = l.outcome(ctx, conn, res, err)
	cy.Duration = time.Since(started)
	// Counted once, when healed: a refused or failing plan is planned again every cycle.
	if cy.Outcome == OutcomeOK && t.drift() {
		cy.Drift = len(cy.Plan.Changes)
	}
	return cy, conn
}

// load is a cycle's Load: the description, and the store watch keeps. A description naming a
// bus that keeps the store ends the cycle of a watch that does not lead (errNeedsLead).
func (l *loop) load(context.Context) (*model.Mesh, *state.Store, error) {
	m, err := model.Load(l.cfg.Dir)
	if err != nil {
		return nil, nil, err
	}
	if !m.Bus.Embedded() && l.owned == nil {
		return nil, nil, errNeedsLead
	}
	return m, l.store, nil
}

// ready readies the connection beside s before the cycle reconciles m on it: a new one for a
// new session, whose embedded bus a SIGHUP then reloads; on a session kept, the embedded bus
// reloaded first when a SIGHUP found none to reload (triggerReload); and the advisories
// listened to before the bus is read. It returns the connection.
func (l *loop) ready(ctx context.Context, conn *connection, s *reconcile.Session, m *model.Mesh, origin reconcile.SessionOrigin, t Trigger) *connection {
	switch {
	case origin == reconcile.NewSession:
		conn = &connection{sess: s}
		l.embedded.set(s.Embedded)
	case t.Has(triggerReload) && s.Embedded != nil:
		if err := s.Embedded.Reload(); err != nil {
			l.log.Error("SIGHUP: reloading the embedded bus failed; it keeps the config it had", "error", err)
		}
	}
	if origin != reconcile.KeptSession {
		conn.dialled = true
	}
	conn.mesh = m
	l.listen(ctx, conn, false)
	l.refusals.mesh.Store(m)
	return conn
}

// outcome is what a cycle's result means, and the error the cycle reports. A reconcile that
// brought the bus to the description (all but what is in conflict, or all but the reload of
// an accounts config) listens to the advisories again first: the accounts config it made
// live may be the first to grant them. Only a bus every server of which serves the config is
// ok or noop: one left with an accounts config written and not served is an error.
func (l *loop) outcome(ctx context.Context, conn *connection, res reconcile.CycleResult, err error) (Outcome, error) {
	switch {
	case res.Mesh == nil && errors.Is(err, model.ErrInvalid):
		return OutcomeInvalid, err
	case !res.Reconciled:
		return OutcomeError, err
	}
	if err == nil || errors.Is(err, reconcile.ErrConflict) || errors.Is(err, accounts.ErrNotLive) {
		l.listen(ctx, conn, true)
	}
	switch {
	case errors.Is(err, reconcile.ErrBlocked):
		// Never forced: the operator decides, with `meshctl apply --allow-data-loss` or
		// `--allow-mass-delete`.
		return OutcomeRefused, err
	case errors.Is(err, reconcile.ErrConflict):
		return OutcomeConflict, err
	case errors.Is(err, accounts.ErrNotLive):
		// Written, and not served: the bus is not in sync while any server serves another
		// config, whatever was applied beside it. The next cycle, a retry, reloads what
		// meshctl can reload, and finds the operator's reload once it is done.
		return OutcomeError, fmt.Errorf("the bus at %s is not in sync: the accounts config (%s) is written, and not served: %w",
			res.Session.Target.Address(), res.Session.Accounts.Path, err)
	case err != nil:
		if res.Lost && !errors.Is(err, reconcile.ErrBusLost) {
			// The reconcile was cancelled when its connection dropped
			// (reconcile.CycleOptions.StopOnDisconnect), rather than have every request left
			// wait out its deadline: the cycle fails with ErrBusLost, naming the bus, unless
			// the apply's own ErrBusLost says so already. The next cycle connects again.
			err = fmt.Errorf("%w (%s): %w", reconcile.ErrBusLost, res.Session.Target.Address(), err)
		}
		return OutcomeError, err
	case res.Plan.Empty() && len(res.Plan.Holders) == 0:
		return OutcomeNoop, nil
	default:
		return OutcomeOK, nil
	}
}

// describeBus names a bus section in a log line: its URL, or the embedded bus's listen address.
func describeBus(b model.Bus) string {
	if b.Embedded() {
		return "embedded bus on " + redact.URL(b.Listen)
	}
	return b.URL
}
