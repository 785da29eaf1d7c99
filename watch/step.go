package watch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/internal/redact"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/state"
)

// errBusLost cancels a reconcile whose connection dropped: without it, every request left
// would wait out its whole deadline for a server that is gone.
var errBusLost = errors.New("the connection to the bus was lost")

// connection is a session and the bus section of the description it was opened for.
type connection struct {
	sess *reconcile.Session
	bus  model.Bus
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

// disconnect closes a connection, and with it the embedded bus watch serves.
func (l *loop) disconnect(c *connection) {
	l.embedded.set(nil)
	if c.heard != nil {
		c.heard.stop()
	}
	c.sess.Close()
}

// step is one reconcile, run on a goroutine of its own with the connection the loop handed
// over; it hands back the connection to keep (nil when there is none).
func (l *loop) step(ctx context.Context, conn *connection, t Trigger) (Cycle, *connection) {
	started := time.Now()
	cy := Cycle{Trigger: t &^ triggerReload}
	done := func(o Outcome, err error) (Cycle, *connection) {
		cy.Outcome, cy.Err, cy.Duration = o, err, time.Since(started)
		// Counted once, when healed: a refused or failing plan is planned again every cycle.
		if o == OutcomeOK && t.drift() {
			cy.Drift = len(cy.Plan.Changes)
		}
		return cy, conn
	}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()

	// On a connection that is up, the apply lock comes before the description: another
	// applier at work beside this watch (whose stream updates it hears as advisories) is
	// waited for before the description is loaded, so that loading it does not compete with
	// that work, and what is reconciled is the description as it is once that applier is
	// done. The lock is handed to the reconcile. Connecting, or connecting again, may itself
	// take the lock to install an accounts config, so on those paths it is let go first and
	// the reconcile takes it as before; so it is when it cannot be had (the reconcile then
	// says why, and records it).
	var lock *state.Lock
	if conn != nil && conn.sess.Conn.IsConnected() {
		lock, _ = state.AcquireLock(ctx, l.store.Dir(), true, func(msg string) { l.log.Warn(msg) })
	}
	letGo := func() {
		if lock != nil {
			_ = lock.Unlock()
			lock = nil
		}
	}
	defer letGo()

	m, err := model.Load(l.cfg.Dir)
	if errors.Is(err, model.ErrInvalid) {
		return done(OutcomeInvalid, err)
	}
	if err != nil {
		return done(OutcomeError, err)
	}
	if !m.Bus.Embedded() && l.owned == nil {
		return done(OutcomeError, errNeedsLead)
	}
	if conn != nil && !sameBus(conn.bus, m.Bus) {
		letGo()
		l.log.Info("the bus section changed: reconnecting", "from", describeBus(conn.bus), "to", describeBus(m.Bus))
		l.disconnect(conn)
		conn = nil
	}
	if conn != nil && !conn.sess.Conn.IsConnected() {
		letGo()
		if conn.sess.Embedded == nil {
			// Connect afresh: a fresh dial to a bus that is down fails at once, where a
			// request on a connection still reconnecting waits out its timeout.
			l.disconnect(conn)
			conn = nil
		} else if err := conn.sess.Redial(ctx, m, l.cfg.Cost); err != nil {
			// The bus is this process's and up: the controller was locked out of it (its
			// credential revoked or minted anew in another terminal). Dial again with
			// the credential the store holds now, keeping the bus up for everyone else.
			return done(OutcomeError, fmt.Errorf("connecting to the embedded bus again: %w", err))
		} else {
			l.log.Info("connected to the embedded bus again with the controller's current credential")
			conn.dialled = true
		}
	}
	if conn == nil {
		// The server names an nkey host by its public key; the store names it by principal.
		busLog := l.refusals.serverLog()
		busLog.Principals = l.store.NkeyPrincipals()
		sess, err := reconcile.Connect(ctx, m, l.store, reconcile.Options{
			Cost:        l.cfg.Cost,
			Logf:        func(format string, args ...any) { l.log.Info(fmt.Sprintf(format, args...)) },
			OwnEmbedded: true,
			BusLog:      busLog,
			Role:        "watch",
			Owned:       l.owned,
		})
		if err != nil {
			return done(OutcomeError, err)
		}
		conn = &connection{sess: sess, bus: m.Bus, dialled: true}
		l.embedded.set(sess.Embedded)
	} else if t.Has(triggerReload) && conn.sess.Embedded != nil {
		if err := conn.sess.Embedded.Reload(); err != nil {
			l.log.Error("SIGHUP: reloading the embedded bus failed; it keeps the config it had", "error", err)
		}
	}

	conn.mesh = m
	l.listen(ctx, conn, false)
	l.refusals.mesh.Store(m)
	runCtx, cancelRun := context.WithCancelCause(ctx)
	stopWatching := cancelOnDisconnect(conn.sess.Conn.Conn, cancelRun)
	res, err := conn.sess.Reconcile(runCtx, m, reconcile.RunOptions{
		WaitForLock: true,
		RecordNoop:  false,
		Dir:         l.cfg.Dir,
		LockNotice:  func(msg string) { l.log.Warn(msg) },
		Lock:        lock,
	})
	lock = nil // the reconcile released it
	stopWatching()
	lost := errors.Is(context.Cause(runCtx), errBusLost)
	cancelRun(nil)

	cy.Plan, cy.Applied = res.Plan, res.Applied
	if err == nil || errors.Is(err, reconcile.ErrConflict) || errors.Is(err, reconcile.ErrNotLive) {
		l.listen(ctx, conn, true)
	}
	switch {
	case errors.Is(err, reconcile.ErrBlocked):
		// Never forced: the operator decides, with `meshctl apply --allow-data-loss` or
		// `--allow-mass-delete`.
		return done(OutcomeRefused, err)
	case errors.Is(err, reconcile.ErrConflict):
		return done(OutcomeConflict, err)
	case errors.Is(err, reconcile.ErrNotLive):
		l.log.Warn("the accounts config is written but not live: the bus's reload is none, so reload the server",
			"accounts_file", conn.sess.Accounts.Path)
		return done(OutcomeOK, nil)
	case err != nil:
		if lost {
			// The next reconcile connects again (above).
			err = fmt.Errorf("%w (%s): %w", errBusLost, conn.sess.Target.Address(), err)
		}
		return done(OutcomeError, err)
	case res.Plan.Empty() && len(res.Plan.Holders) == 0:
		return done(OutcomeNoop, nil)
	default:
		return done(OutcomeOK, nil)
	}
}

// cancelOnDisconnect cancels with errBusLost when nc stops being connected, until the
// returned stop is called; stop waits for the goroutine it started.
func cancelOnDisconnect(nc *nats.Conn, cancel context.CancelCauseFunc) (stop func()) {
	ch := nc.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		// RemoveStatusListener closes ch, which ends this goroutine without a cancel.
		if _, ok := <-ch; ok {
			cancel(errBusLost)
		}
	}()
	// A change before the listener was registered is not sent on ch.
	if !nc.IsConnected() {
		cancel(errBusLost)
	}
	return func() {
		nc.RemoveStatusListener(ch)
		<-finished
	}
}

// sameBus reports whether a session opened for a can serve b: the address, the pinned
// certificate, the accounts file and its reload, and the embedded bus's listen address.
// Replicas and the events' max age are the plan's business, not the connection's.
func sameBus(a, b model.Bus) bool {
	return a.URL == b.URL && a.Fingerprint == b.Fingerprint && a.AccountsFile == b.AccountsFile &&
		a.Listen == b.Listen && a.Reload.PIDFile == b.Reload.PIDFile &&
		slices.Equal(a.Reload.Command, b.Reload.Command) && a.Reload.Manual == b.Reload.Manual
}

func describeBus(b model.Bus) string {
	if b.Embedded() {
		return "embedded bus on " + redact.URL(b.Listen)
	}
	return b.URL
}
