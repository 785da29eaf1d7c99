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
	"github.com/nats-io/nats.go"

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

// connectJWT connects the session to an external bus in operator mode: the operator read from
// its store, the system user's connection, and the controller's, with its creds minted on
// first use and the account's JWT pushed first where no server holds it yet.
func (s *Session) connectJWT(ctx context.Context, m *model.Mesh, l *cycleLock) error {
	if m.Bus.Embedded() || m.Bus.Operator == nil {
		return errors.New("bus.auth: jwt is served here for an external bus with bus.operator; the embedded bus in operator mode is not")
	}
	op, err := accounts.LoadOperator(*m.Bus.Operator)
	if err != nil {
		return err
	}
	if s.Target, err = accounts.BusTarget(m); err != nil {
		return err
	}
	j, err := accounts.DialJWT(ctx, m, op, s.Store)
	if err != nil {
		return err
	}
	s.jwt = &j
	s.jwt.OnReissue = s.controllerReissued
	if err := s.ensureControllerCreds(ctx, m, l); err != nil {
		return err
	}
	return s.connect(ctx)
}

func (s *Session) controllerCredsPath() string {
	return filepath.Join(s.Store.Dir(), ControllerCredsFile)
}

// ensureControllerCreds mints the controller's creds where the state directory has none, and
// pushes the account's JWT where no server holds it: the controller logs in only once a
// server applies the account its user JWT is signed for. A read-only session does neither.
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
	if slices.Contains(p.Owned, accounts.NotOnServers) {
		// Only meshctl's own part of the JWT: every user change waits for the plan.
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
	return dialWithCreds(ctx, s.Target, s.controllerCredsPath())
}

// dialWithCreds connects to t as the controller with the creds file at path, read again at
// every connection: a reissue rewrites it before the push that cuts the connection.
func dialWithCreds(ctx context.Context, t busclient.Target, path string) (*busclient.Conn, error) {
	return busclient.Dial(ctx, t, busclient.Credential{User: render.ControllerUser},
		nats.UserCredentials(path), nats.MaxReconnects(-1), nats.IgnoreAuthErrorAbort())
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
	conn, err := dialWithCreds(ctx, t, path)
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
// progress, since both push the account's JWT, and the backend connected. done lets both go.
func OpenJWT(ctx context.Context, m *model.Mesh, store *state.Store) (j *accounts.JWT, done func(), err error) {
	if m.Bus.Embedded() || m.Bus.Operator == nil {
		return nil, nil, errors.New("bus.auth: jwt is served here for an external bus with bus.operator; the embedded bus in operator mode is not")
	}
	unlock, err := lockAccounts(ctx, m, store)
	if err != nil {
		return nil, nil, err
	}
	op, err := accounts.LoadOperator(*m.Bus.Operator)
	if err != nil {
		unlock()
		return nil, nil, err
	}
	backend, err := accounts.DialJWT(ctx, m, op, store)
	if err != nil {
		unlock()
		return nil, nil, err
	}
	return &backend, func() {
		backend.Close()
		unlock()
	}, nil
}

// sameOperator reports whether two bus.operator blocks name the same store, keys and system
// user, wherever they are written.
func sameOperator(a, b *model.Operator) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	x.Pos, y.Pos = model.Pos{}, model.Pos{}
	return x == y
}
