// Package hosttest starts a real bus carrying a whole mesh, for tests of hosts: every principal
// the mesh derives is issued a password, and the streams and consumers are created by the
// controller through the product's own path — plan against an empty bus, apply with the bus's
// accounts file and reload — as `meshctl apply` does.
//
// One bus per call, on a random port in the test's own directory (seed 003: tests that shared a
// bus deleted each other's objects). Passwords are hashed at bcrypt's lowest cost: tests prove
// permissions, not hashing.
package hosttest

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// Mesh is one test's bus and the mesh it carries.
type Mesh struct {
	Bus     *bus.Embedded
	Model   *model.Mesh
	Desired *render.Desired

	passwords map[string]string
	hashes    map[string]string

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
func StartConsumers(t testing.TB, dir, kind string) *Mesh {
	t.Helper()
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if kind != "" {
		m.Bus.Consumers = kind
	}
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
	b.Bus = bus.StartTestBus(t, render.AccountsConfig(b.Desired.Principals, b.hashes))
	t.Cleanup(b.closeHosts)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	api, err := reconcile.NewAPI(b.MustJoin(t, render.ControllerUser).Conn().Conn)
	if err != nil {
		t.Fatal(err)
	}
	p := plan.Compute(b.Target(), plan.Live{}, plan.Options{})
	accounts := reconcile.Accounts{Path: b.Bus.AccountsFile(), Reloader: b.Bus.Reloader(),
		Target: bus.Target{URL: b.Bus.URL()}, StateDir: t.TempDir()}
	if _, err := reconcile.Apply(ctx, p, api, accounts, nil); err != nil {
		t.Fatalf("the controller could not create the mesh: %v", err)
	}
	return b
}

// Target is the bus the mesh should be, with the passwords' hashes.
func (b *Mesh) Target() plan.Target { return plan.TargetOf(b.Desired, b.hashes) }

// Membership is what `meshctl credentials issue` would print for user.
func (b *Mesh) Membership(user string) host.Membership {
	return host.Membership{Address: b.Bus.URL(), User: user, Password: b.passwords[user]}
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

// Install makes principals the bus's users, with the mesh's passwords: checked by the server's
// parser, written beside the live file and renamed over it (the server never reads half a
// file), and reloaded — live for every connection at once.
func (b *Mesh) Install(t testing.TB, principals []render.Principal) {
	t.Helper()
	conf := render.AccountsConfig(principals, b.hashes)
	path := b.Bus.AccountsFile()
	if err := bus.CheckAccounts(conf, filepath.Dir(path)); err != nil {
		t.Fatal(err)
	}
	next := path + ".next"
	if err := os.WriteFile(next, conf, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, path); err != nil {
		t.Fatal(err)
	}
	if err := b.Bus.Reload(); err != nil {
		t.Fatal(err)
	}
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
