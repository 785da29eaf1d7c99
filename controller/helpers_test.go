package controller

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/bcrypt"
	_ "modernc.org/sqlite"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/bus/bustest"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/atomicfile"
	"github.com/meshbus/meshctl/internal/lockedbuf"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/jsapi"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
	"github.com/meshbus/meshctl/wire"
)

// waitLimit is how long a test waits for a condition before it gives up: a failsafe, not a
// measurement; every wait ends as soon as its condition holds.
const waitLimit = testwait.Limit

// twoNodes is a small mesh: one node that emits and sends, one that holds a seat and follows.
const twoNodes = `nodes:
  - name: one
  - name: two
seats:
  - name: mailer
    accepts: [send]
    emits: [sent]
modules:
  - name: shop
    on: [one]
    emits: [order.placed]
    sends: [mailer/send]
  - name: postman
    on: [two]
    claims: [mailer]
    follows: [shop/order.placed]
`

// fixture is one controller on a real bus with a real SQLite store, for one test.
type fixture struct {
	t         *testing.T
	dir       string
	mesh      *model.Mesh
	store     *state.Store
	bus       *bus.Embedded
	ctrl      *Controller
	passwords map[string]string // what the test may join as: every derived principal but instances (seeds, with bus.auth: nkey)

	logs   *lockedbuf.Buffer
	mu     sync.Mutex
	events []Event
	more   chan struct{}
}

// start loads the description, mints every node's and enrolment identity's credential, starts a
// bus carrying the mesh (streams and consumers created by the product's own apply), and runs the
// controller on it until the test ends.
func start(t *testing.T, description string, opts ...func(*Config)) *fixture {
	t.Helper()
	f := startStopped(t, description, opts...)
	f.run()
	return f
}

// startStopped is start without running the controller: what the nodes publish meanwhile waits
// in CONTROL, undelivered, until the test calls run.
func startStopped(t *testing.T, description string, opts ...func(*Config)) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{t: t, dir: t.TempDir(), logs: &lockedbuf.Buffer{}, more: make(chan struct{})}
	f.write(description)
	var err error
	if f.store, err = state.Open(filepath.Join(t.TempDir(), "state")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.store.Close() })
	ctlPassword, err := f.store.ControllerPassword(ctx, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	var users []string
	for _, p := range render.Derive(f.mesh).Principals {
		if p.Kind == render.KindNode || p.Kind == render.KindEnrol {
			users = append(users, p.User)
		}
	}
	if f.mesh.Bus.Nkeys() {
		f.passwords, err = f.store.MintNkeys(ctx, users, "test")
	} else {
		f.passwords, err = f.store.Mint(ctx, users, bcrypt.MinCost, "test")
	}
	if err != nil {
		t.Fatal(err)
	}
	hashes, _ := f.store.Hashes(ctx)
	desired := render.Derive(f.mesh)
	f.bus = bustest.StartTestBus(t, render.AccountsConfig(desired.Principals, hashes))
	conn, err := busclient.Dial(ctx, busclient.Target{URL: f.bus.URL()}, busclient.Credential{User: render.ControllerUser, Password: ctlPassword})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api, err := jsapi.New(conn.Conn)
	if err != nil {
		t.Fatal(err)
	}
	p := plan.Compute(plan.TargetOf(desired, hashes), plan.Live{}, plan.Options{})
	if _, err := reconcile.Apply(ctx, p, api, accounts.File{Path: f.bus.AccountsFile(), Reloader: f.bus.Reloader(),
		Target: busclient.Target{URL: f.bus.URL()}, StateDir: f.store.Dir()}, nil); err != nil {
		t.Fatalf("creating the mesh: %v", err)
	}

	cfg := Config{
		Target: busclient.Target{URL: f.bus.URL()}, Password: ctlPassword, Store: f.store, Cost: bcrypt.MinCost,
		Sync: f.sync, Bound: time.Minute, Retry: 100 * time.Millisecond, StoreTimeout: 300 * time.Millisecond,
		Logger:  slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Observe: f.observe,
	}
	for _, o := range opts {
		o(&cfg)
	}
	f.ctrl = New(cfg)
	return f
}

// run runs the controller until the test ends, and waits for it to be ready.
func (f *fixture) run() {
	t := f.t
	t.Helper()
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.ctrl.Run(runCtx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-f.ctrl.Ready():
	case <-time.After(waitLimit):
		t.Fatalf("the controller did not start within %s", waitLimit)
	}
}

// write replaces the description and loads it.
func (f *fixture) write(description string) {
	f.t.Helper()
	if err := os.WriteFile(filepath.Join(f.dir, "mesh.yaml"), []byte(description), 0o600); err != nil {
		f.t.Fatal(err)
	}
	m, err := model.Load(f.dir)
	if err != nil {
		f.t.Fatal(err)
	}
	f.mesh = m
}

// sync is what watch's reconcile does for the controller: the accounts config rendered from the
// store's hashes, made live by a reload.
func (f *fixture) sync(ctx context.Context) error {
	hashes, err := f.store.Hashes(ctx)
	if err != nil {
		return err
	}
	conf := render.AccountsConfig(render.Derive(f.mesh).Principals, hashes)
	if err := atomicfile.Write(f.bus.AccountsFile(), conf); err != nil {
		return err
	}
	return f.bus.Reload()
}

func (f *fixture) observe(e Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, e)
	close(f.more)
	f.more = make(chan struct{})
}

// waitEvent waits for an event that match accepts, from the index-th on, and returns it and the
// index after it.
func (f *fixture) waitEvent(from int, match func(Event) bool) (Event, int) {
	f.t.Helper()
	deadline := time.After(waitLimit)
	for {
		f.mu.Lock()
		for i := from; i < len(f.events); i++ {
			if match(f.events[i]) {
				e := f.events[i]
				f.mu.Unlock()
				return e, i + 1
			}
		}
		more := f.more
		f.mu.Unlock()
		select {
		case <-more:
		case <-deadline:
			f.t.Fatalf("no such event within %s; the controller logged:\n%s", waitLimit, f.logs.String())
		}
	}
}

func settled(v Verb) func(Event) bool { return func(e Event) bool { return e.Settle.Verb == v } }

// join joins the bus as user with the password minted at the start.
func (f *fixture) join(user string) *host.Host {
	f.t.Helper()
	if f.mesh.Bus.Nkeys() {
		return f.joinAs(host.Membership{Address: f.bus.URL(), User: user, Seed: f.passwords[user]})
	}
	return f.joinAs(host.Membership{Address: f.bus.URL(), User: user, Password: f.passwords[user]})
}

// joinAs joins with m, trying again while the bus refuses: a credential goes live with a reload
// the controller asked for a moment earlier, and a login during a reload can be cut off.
func (f *fixture) joinAs(m host.Membership) *host.Host {
	f.t.Helper()
	var h *host.Host
	testwait.Until(f.t, "joining as "+m.User, func() (err error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h, err = host.Join(ctx, m)
		return err
	})
	f.t.Cleanup(h.Close)
	return h
}

// controlMessages is how many messages the CONTROL work queue holds.
func (f *fixture) controlMessages() uint64 {
	f.t.Helper()
	return f.streamInfo(render.StreamControl).State.Msgs
}

func (f *fixture) streamInfo(name string) *jetstream.StreamInfo {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	js, err := jetstream.New(f.ctrl.probe(f.t, f.bus.URL()).Conn)
	if err != nil {
		f.t.Fatal(err)
	}
	s, err := js.Stream(ctx, name)
	if err != nil {
		f.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	return info
}

// probe is a connection of the test's own as the controller, to look at the streams.
func (c *Controller) probe(t *testing.T, url string) *busclient.Conn {
	t.Helper()
	conn, err := busclient.Dial(context.Background(), busclient.Target{URL: url}, busclient.Credential{User: render.ControllerUser, Password: c.cfg.Password})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn
}

// holdWriteLock takes the store's write lock from a connection of its own, as another process
// writing would, until the returned release is called: every write the controller tries
// meanwhile fails for real, after its timeout, with the lock held.
func (f *fixture) holdWriteLock() (release func()) {
	f.t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", filepath.Join(f.store.Dir(), "meshctl.db"))
	if err != nil {
		f.t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		f.t.Fatalf("taking the store's write lock: %v", err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			_, _ = conn.ExecContext(ctx, "ROLLBACK")
			conn.Close()
			db.Close()
		})
	}
	f.t.Cleanup(release)
	return release
}

// report files a report as node.
func (f *fixture) report(h *host.Host, node string, r wire.Report) {
	f.t.Helper()
	data, _ := json.Marshal(r)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := h.Report(ctx, node, data); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) reports() []state.Report {
	f.t.Helper()
	r, err := f.store.Reports(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

// noPassword fails the test if any of the passwords handed out appears in the logs.
func (f *fixture) noPassword(passwords ...string) {
	f.t.Helper()
	logs := f.logs.String()
	for _, p := range passwords {
		if p != "" && strings.Contains(logs, p) {
			f.t.Errorf("a password appears in the controller's log")
		}
	}
}

// enrolAndDeclare records, through the store alone, that node enrolled and was declared
// generation: the state a controller that ran before would have left.
func enrolAndDeclare(t *testing.T, f *fixture, node string, generation uint64) {
	t.Helper()
	ctx := context.Background()
	pub, _, err := wire.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Mint(ctx, []string{render.EnrolUser(node)}, bcrypt.MinCost, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.EnrolNode(ctx, state.NodeEnrolment{Node: node, EnrolPrincipal: render.EnrolUser(node),
		NodePrincipal: render.NodeUser(node), PublicKey: pub}, bcrypt.MinCost); err != nil {
		t.Fatal(err)
	}
	if err := f.store.RecordDeclaration(ctx, node, state.Declared{Generation: generation, Digest: "earlier", DeclaredAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
