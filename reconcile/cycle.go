package reconcile

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/nats-io/nats.go"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/state"
)

// Cycles runs the reconciles of one caller, one cycle at a time — a one-shot `meshctl apply`
// runs one, `meshctl watch` one per trigger — and keeps the session from one cycle to the
// next. A cycle owns, in this order:
//
//  1. The apply lock of the state directory, taken before the description where a connection
//     is up already (lockFirst): another applier at work beside this one is waited for before
//     the description is loaded, so that loading does not compete with its work, and what is
//     reconciled is the description as that applier left it.
//  2. The description, from the caller's Load.
//  3. The session (join): the one kept, where it serves the description's bus section and is
//     connected, or dialled again on the embedded bus this process serves; otherwise it is
//     closed and a new one connected. A lock taken first is let go before a session is dialled
//     again or anew, whose connect waits for it only where it installs an accounts config; but
//     a predial's lock is kept through the connect, which is handed the cycle's lock and takes
//     it only where it is not held.
//  4. The apply lock, unless the cycle holds it, waiting or not as the caller says; then the
//     embedded bus rejoined (rejoin) and the apply lock on the bus taken (owner.go).
//  5. The reconcile: plan, apply, verify and record (Session.Reconcile).
//  6. Both locks released, the one on the bus first.
//
// Nothing else takes or releases a cycle's apply lock. What the outcome means (an exit code,
// watch's Outcome) is the caller's.
type Cycles struct {
	// StateDir is the state directory, for what a cycle does before its store is open: the
	// predial to the embedded bus served from it, and the lock taken with it.
	StateDir string
	// Options says how a new session reaches the bus. It is asked at each connect, so that
	// what it carries is as current as the connect (watch's bus log, the lead it holds); the
	// cycle sets Predial.
	Options func() Options

	sess *Session
}

// CycleOptions say what one cycle does: how it loads the description, what it tells the
// caller on the way, and the reconcile (Run, whose WaitForLock and LockNotice are the
// cycle's for both locks).
type CycleOptions struct {
	// Load loads the description and gives the state store to reconcile it with. An error
	// ends the cycle before the bus is reached, the error returned as it is.
	Load func(context.Context) (*model.Mesh, *state.Store, error)
	// Predial, with no session kept, starts the controller's connection to an embedded bus
	// another meshctl serves from StateDir before the description loads, and takes the apply
	// lock with it when it is free at once, the bus then read under it (startApply): a
	// one-shot apply's head start.
	Predial bool
	// StopOnDisconnect cancels the reconcile when the session's connection drops, rather
	// than have every request left wait out its deadline for a server that is gone;
	// CycleResult.Lost then says so.
	StopOnDisconnect bool
	// Closing, when set, is told before the cycle closes the session it kept, which serves m
	// no more: busChanged when m's bus section is not the session's, and otherwise because
	// its connection to an external bus is down, where a fresh dial fails at once and a
	// request on a connection still reconnecting waits out its timeout.
	Closing func(s *Session, m *model.Mesh, busChanged bool)
	// Ready, when set, is told the session the cycle is about to reconcile m on, and how it
	// came by it, before the reconcile takes a lock or reads the bus.
	Ready func(ctx context.Context, s *Session, m *model.Mesh, origin SessionOrigin)
	// Run is the reconcile.
	Run RunOptions
}

// SessionOrigin is how a cycle came by the session it reconciles on.
type SessionOrigin int

// The origins of a cycle's session.
const (
	// KeptSession is the session the cycle before left, still connected.
	KeptSession SessionOrigin = iota
	// RedialledSession is that session, dialled again to the embedded bus this process
	// serves with the controller's current credential.
	RedialledSession
	// NewSession is a session connected by this cycle.
	NewSession
)

// CycleResult is what a cycle found and did.
type CycleResult struct {
	Result
	// Mesh is the description the cycle loaded; nil when Load failed.
	Mesh *model.Mesh
	// Session is the session the cycles keep, which the next cycle uses where it fits; nil
	// when none is.
	Session *Session
	// Reconciled says the cycle reached the bus and ran its reconcile: the error returned
	// beside it is the reconcile's; without it, Load or the connection failed.
	Reconciled bool
	// Lost says the session's connection dropped during the reconcile (StopOnDisconnect).
	Lost bool
}

// Run runs one cycle, in the order Cycles names, and returns what it found and did.
func (c *Cycles) Run(ctx context.Context, o CycleOptions) (CycleResult, error) {
	var l cycleLock
	pre := c.lockFirst(ctx, &l, o)
	defer pre.Close()
	defer l.release()
	m, st, err := o.Load(ctx)
	if err != nil {
		return CycleResult{Session: c.sess}, err
	}
	origin, err := c.join(ctx, &l, m, st, o, pre)
	res := CycleResult{Mesh: m, Session: c.sess}
	if err != nil {
		return res, err
	}
	if o.Ready != nil {
		o.Ready(ctx, c.sess, m, origin)
	}
	runCtx, stop := ctx, func() bool { return false }
	if o.StopOnDisconnect {
		runCtx, stop = stopOnDisconnect(ctx, c.sess.Conn.Conn)
	}
	res.Result, err = c.sess.reconcile(runCtx, &l, m, o.Run)
	l.release()
	res.Reconciled, res.Lost = true, stop()
	return res, err
}

// Close closes the session the cycles kept, if any.
func (c *Cycles) Close() {
	if c.sess != nil {
		c.sess.Close()
		c.sess = nil
	}
}

// lockFirst takes the apply lock before the description is loaded, where a connection is up
// already: on the kept session, waiting as the reconcile would; with no session and
// o.Predial, only when it is free at once (startApply). A lock it does not get is left to the
// reconcile, which waits for it or refuses, and says why. It returns the predial it started,
// nil when none.
func (c *Cycles) lockFirst(ctx context.Context, l *cycleLock, o CycleOptions) *Predial {
	switch {
	case c.sess != nil && c.sess.Conn.IsConnected():
		_ = l.acquire(ctx, c.sess.Store.Dir(), o.Run.WaitForLock, o.Run.LockNotice)
	case c.sess == nil && o.Predial:
		return startApply(ctx, c.StateDir, l, o.Run.LockNotice)
	}
	return nil
}

// join gives the cycle its session for m and st, as Cycles says (step 3), a new one using
// pre where it fits.
func (c *Cycles) join(ctx context.Context, l *cycleLock, m *model.Mesh, st *state.Store, o CycleOptions, pre *Predial) (SessionOrigin, error) {
	if s := c.sess; s != nil && (!sameBus(s.bus, m.Bus) || s.Store != st) {
		l.release()
		c.drop(o, m, !sameBus(s.bus, m.Bus))
	}
	if s := c.sess; s != nil && !s.Conn.IsConnected() {
		l.release()
		if s.Embedded == nil {
			c.drop(o, m, false)
		} else if err := s.redial(ctx, m, l); err != nil {
			// The bus is this process's and up: the controller was locked out of it (its
			// credential rotated in another terminal). Dial again with the credential the
			// store holds now, keeping the bus up for everyone else.
			return KeptSession, fmt.Errorf("connecting to the embedded bus again: %w", err)
		} else {
			s.logf("connected to the embedded bus again with the controller's current credential")
			return RedialledSession, nil
		}
	}
	if c.sess != nil {
		return KeptSession, nil
	}
	opts := c.Options()
	opts.Predial = pre
	s, err := connectSession(ctx, m, st, opts, l)
	if err != nil {
		return NewSession, err
	}
	c.sess = s
	if l.lock != nil {
		l.bind(s)
	}
	return NewSession, nil
}

// drop closes the kept session, which serves m no more, telling o.Closing first.
func (c *Cycles) drop(o CycleOptions, m *model.Mesh, busChanged bool) {
	if o.Closing != nil {
		o.Closing(c.sess, m, busChanged)
	}
	c.sess.Close()
	c.sess = nil
}

// sameBus reports whether a session opened for a can serve b: the address, how its
// certificate is verified (pins, CA) and the client certificate presented, the accounts file,
// its shape (bus.accounts) and its reload, the embedded bus's listen address, and in jwt mode
// the operator (the controller and the system user log in by it). Replicas and the events'
// max age are the plan's business, not the connection's.
func sameBus(a, b model.Bus) bool {
	return a.JWT() == b.JWT() && model.SameOperator(a.Operator, b.Operator) &&
		a.URL == b.URL && a.Fingerprint == b.Fingerprint && a.CAFile == b.CAFile &&
		a.CertFile == b.CertFile && a.KeyFile == b.KeyFile && a.AccountsFile == b.AccountsFile &&
		a.Listen == b.Listen && a.Reload.PIDFile == b.Reload.PIDFile &&
		slices.Equal(a.Reload.Command, b.Reload.Command) && a.Reload.Manual == b.Reload.Manual && a.SharesAlike(b)
}

// cycleLock is the apply lock of one cycle, and the session it holds it for. It is the one
// owner of the apply lock in meshctl: a cycle, a connect outside one (Connect) and a rewrite
// of the accounts config without a plan (SyncAccounts) each take it through a cycleLock, and
// a connect or a bootstrap inside a cycle is handed the cycle's.
type cycleLock struct {
	lock *state.Lock
	// sess's apply lock on the bus is released with the apply lock.
	sess *Session
}

// acquire takes the apply lock of stateDir unless l holds it, waiting for another holder when
// wait is set (notice is told).
func (l *cycleLock) acquire(ctx context.Context, stateDir string, wait bool, notice func(string)) error {
	if l.lock != nil {
		return nil
	}
	lock, err := state.AcquireLock(ctx, stateDir, wait, notice)
	if err != nil {
		return err
	}
	l.lock = lock
	return nil
}

// take takes the apply lock of s's state directory as acquire does, and binds s to it.
func (l *cycleLock) take(ctx context.Context, s *Session, wait bool, notice func(string)) error {
	if err := l.acquire(ctx, s.Store.Dir(), wait, notice); err != nil {
		return state.DiskError(err, s.Store.Dir())
	}
	l.bind(s)
	return nil
}

// bind makes s the session whose apply lock on the bus is released with l.
func (l *cycleLock) bind(s *Session) { l.sess = s }

// release lets the apply lock on the bus go, then the apply lock, if they are held.
func (l *cycleLock) release() {
	if l.sess != nil {
		l.sess.releaseBusLock()
		l.sess = nil
	}
	if l.lock != nil {
		_ = l.lock.Unlock()
		l.lock = nil
	}
}

// stopOnDisconnect is ctx, cancelled when nc stops being connected until the returned stop is
// called; stop waits for the goroutine it started and reports whether nc was lost, that is
// whether the drop cancelled ctx before anything else ended it. The cancel carries no cause:
// apply takes a cause of ErrBusLost for its bus gate having waited busReturnWait in vain, and
// says so; the cycle tells of the drop through CycleResult.Lost.
func stopOnDisconnect(ctx context.Context, nc *nats.Conn) (context.Context, func() (lost bool)) {
	ctx, cancel := context.WithCancel(ctx)
	var lost atomic.Bool
	drop := func() {
		if ctx.Err() == nil {
			lost.Store(true)
		}
		cancel()
	}
	ch := nc.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		// RemoveStatusListener closes ch, which ends this goroutine without a cancel.
		if _, ok := <-ch; ok {
			drop()
		}
	}()
	// A change before the listener was registered is not sent on ch.
	if !nc.IsConnected() {
		drop()
	}
	return ctx, func() bool {
		nc.RemoveStatusListener(ch)
		<-finished
		cancel()
		return lost.Load()
	}
}
