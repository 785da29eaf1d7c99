package reconcile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/nats-io/jwt/v2"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/internal/atomicfile"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// With bus.auth: jwt the accounts config is the account's JWT (accounts.JWT): the session
// connects the operator's system user beside the controller, the plan shows the account's
// change, and an apply pushes it after the streams and consumers. Nothing of the file backend
// runs: no generation principal, no manager line, no system user of meshctl's, no file, no
// reload.

// ControllerCredsFile is the controller's creds in the state directory, in jwt mode: minted
// once, its JWT rewritten when the controller's grants change.
const ControllerCredsFile = "controller.creds"

// OperatorStoreDir is where in the state directory meshctl keeps the operator it makes.
const OperatorStoreDir = accounts.KeptOperatorDir

// ErrEmbeddedAuthChange is an embedded bus whose state directory ran it with an accounts file
// (bus.auth password or nkey) asked to run in operator mode, or the other way round: its
// streams are kept under the account's name, MESH or the account's public key, and the other
// mode would not see them.
var ErrEmbeddedAuthChange = errors.New("the embedded bus holds a mesh of another bus.auth")

// connectJWT connects the session to a bus in operator mode: the operator read from its store
// (made first, on the embedded bus's first use, where bus.operator names none), the system
// user's connection, and the controller's, with its creds minted on first use and the
// account's JWT pushed first where no server holds it yet. The embedded bus is served in
// operator mode, by this process or by the meshctl process that serves it already.
func (s *Session) connectJWT(ctx context.Context, m *model.Mesh, l *cycleLock) error {
	acquire := func(ctx context.Context) error { return l.acquire(ctx, s.Store.Dir(), true, nil) }
	op, err := operatorFor(ctx, m, s.Store.Dir(), !s.opts.ReadOnly, acquire, s.logf)
	if err != nil {
		return err
	}
	if err := s.dialJWT(ctx, m, op); err != nil {
		return err
	}
	if err := s.ensureControllerCreds(ctx, m, l); err != nil {
		return err
	}
	// The store is kept on the bus as on any external one: its users and keys to revoke are
	// what a restore or a standby rebuilds the account's management from.
	s.onBus.replicas = max(m.Bus.Replicas, 1)
	return s.connect(ctx)
}

// dialJWT reaches the bus m names in operator mode, trusting op, and connects the JWT backend
// to it as the operator's system user: on the embedded bus, its one server, started here where
// no meshctl process serves it.
func (s *Session) dialJWT(ctx context.Context, m *model.Mesh, op accounts.Operator) error {
	var j accounts.JWT
	var err error
	if m.Bus.Embedded() {
		mode := op.OperatorMode()
		s.operatorMode = &mode
		if err := s.connectEmbedded(ctx, m, nil); err != nil {
			return err
		}
		j, err = accounts.DialJWTServer(ctx, s.Target, op, s.Store)
	} else {
		if s.Target, err = accounts.BusTarget(m); err != nil {
			return err
		}
		j, err = accounts.DialJWT(ctx, m, op, s.Store)
	}
	if err != nil {
		return err
	}
	if s.jwt != nil {
		s.jwt.Close()
	}
	s.jwt = &j
	s.jwt.OnReissue = s.controllerReissued
	return nil
}

// embeddedModeKept refuses to serve the embedded bus of stateDir in operator mode (jwt) where
// it ran with an accounts file, or with one where it ran in operator mode: each mode leaves its
// mark in the bus directory (accounts.conf, the resolver's jwt/), and the other would serve an
// empty account beside the mesh's streams.
func embeddedModeKept(stateDir string, jwt bool) error {
	mark, was, keep := "accounts.conf", "an accounts file (bus.auth password or nkey)", "password or nkey"
	if !jwt {
		mark, was, keep = "jwt", "operator mode (bus.auth: jwt)", "jwt"
	}
	dir := filepath.Join(stateDir, "bus")
	if _, err := os.Stat(filepath.Join(dir, mark)); err != nil {
		return nil
	}
	return fmt.Errorf("%w: the embedded bus in %s ran with %s, and its streams are in that mode's account; "+
		"changing the embedded bus's bus.auth is not supported yet: keep bus.auth %s, or start the mesh in a new state directory",
		ErrEmbeddedAuthChange, dir, was, keep)
}

// operatorFor is the operator whose account the mesh is: read from bus.operator's store, or,
// where the description names none, from the one meshctl keeps in the state directory
// (accounts.KeptOperator).
func operatorFor(ctx context.Context, m *model.Mesh, stateDir string, mayMake bool, acquire func(context.Context) error, logf func(string, ...any)) (accounts.Operator, error) {
	if m.Bus.Operator != nil {
		return accounts.LoadOperator(*m.Bus.Operator)
	}
	// An external bus's servers trust the operator only once they run on its config, which
	// `meshctl render -o server` prints: an apply cannot make one for them.
	op, err := accounts.KeptOperator(ctx, stateDir, mayMake && m.Bus.Embedded(), acquire, logf)
	if errors.Is(err, accounts.ErrNoOperatorYet) && m.Bus.Embedded() {
		return op, fmt.Errorf("%w: no operator in %s yet; 'meshctl apply' makes it", ErrNeedsApply, filepath.Join(stateDir, OperatorStoreDir))
	}
	return op, err
}

// FreshOperator is the operator meshctl keeps for m in store's state directory, made there
// under the apply lock where there is none yet: on an external bus, the operator its servers
// are then started to trust (Operator.ServerConfig). A description naming bus.operator, or
// not in operator mode, is refused.
func FreshOperator(ctx context.Context, m *model.Mesh, store *state.Store, logf func(string, ...any)) (accounts.Operator, error) {
	if !m.Bus.JWT() || m.Bus.Operator != nil {
		return accounts.Operator{}, errors.New("meshctl makes an operator only for bus.auth: jwt without bus.operator")
	}
	var l cycleLock
	defer l.release()
	acquire := func(ctx context.Context) error { return l.acquire(ctx, store.Dir(), true, nil) }
	return accounts.KeptOperator(ctx, store.Dir(), true, acquire, logf)
}

func (s *Session) controllerCredsPath() string {
	return filepath.Join(s.Store.Dir(), ControllerCredsFile)
}

// ensureControllerCreds mints the controller's creds where the state directory has none, and
// pushes meshctl's part of the account's JWT where the servers lack it (no JWT at all, or an
// admin's without JetStream): the controller logs in only once a server applies the account
// its user JWT is signed for, and reads the streams only once the account has JetStream. A read-only session does neither.
// Both are done under the apply lock, the cycle's l, taken here where l does not hold it yet
// (and left to l's owner to release): two first applies must not both mint.
func (s *Session) ensureControllerCreds(ctx context.Context, m *model.Mesh, l *cycleLock) error {
	path := s.controllerCredsPath()
	_, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) && !s.opts.ReadOnly && l.lock == nil {
		if err := l.acquire(ctx, s.Store.Dir(), true, nil); err != nil {
			return err
		}
		_, err = os.Stat(path) // minted by the holder waited for
	}
	if err == nil && s.opts.ReadOnly {
		return nil
	}
	if err == nil {
		return s.syncControllerCreds(ctx)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if s.opts.ReadOnly {
		return fmt.Errorf("%w: the controller has no creds in %s yet; 'meshctl apply' mints them", ErrNeedsApply, path)
	}
	controller, ok := render.Derive(m).Principal(render.ControllerUser)
	if !ok {
		return errors.New("the mesh derives no controller")
	}
	p, err := s.jwt.Plan(ctx, nil)
	if err != nil {
		return err
	}
	if len(p.Owned) > 0 {
		// Only meshctl's own part of the JWT: every user change waits for the plan. The JWT
		// an admin pushed may lack JetStream, and the streams are read before any plan.
		first := accounts.JWTPlan{Held: p.Held, Owned: p.Owned, Behind: p.Behind}
		if _, err := s.jwt.Apply(ctx, first); err != nil {
			return fmt.Errorf("pushing the account's first JWT: %w", err)
		}
		s.logf("pushed account %s's first JWT to every server", s.jwt.Operator.Account.PublicKey)
	}
	creds, err := s.jwt.Issue(ctx, controller, state.OpControllerFirstUse)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, creds.File)
}

// syncControllerCreds rewrites the controller's creds file with the JWT the store holds for
// its key where they differ (a reissue written before the file was).
func (s *Session) syncControllerCreds(ctx context.Context) error {
	users, err := s.jwt.Store.JWTUsers(ctx)
	if err != nil {
		return err
	}
	u, ok := users[render.ControllerUser]
	if !ok {
		return fmt.Errorf("%s holds creds the store has no user for: move it aside and run 'meshctl apply' to mint new ones", s.controllerCredsPath())
	}
	token := u.JWT
	if u.Pending != "" {
		token = u.Pending
	}
	return s.controllerReissued(ctx, render.ControllerUser, token)
}

// controllerReissued writes token, a JWT for the controller's key, into its creds file
// before the push that revokes the JWT before it: the controller's connection, cut by that
// push, logs in again with the file's JWT.
func (s *Session) controllerReissued(_ context.Context, principal, token string) error {
	if principal != render.ControllerUser {
		return nil
	}
	data, err := os.ReadFile(s.controllerCredsPath())
	if err != nil {
		return err
	}
	if old, err := jwt.ParseDecoratedJWT(data); err == nil && old == token {
		return nil
	}
	kp, err := jwt.ParseDecoratedUserNKey(data)
	if err != nil {
		return fmt.Errorf("reading %s: %w", s.controllerCredsPath(), err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return err
	}
	c, err := jwt.DecodeUserClaims(token)
	if pub, _ := kp.PublicKey(); err != nil || c.Subject != pub {
		return fmt.Errorf("the controller's new JWT is not for the key of %s", s.controllerCredsPath())
	}
	file, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		return err
	}
	return atomicfile.Write(s.controllerCredsPath(), file)
}

// dialControllerJWT connects as the controller with its creds file.
func (s *Session) dialControllerJWT(ctx context.Context) (*busclient.Conn, error) {
	return accounts.DialController(ctx, s.Target, s.controllerCredsPath())
}

// joinWithCreds is joinAsStore in jwt mode: the controller's connection with the creds in the
// state directory, state.ErrNoController where the store has none yet (a first connect
// mints them).
func joinWithCreds(ctx context.Context, m *model.Mesh, store *state.Store) (*busclient.Conn, busclient.Target, error) {
	path := filepath.Join(store.Dir(), ControllerCredsFile)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, busclient.Target{}, fmt.Errorf("%w: no %s", state.ErrNoController, path)
	}
	t, err := accounts.BusTarget(m)
	if err != nil {
		return nil, t, err
	}
	conn, err := accounts.DialController(ctx, t, path)
	return conn, t, err
}

// planJWT replaces, in p, the file backend's accounts change with the account JWT's, planned
// with o (a change of bus.auth to jwt is refused unless o allows reissuing).
func (s *Session) planJWT(ctx context.Context, m *model.Mesh, p *plan.Plan, o plan.Options) error {
	p.Changes = slices.DeleteFunc(p.Changes, func(c plan.Change) bool { return c.Kind == plan.KindAccounts })
	p.Accounts = nil
	jp, err := s.jwt.Plan(ctx, render.DerivePrincipals(m, nil))
	if err != nil {
		return err
	}
	users, err := s.jwt.Store.JWTUsers(ctx)
	if err != nil {
		return err
	}
	if c, ok := jp.Change(users, o); ok {
		c.After = jp
		p.Changes = append(p.Changes, c)
	}
	return nil
}

// applyJWT pushes the account's change of p, planned by planJWT, after the streams and
// consumers; it reports the changes made (0 or 1).
func (s *Session) applyJWT(ctx context.Context, p *plan.Plan) (int, error) {
	for _, c := range p.Changes {
		jp, ok := c.After.(accounts.JWTPlan)
		if c.Kind != plan.KindAccounts || !ok {
			continue
		}
		start := time.Now()
		if _, err := s.jwt.Apply(ctx, jp); err != nil {
			return 0, fmt.Errorf("%s %s: %w", c.Action, c.ID(), err)
		}
		s.logf("pushed the account's JWT; every server applies it (%s)", time.Since(start).Round(time.Millisecond))
		return 1, nil
	}
	return 0, nil
}

// withoutAccountJWT is p without its account JWT change, which apply does not know (applyJWT
// pushes it); p itself where it has none, or where p is blocked: a refused account JWT change
// (a change of bus.auth, a JWT too large) must stop the whole apply, which apply refuses.
func withoutAccountJWT(p *plan.Plan) *plan.Plan {
	isJWT := func(c plan.Change) bool { _, ok := c.After.(accounts.JWTPlan); return ok }
	if p.Blocked() || !slices.ContainsFunc(p.Changes, isJWT) {
		return p
	}
	q := *p
	q.Changes = slices.DeleteFunc(slices.Clone(p.Changes), isJWT)
	return &q
}

// OpenJWT is the mesh's account for a change outside a cycle (credentials issue and
// revoke): the apply lock of store's state directory taken, waiting for an apply in
// progress, since both push the account's JWT, and the backend connected; on the embedded
// bus, served by this process where no other serves it. done lets all of it go.
func OpenJWT(ctx context.Context, m *model.Mesh, store *state.Store) (j *accounts.JWT, done func(), err error) {
	if m.Bus.Embedded() {
		if err := embeddedModeKept(store.Dir(), true); err != nil {
			return nil, nil, err
		}
	}
	unlock, err := lockAccounts(ctx, m, store)
	if err != nil {
		return nil, nil, err
	}
	held := func(context.Context) error { return nil }
	op, err := operatorFor(ctx, m, store.Dir(), true, held, func(string, ...any) {})
	if err != nil {
		unlock()
		return nil, nil, err
	}
	s := &Session{Store: store, logf: func(string, ...any) {}, opts: Options{ExitsAfterClose: true}, stop: ctx.Done(), bus: m.Bus}
	if err := s.dialJWT(ctx, m, op); err != nil {
		s.Close()
		unlock()
		return nil, nil, err
	}
	return s.jwt, func() {
		s.Close()
		unlock()
	}, nil
}
