// Package hosttest starts a real bus carrying a whole mesh, for tests of hosts: every principal
// the mesh derives is issued a password, and the streams and consumers are created by the
// controller through the product's own path — plan against an empty bus, apply with the bus's
// accounts file and reload — as `meshctl apply` does.
//
// StartJWT does the same on operator-mode servers (bus.auth: jwt): the mesh is an account whose
// JWT is pushed to the servers, and every principal a user of it, holding a user JWT with
// exactly its grants and the seed of its key.
//
// One bus per call, nats-server processes on random ports in the test's own directory: tests
// that shared a bus deleted each other's objects, and a server embedded in the test's process
// that is reloaded trips the race detector inside nats-server (StartConsumers). Passwords are hashed at bcrypt's lowest cost: tests prove
// permissions, not hashing.
package hosttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/bus/bustest"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/backoff"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/jsapi"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
	"github.com/meshbus/meshctl/wire"
)

// Mesh is one test's bus and the mesh it carries.
type Mesh struct {
	// Cluster is the nats-server processes of Start (one) and StartCluster.
	Cluster *bustest.TestCluster
	// Server is StartTLS's nats-server process: renew its certificates on disk and Reload or
	// Restart it.
	Server  *bustest.TestServer
	Model   *model.Mesh
	Desired *render.Desired

	// JWT is StartJWT's account on operator-mode servers, whose users the principals are;
	// nil for a bus of passwords.
	JWT *JWTAccount

	target busclient.Target // every server, as memberships list them
	// files is Cluster's accounts files, written, reloaded and proven as an apply does.
	files accounts.File

	passwords map[string]string
	hashes    map[string]string
	// creds are StartJWT's principals' credentials: a user JWT each, and its seed.
	creds map[string]accounts.Creds
	seeds map[string]string

	// probes are StartJWTCluster's connections that see a subscription reach every server.
	probes *probes

	mu    sync.Mutex
	hosts map[string]*host.Host // joined once and shared by whatever needs a counterpart
}

// Start loads the mesh in dir, starts a bus whose accounts are the mesh's principals with a
// password each, and has the controller create the streams and consumers. Everything stops when
// t ends.
func Start(t testing.TB, dir string) *Mesh {
	t.Helper()
	return StartConsumers(t, dir, "")
}

// StartConsumers is Start with the mesh's consumers of kind (model.ConsumersPull or
// model.ConsumersPush) whatever bus.consumers says, "" keeping the description's own: one
// description proves both kinds.
//
// The bus is a nats-server process of its own (a TestCluster of one), not a server embedded in
// the test's process: nats-server 2.15 races with itself when a server that answered a
// JetStream request is reloaded and its response timer fires two minutes later
// (docs/nats-behaviour.md, "Reload"). In a process of its own, the race detector of the test's
// process never sees it, however long the package runs.
func StartConsumers(t testing.TB, dir, kind string) *Mesh {
	t.Helper()
	b := newMesh(t, dir, func(m *model.Mesh) {
		if kind != "" {
			m.Bus.Consumers = kind
		}
	})
	b.start(t, 1)
	return b
}

// StartCluster is Start on a JetStream cluster of n nats-server processes
// (bustest.StartTestCluster), as an operator runs one: every server includes its own copy of the
// mesh's accounts, every stream has n replicas, and memberships list every server, the first
// as their address, as `meshctl credentials issue` prints them for a cluster. Stop a server
// with b.Cluster.Servers[i].Stop.
func StartCluster(t testing.TB, dir string, n int) *Mesh {
	t.Helper()
	b := newMesh(t, dir, func(m *model.Mesh) {
		// The streams' settings were resolved from bus.replicas when the mesh loaded: every
		// one follows, as a description saying bus.replicas would have made them.
		m.Bus.Replicas = n
		for _, s := range []*model.StreamSettings{&m.Bus.Streams.Control, &m.Bus.Streams.Events, &m.Bus.Streams.Nodes, &m.Bus.Streams.Seats} {
			s.Replicas = n
		}
		for i := range m.Seats {
			m.Seats[i].Stream.Replicas = n
		}
	})
	b.start(t, n)
	return b
}

// start runs the mesh on n nats-server processes, one standalone server when n is 1: the
// mesh's users written to every server's accounts file, then the streams, consumers and
// accounts config created by the controller through the first server's file, as an apply does.
func (b *Mesh) start(t testing.TB, n int) {
	t.Helper()
	b.Cluster = bustest.StartTestCluster(t, n)
	if n > 1 {
		// Streams of n replicas are placed only once every server is a current peer.
		b.Cluster.WaitForEveryPeer()
	}
	conf := render.AccountsConfig(b.Desired.Principals, b.hashes)
	var servers []busclient.Target
	var each []accounts.File
	for _, srv := range b.Cluster.Servers {
		st := busclient.Target{URL: srv.URL}
		servers = append(servers, st)
		each = append(each, accounts.File{Path: srv.AccountsFile, Reloader: bus.PIDFileReloader(srv.PIDFile),
			Target: st, Server: srv.Name})
	}
	b.target = busclient.Cluster(servers)
	t.Cleanup(b.closeHosts)

	// The mesh's users first, on every server, so that the controller can log in to create
	// the rest: what an embedded bus is given when it starts.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, srv := range b.Cluster.Servers {
		if err := os.WriteFile(srv.AccountsFile, conf, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := reload(ctx, srv); err != nil {
			t.Fatal(err)
		}
	}
	b.files = each[0]
	b.files.StateDir, b.files.Others = t.TempDir(), each[1:]
	b.whileWriting(t, func() { b.create(t, b.files, plan.Live{}) })
}

// whileWriting runs write, which writes the servers' accounts files through b.files, and
// waits until every server whose file it changed has finished reloading it. The login that
// proves a file served (accounts.File.Write) is let in midway through the server's reload:
// the account's JetStream is taken up again after the users, and a request in between is
// answered "no responders". An embedded bus, reloaded by a call, never showed that moment.
func (b *Mesh) whileWriting(t testing.TB, write func()) {
	t.Helper()
	type loaded struct {
		file []byte
		at   time.Time
	}
	before := make([]loaded, len(b.Cluster.Servers))
	for i, srv := range b.Cluster.Servers {
		file, err := os.ReadFile(srv.AccountsFile)
		if err != nil {
			t.Fatal(err)
		}
		at, err := srv.ConfigLoadTime()
		if err != nil {
			t.Fatal(err)
		}
		before[i] = loaded{file, at}
	}
	write()
	for i, srv := range b.Cluster.Servers {
		file, err := os.ReadFile(srv.AccountsFile)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(file, before[i].file) {
			continue
		}
		testwait.Until(t, srv.Name+" finishing its reload", func() error {
			at, err := srv.ConfigLoadTime()
			if err == nil && !at.After(before[i].at) {
				err = fmt.Errorf("its config load time is still %s", at)
			}
			return err
		})
	}
}

// StartTLS is Start on a nats-server process of its own serving TLS as tls says
// (bustest.StartTestServerTLS), as an operator's server does. Memberships, and the
// controller that creates the mesh, recognise the server as trust says — its CA, its pins, or
// both — and present trust's client certificate; trust's URL is ignored.
func StartTLS(t testing.TB, dir string, tls bustest.ServerTLS, trust busclient.Target) *Mesh {
	t.Helper()
	b := newMesh(t, dir, func(*model.Mesh) {})
	b.Server = bustest.StartTestServerTLS(t, t.TempDir(), tls)
	trust.URL, trust.Others = b.Server.URL, ""
	b.target = trust
	t.Cleanup(b.closeHosts)
	conf := accounts.File{Path: b.Server.AccountsFile, Reloader: bus.PIDFileReloader(b.Server.PIDFile),
		Target: b.target, StateDir: t.TempDir()}
	// The mesh's users first, so that the controller can log in to create the rest.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := os.WriteFile(b.Server.AccountsFile, render.AccountsConfig(b.Desired.Principals, b.hashes), 0o600); err != nil {
		t.Fatal(err)
	}
	loaded, err := b.Server.ConfigLoadTime()
	if err != nil {
		t.Fatal(err)
	}
	if err := conf.Reloader.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	// A server lets the new users in before its reload is done: done once its config load
	// time moves.
	testwait.Until(t, "the server finishing its reload", func() bool {
		at, err := b.Server.ConfigLoadTime()
		return err == nil && at.After(loaded)
	})
	b.waitLogin(ctx, t, b.target, render.ControllerUser)
	b.create(t, conf, plan.Live{})
	return b
}

// StartJWT is StartConsumers on an operator-mode server (bus.auth: jwt): JWTAccount's, the
// mesh's account pushed to it, and every principal a user of it holding a
// user JWT that grants exactly what its password would (accounts.GrantsOf), signed by the
// account's key. The controller, logged in with its own, creates the streams and consumers
// through plan and apply, as `meshctl apply` does; the account JWT is the test's, not the
// apply's, so the plan is made against a bus whose accounts config is already the target's.
func StartJWT(t testing.TB, dir, kind string) *Mesh {
	t.Helper()
	return StartJWTCluster(t, dir, kind, 1)
}

// StartJWTCluster is StartJWT on a JetStream cluster of n operator-mode servers, every stream
// of n replicas, as StartCluster is in password mode. Each principal's membership lists every
// server but names its own first, the principals spread over the servers in turn, so that a
// principal and its counterparts talk across the cluster's routes. A subscription made
// through one server reaches the others a moment later: a test that hears a subject live
// waits for it with WaitRouted before a counterpart publishes.
func StartJWTCluster(t testing.TB, dir, kind string, n int) *Mesh {
	t.Helper()
	b := newMesh(t, dir, func(m *model.Mesh) {
		if kind != "" {
			m.Bus.Consumers = kind
		}
		// The test servers store 256 MB each, less than the default EVENTS alone reserves:
		// every stream is held to a size they place.
		m.Bus.Replicas = n
		for _, s := range []*model.StreamSettings{&m.Bus.Streams.Control, &m.Bus.Streams.Events, &m.Bus.Streams.Nodes, &m.Bus.Streams.Seats} {
			s.MaxBytes, s.Replicas = jwtStreamBytes, n
		}
		for i := range m.Seats {
			m.Seats[i].Stream.MaxBytes, m.Seats[i].Stream.Replicas = jwtStreamBytes, n
		}
	})
	b.JWT = StartJWTAccount(t, n)
	b.target = b.JWT.Target()
	b.creds, b.seeds = map[string]accounts.Creds{}, map[string]string{}
	for _, p := range b.Desired.Principals {
		c := b.JWT.Mint(t, p.User, accounts.GrantsOf(p))
		b.creds[p.User], b.seeds[p.User] = c, SeedOf(t, c)
	}
	if n > 1 {
		b.probes = newProbes(t, b.JWT)
	}
	t.Cleanup(b.closeHosts)
	b.create(t, accounts.File{}, plan.Live{Accounts: b.Target().Accounts, AccountsKnown: true})
	return b
}

// jwtStreamBytes is the size of each stream of StartJWT's mesh.
const jwtStreamBytes = 16 << 20

// newMesh loads the mesh in dir, adjusted by adjust, and issues every principal a password.
func newMesh(t testing.TB, dir string, adjust func(*model.Mesh)) *Mesh {
	t.Helper()
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	adjust(m)
	b := &Mesh{Model: m, Desired: render.Derive(m), passwords: map[string]string{},
		hashes: map[string]string{}, hosts: map[string]*host.Host{}}
	for _, user := range b.Desired.Users() {
		pw, err := state.GeneratePassword()
		if err != nil {
			t.Fatal(err)
		}
		hash, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		b.passwords[user], b.hashes[user] = pw, string(hash)
	}
	return b
}

// create has the controller create the mesh's streams and consumers, and write the accounts
// config through accounts, as `meshctl apply` does on a bus that has none of them. A server
// process or a cluster just reloaded may leave a call unanswered while its leaders settle, or
// refuse it while it enables JetStream for the account anew; the apply is then made again, as
// the next `meshctl apply` would (testwait.Until): each of its calls is one that a second time
// finds done.
func (b *Mesh) create(t testing.TB, conf accounts.File, live plan.Live) {
	t.Helper()
	api, err := jsapi.New(b.MustJoin(t, render.ControllerUser).Conn().Conn)
	if err != nil {
		t.Fatal(err)
	}
	p := plan.Compute(b.Target(), live, plan.Options{})
	if live.AccountsKnown {
		for _, c := range p.Changes {
			if c.Kind == plan.KindAccounts {
				t.Fatalf("the mesh's accounts config is in place, yet the plan changes it: %s %s", c.Action, c.ID())
			}
		}
	}
	testwait.Until(t, "the controller creating the mesh", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit)
		defer cancel()
		_, err := reconcile.Apply(ctx, p, api, conf, nil)
		return err
	})
}

// waitLogin waits until server lets user in: a server reloads moments after its signal.
func (b *Mesh) waitLogin(ctx context.Context, t testing.TB, server busclient.Target, user string) {
	t.Helper()
	testwait.Until(t, fmt.Sprintf("%s letting %s in", server.Address(), user), func() error {
		c, err := busclient.DialAlone(ctx, server, busclient.Credential{User: user, Password: b.passwords[user]})
		if err == nil {
			c.Close()
		}
		return err
	})
}

// Target is the bus the mesh should be, with the passwords' hashes.
func (b *Mesh) Target() plan.Target { return plan.TargetOf(b.Desired, b.hashes) }

// Membership is what `meshctl credentials issue` would print for user: its password, or on
// StartJWT's bus its seed and user JWT.
func (b *Mesh) Membership(user string) host.Membership {
	if b.JWT != nil {
		return host.MembershipOf(b.targetOf(user), user, b.seeds[user], true).WithJWT(b.creds[user].JWT)
	}
	return host.MembershipOf(b.target, user, b.passwords[user], false)
}

// Reissue gives user of StartJWT's mesh a new credential, a new key with the same grants, and
// returns the public key of the one it replaces, for the test to revoke (JWT.Push). From then
// on Membership is the new one's. Not while another goroutine joins.
func (b *Mesh) Reissue(t testing.TB, user string) string {
	t.Helper()
	p, ok := b.Desired.Principal(user)
	if !ok || b.JWT == nil {
		t.Fatalf("%s is not a principal of a jwt mesh", user)
	}
	old := b.creds[user].UserKey
	c := b.JWT.Mint(t, user, accounts.GrantsOf(p))
	b.creds[user], b.seeds[user] = c, SeedOf(t, c)
	return old
}

// AccountsFile is the accounts file Start's server serves, or "" where the mesh's users are not
// in one file this test can read (a cluster's servers have one each).
func (b *Mesh) AccountsFile() string {
	if b.Cluster == nil || len(b.Cluster.Servers) != 1 {
		return ""
	}
	return b.Cluster.Servers[0].AccountsFile
}

// Reload is what every change of the accounts config does to the hosts connected: Start's and
// StartCluster's servers reload their accounts files, StartJWT's are pushed the account's JWT
// anew. It returns once every server has reloaded.
func (b *Mesh) Reload(ctx context.Context) error {
	if b.JWT != nil {
		return b.JWT.Push(ctx)
	}
	if b.Cluster == nil {
		return errors.New("reloading the test's bus: only Start's, StartCluster's and StartJWT's reload")
	}
	for _, srv := range b.Cluster.Servers {
		if err := reload(ctx, srv); err != nil {
			return err
		}
	}
	return nil
}

// reload signals srv to reload and waits until its monitoring port says it has: a reload by
// signal is done in the server's own time, and its config load time moves only once the new
// config, with every connection checked against it and the account's JetStream taken up
// again, is in force.
func reload(ctx context.Context, srv *bustest.TestClusterServer) error {
	before, err := srv.ConfigLoadTime()
	if err != nil {
		return fmt.Errorf("reloading %s: %w", srv.Name, err)
	}
	if err := bus.PIDFileReloader(srv.PIDFile).Reload(ctx); err != nil {
		return fmt.Errorf("reloading %s: %w", srv.Name, err)
	}
	if !backoff.Retry(ctx, backoff.Backoff{Min: 10 * time.Millisecond, Max: 200 * time.Millisecond}, func() bool {
		at, err := srv.ConfigLoadTime()
		return err == nil && at.After(before)
	}) {
		return fmt.Errorf("%s did not reload (its config load time stayed %s): %w", srv.Name, before, ctx.Err())
	}
	return nil
}

// Dial joins as user on a connection of its own, closed when t ends.
func (b *Mesh) Dial(t testing.TB, user string) *host.Host {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := host.Join(ctx, b.Membership(user))
	if err != nil {
		t.Fatalf("joining as %s: %v", user, err)
	}
	t.Cleanup(h.Close)
	return h
}

// Join is user's shared connection, dialled on first use and closed when the bus stops. It
// reports a failure rather than ending a test, so a test may call it from any goroutine.
func (b *Mesh) Join(user string) (*host.Host, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h, ok := b.hosts[user]; ok {
		return h, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := host.Join(ctx, b.Membership(user))
	if err != nil {
		return nil, err
	}
	b.hosts[user] = h
	return h, nil
}

// MustJoin is Join for a test's own steps, ending the test when it fails.
func (b *Mesh) MustJoin(t testing.TB, user string) *host.Host {
	t.Helper()
	h, err := b.Join(user)
	if err != nil {
		t.Fatalf("joining as %s: %v", user, err)
	}
	return h
}

// Forget closes user's shared connection, to be dialled afresh when next needed: after a reload
// took grants away from user, the server dropped the subscriptions they allowed (its request
// inbox among them), and giving the grants back does not restore them.
func (b *Mesh) Forget(user string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h, ok := b.hosts[user]; ok {
		h.Close()
		delete(b.hosts, user)
	}
}

func (b *Mesh) closeHosts() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, h := range b.hosts {
		h.Close()
	}
}

// Install makes principals the bus's users (Start's and StartCluster's), with the mesh's
// passwords, as an apply does (accounts.File.Write): checked by the server's parser, written
// over the live file, reloaded, and proven served by a login before it returns — live for every
// connection at once.
func (b *Mesh) Install(t testing.TB, principals []render.Principal) {
	t.Helper()
	if b.Cluster == nil {
		t.Fatal("Install: only Start's and StartCluster's accounts files are written by the test")
	}
	b.whileWriting(t, func() {
		ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit)
		defer cancel()
		if err := b.files.Write(ctx, render.AccountsConfig(principals, b.hashes)); err != nil {
			t.Fatal(err)
		}
	})
}

// WaitControllerHears waits, as the controller (which follows it), for one event on subject
// carrying data, failing with log() when another arrives first or ctx ends: how a host's test
// sees that what the host reported reached the control plane.
func (b *Mesh) WaitControllerHears(ctx context.Context, t testing.TB, subject, data string, log func() string) {
	t.Helper()
	got := make(chan jetstream.Msg, 4)
	cc, err := b.MustJoin(t, render.ControllerUser).ControllerEvents(ctx, func(m jetstream.Msg) { got <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	select {
	case m := <-got:
		if m.Subject() != subject || string(m.Data()) != data {
			t.Fatalf("the controller heard %s %q, not %s %q", m.Subject(), m.Data(), subject, data)
		}
	case <-ctx.Done():
		t.Fatalf("the controller did not hear %s; the host's log:\n%s", subject, log())
	}
}

// NkeyBus is a bus with one nkey user, as `bus.auth: nkey` makes every principal: the server
// holds only the public key of Seed, and a host logs in by signing the server's challenge.
// User may publish what StartNkey granted it, into a stream that keeps it, and subscribe its
// own inbox; nothing else.
type NkeyBus struct {
	Bus  *bus.Embedded
	User string
	Seed string
}

// StartNkey starts a bus whose one user, user, is an nkey user granted to publish each of
// publish, and a stream NKEYTEST keeping those subjects. Written by hand rather than
// rendered: it proves the client side of an nkey login, whatever the mesh's rendering.
func StartNkey(t testing.TB, user string, publish ...string) *NkeyBus {
	t.Helper()
	seed := UserSeed(t)
	kp, err := nkeys.FromSeed([]byte(seed))
	if err != nil {
		t.Fatal(err)
	}
	public, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	setup, err := state.GeneratePassword()
	if err != nil {
		t.Fatal(err)
	}
	quoted := func(subjects []string) string {
		var q []string
		for _, s := range subjects {
			q = append(q, strconv.Quote(s))
		}
		return strings.Join(q, ", ")
	}
	conf := fmt.Sprintf(`accounts {
  MESH {
    jetstream: enabled
    users = [
      { nkey: %q, permissions: { publish: { allow: [%s] }, subscribe: { allow: [%q] } } }
      { user: "setup", password: %q }
    ]
  }
}
`, public, quoted(publish), render.Inbox(user)+".>", setup)
	b := &NkeyBus{Bus: bustest.StartTestBus(t, []byte(conf)), User: user, Seed: seed}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := busclient.Dial(ctx, busclient.Target{URL: b.Bus.URL()}, busclient.Credential{User: "setup", Password: setup})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	js, err := jetstream.New(c.Conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "NKEYTEST", Subjects: publish}); err != nil {
		t.Fatal(err)
	}
	return b
}

// UserSeed is a fresh nkey user seed (SU…), as an nkey principal's membership carries one.
func UserSeed(t testing.TB) string {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	return string(seed)
}

// Membership is user's, as `meshctl credentials issue` prints it for an nkey principal.
func (b *NkeyBus) Membership() host.Membership {
	return wire.NewMembership([]string{b.Bus.URL()}, "", b.User, b.Seed, true)
}

// WaitServing waits until every stream and consumer of the mesh answers the controller, each
// asked on a connection of its own: after a server of a cluster stops, the streams and
// consumers it led elect new leaders, and until they have, a publish or a binding gets no
// answer.
func (b *Mesh) WaitServing(ctx context.Context, t testing.TB) {
	t.Helper()
	if b.Cluster == nil {
		controller := b.Dial(t, render.ControllerUser)
		testwait.Until(t, "every stream and consumer of the mesh answering", func() error { return b.serving(ctx, controller.JetStream()) })
		return
	}
	// Through each running server on its own: a host may join any of them, and a server just
	// reloaded, or one whose peer stopped, answers for the account's JetStream only once it has
	// taken it up again.
	for _, srv := range b.Cluster.Servers {
		if !srv.Running() {
			continue
		}
		one := b.target
		one.URL, one.Others = srv.URL, ""
		m := host.MembershipOf(one, render.ControllerUser, b.passwords[render.ControllerUser], false)
		testwait.Until(t, "every stream and consumer of the mesh answering through "+srv.Name, func() error {
			jctx, cancel := context.WithTimeout(ctx, testwait.Limit)
			defer cancel()
			h, err := host.Join(jctx, m)
			if err != nil {
				return err
			}
			defer h.Close()
			return b.serving(ctx, h.JetStream())
		})
	}
}

func (b *Mesh) serving(ctx context.Context, js jetstream.JetStream) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, s := range b.Desired.Streams {
		if _, err := js.Stream(ctx, s.Name); err != nil {
			return fmt.Errorf("stream %s: %w", s.Name, err)
		}
	}
	for _, c := range b.Desired.Consumers {
		if _, err := host.ConsumerInfo(ctx, js, c.Stream, c.Config.Durable); err != nil {
			return fmt.Errorf("consumer %s/%s: %w", c.Stream, c.Config.Durable, err)
		}
	}
	return nil
}
