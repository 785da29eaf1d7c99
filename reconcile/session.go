package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/jsapi"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/replica"
	"github.com/meshbus/meshctl/state"
)

// Options configure how a session reaches the bus.
type Options struct {
	// Cost is the bcrypt cost of a controller credential minted on first use.
	Cost int
	// Logf receives what an operator should know (a bus started, a bootstrap); nil drops it.
	Logf func(format string, args ...any)
	// OwnEmbedded asks for the embedded bus to be started even when another meshctl
	// process serves one: only `watch`, which must own the bus it keeps up, sets it.
	OwnEmbedded bool
	// BusLog receives the embedded bus's log when this session starts the bus; nil discards it.
	BusLog server.Logger
	// ReadOnly connects without writing the state directory or the accounts config: no
	// credential is minted and no accounts config installed; where one would be needed,
	// Connect fails (ErrNeedsApply, or state.ErrNoController). diff sets it.
	ReadOnly bool
	// ExitsAfterClose says the process exits right after Close (a one-shot command), so an
	// embedded bus only meshctl used need not wait for the server's slow stop
	// (bus/stopforexit.go).
	ExitsAfterClose bool
	// Predial, when set, is the controller's connection started before the description was
	// loaded (predial.go); the session's first connection uses it where it fits.
	Predial *Predial
	// Role is what the session holds the apply lock on the bus as, in the lock's value
	// ("watch", "credentials"); "" is "apply".
	Role string
	// Owned, when set, is asked before every change the session makes to the bus, beside
	// whether it still holds the apply lock on the bus: watch's says it still leads.
	Owned func() error
}

// Session is a connection to the bus as the controller, and what an apply needs beside it:
// the accounts file and how to reload it. With the embedded default it may own the bus
// itself, and Close stops it.
type Session struct {
	Store    *state.Store
	Conn     *busclient.Conn
	API      jsapi.API
	Accounts accounts.File
	Target   busclient.Target
	// Embedded is the bus this process runs, nil when the bus is external or another
	// meshctl process (a `meshctl watch`) serves it.
	Embedded *bus.Embedded

	password string
	// manager is the line naming this session's store in every accounts file it writes.
	manager string
	// onBus is the store's copy on an external bus and the leases beside it (restore.go,
	// owner.go); its zero value where no copy is kept (the embedded bus, a read-only session).
	onBus storeOnBus
	logf  func(string, ...any)
	opts  Options
	// release ends this session's lease on an embedded bus another process serves.
	release func()
	// stop ends the wait, in Close, for other processes to finish with the bus this one
	// serves: Connect's context, which an interrupt cancels.
	stop <-chan struct{}
	// bus is the bus section of the description the session was connected for.
	bus model.Bus
	// installed is set once the session installed the rendered accounts config to let the
	// controller in (bootstrap): a change no plan shows.
	installed bool
	// jwt is the mesh's account with bus.auth: jwt (jwt.go), nil otherwise.
	jwt *accounts.JWT
	// operatorMode is what the embedded bus runs in operator mode with, bus.auth: jwt; nil
	// otherwise, the bus then having an accounts file.
	operatorMode *bus.OperatorMode
}

// InstalledAccounts reports whether connecting installed the rendered accounts config so that
// the controller could log in: the accounts config changed although a plan after it may be
// empty.
func (s *Session) InstalledAccounts() bool { return s.installed }

// storeOnBus is what a session keeps of the store on an external bus: the copy the store writes
// to through the session's connection, the bucket of leases beside it, and the apply lock on the
// bus while the session holds it.
type storeOnBus struct {
	// replicas is the replicas of the bucket the store is kept in; 0 where no copy is kept.
	replicas int
	// kv is the copy, nil if none; fresh says it holds no store yet.
	kv    *replica.KV
	fresh bool
	// leases is the bucket of the leases, and lock the apply lock on the bus while this
	// session holds it (owner.go).
	leases *replica.Leases
	lock   *replica.Lease
}

// Close disconnects and, when this process runs the embedded bus, stops it (stopEmbedded). A
// one-shot command first waits for any other meshctl process that holds a lease on the bus
// (an `apply --wait` queued behind this one) to finish with it, or for Connect's context to
// end; `watch` stops at once, as it was told to.
func (s *Session) Close() {
	s.releaseBusLock()
	s.dropReplica()
	if s.Conn != nil {
		s.Conn.Close()
	}
	if s.jwt != nil {
		s.jwt.Close()
	}
	if s.release != nil {
		s.release()
		s.release = nil
	}
	if s.Embedded != nil {
		if !s.opts.OwnEmbedded {
			s.waitForHolders()
		}
		s.stopEmbedded()
	}
}

// largeBus is the consumer count above which stopping the embedded bus takes long enough
// to say so: nats-server stops file-backed consumers one after another, about 10 ms each.
const largeBus = 1000

func stopEstimate(consumers int) time.Duration {
	return (time.Duration(consumers) * 10 * time.Millisecond).Round(time.Second)
}

func embeddedConsumers(e *bus.Embedded) int {
	info, err := e.Server().Jsz(nil)
	if err != nil || info == nil {
		return 0
	}
	return info.Consumers
}

// Connect reaches the bus the mesh names, as the controller. With no bus.url it uses the
// embedded bus: the one a running `meshctl watch` serves from this state directory, or one
// it starts itself. A controller that cannot log in with the accounts config in use — a
// fresh bus, or a controller credential rotated — is bootstrapped: the rendered config
// is installed first, since nothing else can be done on the bus without it.
func Connect(ctx context.Context, m *model.Mesh, store *state.Store, o Options) (*Session, error) {
	var l cycleLock
	defer l.release()
	return connectSession(ctx, m, store, o, &l)
}

// connectSession is Connect with the apply lock l, the cycle's: a bootstrap takes it where l
// does not hold it yet, and leaves it to l's owner to release.
func connectSession(ctx context.Context, m *model.Mesh, store *state.Store, o Options, l *cycleLock) (*Session, error) {
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if m.Bus.Embedded() {
		// Before anything is minted, made or started for the other mode.
		if err := embeddedModeKept(store.Dir(), m.Bus.JWT()); err != nil {
			return nil, err
		}
	}
	if m.Bus.JWT() {
		s := &Session{Store: store, logf: logf, opts: o, stop: ctx.Done(), bus: m.Bus}
		if err := s.connectJWT(ctx, m, l); err != nil {
			s.Close()
			return nil, err
		}
		return s, nil
	}
	password, err := controllerPassword(ctx, store, o)
	if err != nil {
		return nil, err
	}
	s := &Session{Store: store, password: password, logf: logf, opts: o, stop: ctx.Done(), bus: m.Bus}
	if s.manager, err = accounts.ManagerLine(ctx, store); err != nil {
		return nil, err
	}
	if m.Bus.Embedded() {
		err = s.connectEmbedded(ctx, m, l)
	} else {
		err = s.connectExternal(ctx, m, l)
	}
	if err == nil {
		err = s.connect(ctx)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Bus is the bus section of the description the session was connected for.
func (s *Session) Bus() model.Bus { return s.bus }

// redial connects to the same bus anew, as the controller with the credential the store
// holds now, installing the rendered accounts config first when the one in use does not
// let it in. It is for a long-lived session (`meshctl watch`) whose connection was
// refused because the controller's credential was rotated by another
// meshctl: the bus itself is fine, and an embedded one keeps running for everyone else.
func (s *Session) redial(ctx context.Context, m *model.Mesh, l *cycleLock) error {
	if s.jwt != nil {
		return s.connect(ctx)
	}
	password, err := s.Store.ControllerPassword(ctx, s.opts.Cost)
	if err != nil {
		return err
	}
	s.password = password
	s.Accounts = s.Accounts.WrittenBy(s.manager, password)
	if err := s.letControllerIn(ctx, m, l); err != nil {
		return err
	}
	return s.connect(ctx)
}

// letControllerIn installs the rendered accounts config when the one in use does not let
// the controller in, and waits until the server has taken it: a reload by signal takes
// effect a moment after the signal. It is decided by the file, not by whether a login
// succeeds: a server whose accounts name no user at all requires no authentication and
// lets anyone in — into an account without JetStream, not MESH.
func (s *Session) letControllerIn(ctx context.Context, m *model.Mesh, l *cycleLock) error {
	canLogIn := s.controllerCanLogIn(s.Accounts.Path)
	// A read-only session writes no first files: its dial says that no server answers.
	if canLogIn && (s.opts.ReadOnly || !s.Accounts.AwaitingFirstStart()) {
		return nil
	}
	if err := accounts.MayInstall(ctx, s.Store, s.Accounts, s.Target, s.password); err != nil {
		return err
	}
	if s.opts.ReadOnly {
		return s.refuseBootstrap(s.Accounts.Path)
	}
	if canLogIn {
		s.logf("no server of the bus is running, and some have no accounts config yet; writing the rendered one for their first start")
	} else {
		s.logf("the accounts config at %s does not let the controller in; installing the rendered one first", s.Accounts.Path)
	}
	if err := s.bootstrap(ctx, m, l); err != nil {
		return err
	}
	return s.verifyLogin(ctx, false)
}

// connect dials the controller's connection and its API, replacing any previous one.
func (s *Session) connect(ctx context.Context) error {
	conn := s.opts.Predial.take(s.Target.URL, s.password)
	if conn == nil {
		var err error
		if conn, err = s.dial(ctx); err != nil {
			return err
		}
	}
	api, err := jsapi.New(conn.Conn)
	if err != nil {
		conn.Close()
		return err
	}
	s.dropReplica()
	if s.Conn != nil {
		s.Conn.Close()
	}
	s.Conn, s.API = conn, jsapi.Guarded(jsapi.Retrying(api, s.Target), s.owned)
	return s.keepReplica(ctx)
}

func (s *Session) credential() busclient.Credential {
	return busclient.Credential{User: render.ControllerUser, Password: s.password}
}

func (s *Session) dial(ctx context.Context) (*busclient.Conn, error) {
	if s.jwt != nil {
		return s.dialControllerJWT(ctx)
	}
	return dialController(ctx, s.Target, s.password)
}

// ensureConn dials again when the connection was closed for good, so a long-lived session
// outlasts what nats.go gives up on.
func (s *Session) ensureConn(ctx context.Context) error {
	if s.Conn != nil && !s.Conn.IsClosed() {
		return nil
	}
	return s.connect(ctx)
}

// bootstrapAccounts is the accounts config to install when the controller cannot log in.
// Where there is no config yet, it holds the controller alone: every other user appears in
// the first apply's plan and goes live in its place in the order, after the objects its
// grants name. Where a config is in use but lets the controller in no more (its credential
// was rotated), it is the whole rendering, so nobody else is locked out by a diff.
//
// meshctl's system user goes in with the controller when a server is reloaded by request: the
// reload that makes this file live is the one that needs it.
func (s *Session) bootstrapAccounts(ctx context.Context, m *model.Mesh, path string) ([]byte, error) {
	if err := systemCredential(ctx, s.Store, m, s.opts.Cost); err != nil {
		return nil, err
	}
	hashes, err := s.Store.Hashes(ctx)
	if err != nil {
		return nil, err
	}
	graces, err := ackGraces(ctx, s.Store, m, time.Now())
	if err != nil {
		return nil, err
	}
	d := render.DeriveWithGraces(m, graces)
	principals := d.Principals
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		principals = nil
		for _, user := range []string{render.ControllerUser, render.SystemUser} {
			if p, ok := d.Principal(user); ok {
				principals = append(principals, p)
			}
		}
	}
	return render.AccountsConfig(principals, hashes), nil
}

// systemCredential stores the hash of meshctl's system user's password, derived from the
// controller's (state.SystemPassword), when a server of the mesh is reloaded by request, so
// that every rendering carries it.
func systemCredential(ctx context.Context, store *state.Store, m *model.Mesh, cost int) error {
	if !m.Bus.MintsSystemUser() {
		return nil
	}
	if cost == 0 {
		cost = state.DefaultCost
	}
	_, err := store.SystemPassword(ctx, cost)
	if errors.Is(err, state.ErrNoController) {
		// Derived from the controller's password, minted before any file carries either.
		return nil
	}
	return err
}

// controllerLetIn reports whether the accounts config in use lets the controller in, and the
// bus is not waiting for its first start: with no server running and some without a file,
// those could never start, and no connection would ever get as far as writing their files.
func (s *Session) controllerLetIn() bool {
	return s.controllerCanLogIn(s.Accounts.Path) && !s.Accounts.AwaitingFirstStart()
}

// controllerCanLogIn reports whether the accounts config at path lets the controller in
// with its password: known without bcrypt when it is the file meshctl wrote (accounts/controller.go), and
// then read only through its digest, not held whole.
func (s *Session) controllerCanLogIn(path string) bool {
	if sum, ok, err := accounts.FileDigest(path); err != nil || !ok {
		return false
	} else if s.knownDigestLetsControllerIn(path, sum) {
		return true
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	return accounts.AdmitsController(data, s.password)
}

// connectEmbedded uses the embedded bus another meshctl process serves from this state
// directory, holding a lease on it so a one-shot server keeps it up while this session needs
// it, or starts one in this process.
func (s *Session) connectEmbedded(ctx context.Context, m *model.Mesh, l *cycleLock) error {
	stateDir := s.Store.Dir()
	// A bus whose process is stopping still holds the state directory until it has stopped —
	// a minute for a large one — and a start must wait for that rather than fail.
	waitUntil := time.Now().Add(2 * time.Minute)
	said := false
	for {
		if url, pid, ok := bus.RunningEmbeddedProcess(stateDir); ok && !s.opts.OwnEmbedded {
			release, err := bus.Hold(ctx, stateDir)
			if err == nil {
				// Another meshctl keeps the bus up; use it instead of starting a second
				// server on the same store, and reload it through that process.
				s.release = release
				s.Target = busclient.Target{URL: url}
				if s.operatorMode != nil {
					// Its accounts are JWTs the session pushes; it has no file to install.
					s.logf("using the embedded bus at %s served by meshctl pid %d", url, pid)
					return nil
				}
				s.Accounts = accounts.File{Path: filepath.Join(stateDir, "bus", "accounts.conf"),
					Reloader: bus.ControlReloader(stateDir), Target: s.Target, StateDir: stateDir, Verify: s.verifyLogin}.WrittenBy(s.manager, s.password)
				s.logf("using the embedded bus at %s served by meshctl pid %d", url, pid)
				return s.letControllerIn(ctx, m, l)
			}
			if !errors.Is(err, bus.ErrNotServed) {
				return err
			}
		}
		err := s.startEmbedded(ctx, m)
		if !errors.Is(err, bus.ErrAlreadyRunning) || s.opts.OwnEmbedded || time.Now().After(waitUntil) {
			return err
		}
		if !said {
			s.logf("the embedded bus of %s is stopping in another meshctl process; waiting to serve it here", stateDir)
			said = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting to serve the embedded bus: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startEmbedded starts the embedded bus in this process, first installing the rendered
// accounts config when the one on disk does not let the controller in; in operator mode
// (s.operatorMode), trusting the operator, with no accounts file.
func (s *Session) startEmbedded(ctx context.Context, m *model.Mesh) error {
	stateDir := s.Store.Dir()
	accountsPath := filepath.Join(stateDir, "bus", "accounts.conf")
	if s.operatorMode == nil && !s.controllerCanLogIn(accountsPath) {
		if s.opts.ReadOnly {
			return s.refuseBootstrap(accountsPath)
		}
		data, err := s.bootstrapAccounts(ctx, m, accountsPath)
		if err != nil {
			return err
		}
		if _, statErr := os.Stat(accountsPath); statErr == nil {
			s.logf("the controller cannot log in with %s; installing the rendered accounts config before starting the bus", accountsPath)
		}
		if err := (accounts.File{Path: accountsPath, StateDir: stateDir}).WrittenBy(s.manager, s.password).Install(data); err != nil {
			return err
		}
		s.installed = true
	}
	started := time.Now()
	e, err := bus.StartEmbedded(ctx, bus.EmbeddedOptions{StateDir: stateDir, Listen: m.Bus.Listen, Logger: s.opts.BusLog,
		Entries: accounts.Entries, Operator: s.operatorMode})
	if err != nil {
		return err
	}
	s.Embedded = e
	s.logf("started the embedded bus at %s (store in %s) in %s", e.URL(), filepath.Join(stateDir, "bus"), time.Since(started).Round(time.Millisecond))
	if gone := e.RemovedHalfWritten(); len(gone) > 0 {
		s.logf("removed %d consumer(s) a killed server had left half-written, to be created whole again: %s", len(gone), strings.Join(gone, ", "))
	}
	if n := embeddedConsumers(e); n >= largeBus && !s.opts.OwnEmbedded && !s.opts.ExitsAfterClose {
		s.logf("the embedded bus holds %d consumers: stopping it when this command ends takes about %s; "+
			"`meshctl watch` keeps it up, and diff, apply and credentials then use it", n, stopEstimate(n))
	}
	s.Target = busclient.Target{URL: e.URL()}
	if s.operatorMode != nil {
		return nil
	}
	s.Accounts = accounts.File{Path: e.AccountsFile(), Reloader: e.Reloader(), Target: s.Target, StateDir: stateDir, Verify: s.verifyLogin}.WrittenBy(s.manager, s.password)
	return nil
}

// waitForHolders keeps the bus this one-shot process serves up while other meshctl
// processes hold a lease on it, saying who.
func (s *Session) waitForHolders() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := s.Embedded.WaitReleased(ctx, func(hs []bus.Holder) {
		names := make([]string, len(hs))
		for i, h := range hs {
			names[i] = h.String()
		}
		s.logf("keeping the embedded bus up until %s, which uses it, is done", strings.Join(names, ", "))
	})
	if err != nil {
		s.logf("stopping the embedded bus although %d other meshctl process(es) still use it: interrupted", len(s.Embedded.Holders()))
	}
}

// rejoin makes sure, once the apply lock is taken, that the embedded bus this session uses
// is still served: an `apply --wait` queued behind another process whose bus has since gone
// (killed, or a `watch` stopped) reconnects — to whichever process serves it now, or to one
// it starts itself.
func (s *Session) rejoin(ctx context.Context, m *model.Mesh, l *cycleLock) error {
	if !m.Bus.Embedded() || s.Embedded != nil {
		return nil
	}
	if url, ok := bus.RunningEmbedded(s.Store.Dir()); ok && url == s.Target.URL && s.Conn != nil && s.Conn.IsConnected() {
		return nil
	}
	s.logf("the embedded bus at %s is no longer served; connecting again", s.Target.Address())
	if s.release != nil {
		s.release()
		s.release = nil
	}
	if s.jwt != nil {
		// The system user's connection too: it reached the bus that has gone.
		if err := s.dialJWT(ctx, m, s.jwt.Operator); err != nil {
			return err
		}
	} else if err := s.connectEmbedded(ctx, m, l); err != nil {
		return err
	}
	return s.connect(ctx)
}

func (s *Session) connectExternal(ctx context.Context, m *model.Mesh, l *cycleLock) error {
	var err error
	if s.Accounts, s.Target, err = accounts.External(m, s.Store.Dir()); err != nil {
		return err
	}
	s.Accounts = s.Accounts.WrittenBy(s.manager, s.password)
	s.onBus.replicas = max(m.Bus.Replicas, 1)
	s.Accounts.Verify = s.verifyLogin
	s.Accounts.Owned = s.owned
	return s.letControllerIn(ctx, m, l)
}

// bootstrap installs the rendered accounts config so the controller can log in at all.
func (s *Session) bootstrap(ctx context.Context, m *model.Mesh, l *cycleLock) error {
	// Under the apply lock, like every write of the accounts file: a write by another
	// meshctl meanwhile would replace the generation this one proves, and each would take
	// the other's file for a refusal. The lock is the cycle's, held on for the rest of it.
	if l.lock == nil {
		if err := l.acquire(ctx, s.Store.Dir(), true, nil); err != nil {
			return err
		}
		if s.controllerLetIn() {
			return nil // installed by the holder we waited for
		}
	}
	data, err := s.bootstrapAccounts(ctx, m, s.Accounts.Path)
	if err != nil {
		return err
	}
	a := s.Accounts
	a.Verify = nil // verifying is logging in, which the caller does next
	if err := a.Write(ctx, data); err != nil {
		return fmt.Errorf("installing the first accounts config: %w", err)
	}
	s.installed = true
	return nil
}

// verifyLogin proves the server still lets the controller in after a reload, on a
// connection of its own, into an account with JetStream: the MESH account, not the open
// global account of a server without users.
//
// When the controller's entry is the one the server admitted it with before (admitted), the
// session's own connection is that proof: the reload checked it against the new users and
// kept it, so JetStream answering on it is enough, without a new login and the server's
// bcrypt of it (a tenth of a second at cost 11, where an operator chose that cost).
func (s *Session) verifyLogin(ctx context.Context, admitted bool) error {
	if admitted && s.Conn != nil && s.Conn.IsConnected() {
		if err := s.jetStreamAnswers(ctx, s.Conn); err == nil {
			return nil
		}
	}
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		if err = s.loginWithJetStream(ctx); err == nil {
			return nil
		}
		// A reload by signal is asynchronous: give the server a moment to take it.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("the controller cannot log in after the reload: %w", err)
}

func (s *Session) loginWithJetStream(ctx context.Context) error {
	c, err := busclient.Dial(ctx, s.Target, s.credential())
	if err != nil {
		return err
	}
	defer c.Close()
	return s.jetStreamAnswers(ctx, c)
}

// jetStreamAnswers checks that JetStream answers the controller on c.
func (s *Session) jetStreamAnswers(ctx context.Context, c *busclient.Conn) error {
	js, err := jetstream.New(c.Conn)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("logged in, but JetStream does not answer: %w", err)
	}
	return nil
}
