package bus

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshbus/meshctl/busclient"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The embedded bus runs from files an operator can read: server.conf with the store and the
// include, accounts.conf beside it, both 0600 — and a config check of its own server.conf passes.
func TestEmbeddedWritesItsConfigFiles(t *testing.T) {
	t.Parallel()
	e := startTestBus(t, nil)
	conf, err := os.ReadFile(e.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`server_name: "meshctl-test"`,
		`listen: "127.0.0.1:-1"`,
		`store_dir: "` + filepath.Join(stateDirOf(e), "bus", "jetstream") + `"`,
		`include "accounts.conf"`,
	} {
		if !strings.Contains(string(conf), want) {
			t.Errorf("server.conf lacks %s:\n%s", want, conf)
		}
	}
	for _, f := range []string{e.ConfigFile(), e.AccountsFile(), filepath.Join(stateDirOf(e), "bus", "bus.json")} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s is %v, want 0600", f, fi.Mode().Perm())
		}
	}
	if err := CheckConfig(e.ConfigFile()); err != nil {
		t.Fatal(err)
	}
}

// With no accounts given, StartTestBus is an open bus whose global account has JetStream.
func TestAnOpenTestBusHasJetStream(t *testing.T) {
	t.Parallel()
	e := startTestBus(t, nil)
	c := dialAs(t, e.URL(), testUser{name: "anyone", password: "unused"})
	js, err := jetstream.New(c.Conn)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"mesh.mod.>"}}); err != nil {
		t.Fatal(err)
	}
}

// Without InitialAccounts the first accounts.conf is a MESH account with JetStream and no users;
// an existing accounts.conf survives a restart, because it is what the last apply made live.
func TestTheAccountsFileIsWrittenOnlyOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e, err := StartEmbedded(context.Background(), EmbeddedOptions{StateDir: dir, Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(e.AccountsFile())
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != defaultAccounts {
		t.Fatalf("first accounts.conf:\n%s", got)
	}
	u := testUser{name: "controller", password: "pw", pub: []string{"a"}, sub: []string{"_INBOX.controller.>"}}
	writeAccounts(t, e.AccountsFile(), accountsFor(t, u))
	e.Shutdown()

	e, err = StartEmbedded(context.Background(), EmbeddedOptions{
		StateDir: dir, Listen: "127.0.0.1:-1", InitialAccounts: []byte("# would lock everybody out\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	dialAs(t, e.URL(), u)
}

// Reload re-reads the include: a user added to accounts.conf can log in afterwards and not
// before, and the config load time advances.
func TestReloadPicksUpAChangedAccountsFile(t *testing.T) {
	t.Parallel()
	a := testUser{name: "one.a", password: "pw-a", pub: []string{"mesh.a"}, sub: []string{"_INBOX.one.a.>"}}
	b := testUser{name: "one.b", password: "pw-b", pub: []string{"mesh.b"}, sub: []string{"_INBOX.one.b.>"}}
	e := startTestBus(t, accountsFor(t, a))
	dialAs(t, e.URL(), a)
	if _, err := busclient.Dial(context.Background(), busclient.Target{URL: e.URL()}, busclient.Credential{User: b.name, Password: b.password}); err == nil {
		t.Fatal("a user not yet in the accounts file logged in")
	}

	writeAccounts(t, e.AccountsFile(), accountsFor(t, a, b))
	before := e.ConfigLoadTime()
	if err := e.Reloader().Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if after := e.ConfigLoadTime(); !after.After(before) {
		t.Fatalf("config load time %v did not advance past %v", after, before)
	}
	dialAs(t, e.URL(), b)
}

// A second meshctl process finds the running bus through bus.json; a stale record (dead pid, or a
// live pid with nothing listening) is ignored; Shutdown removes the record.
func TestRunningEmbeddedFindsTheBusAndIgnoresAStaleRecord(t *testing.T) {
	t.Parallel()
	e := startTestBus(t, nil)
	state := stateDirOf(e)
	if url, ok := RunningEmbedded(state); !ok || url != e.URL() {
		t.Fatalf("RunningEmbedded = %q, %v; want %q, true", url, ok, e.URL())
	}

	// A second bus on the same store is refused: nats-server does not lock its store.
	_, err := StartEmbedded(context.Background(), EmbeddedOptions{StateDir: state, Listen: "127.0.0.1:-1"})
	if !errors.Is(err, ErrAlreadyRunning) || !strings.Contains(err.Error(), e.URL()) {
		t.Fatalf("second start: got %v, want ErrAlreadyRunning naming %s", err, e.URL())
	}

	stale := t.TempDir()
	writeRecord(t, stale, busRecord{URL: e.URL(), PID: deadPID(t)})
	if url, ok := RunningEmbedded(stale); ok {
		t.Fatalf("a record of a dead pid was taken as running at %s", url)
	}

	// A live pid (ours) at an address nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "nats://" + l.Addr().String()
	l.Close()
	writeRecord(t, stale, busRecord{URL: closed, PID: os.Getpid()})
	if url, ok := RunningEmbedded(stale); ok {
		t.Fatalf("a record of an address nobody listens on was taken as running at %s", url)
	}

	if _, ok := RunningEmbedded(t.TempDir()); ok {
		t.Fatal("no record, yet running")
	}

	e.Shutdown()
	if _, err := os.Stat(filepath.Join(state, "bus", "bus.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("bus.json after Shutdown: %v", err)
	}
	if _, ok := RunningEmbedded(state); ok {
		t.Fatal("RunningEmbedded after Shutdown")
	}
}

func writeRecord(t *testing.T, stateDir string, rec busRecord) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(stateDir, "bus"), 0o700); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stateDir, "bus", "bus.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A port already in use fails the start at once with the server's reason, instead of as a
// readiness timeout ten seconds later.
func TestAPortInUseFailsTheStartAtOnce(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = StartEmbedded(context.Background(), EmbeddedOptions{StateDir: t.TempDir(), Listen: l.Addr().String()})
	if err == nil {
		t.Fatal("started on a port in use")
	}
	// The listener's own reason, which the readiness timeout would not give: the start failed
	// when the listen did, not when the wait for readiness ran out.
	if msg := err.Error(); !strings.Contains(msg, l.Addr().String()) || !strings.Contains(msg, "address already in use") {
		t.Errorf("the error does not name the address and why it cannot be listened on: %v", err)
	}
}

// CheckAccounts accepts what render writes and rejects a syntax error with the parser's own
// file:line, leaving nothing behind in the directory.
func TestCheckAccounts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	u := testUser{name: "controller", password: "pw", pub: []string{"$JS.API.>"}, sub: []string{"_INBOX.controller.>"}}
	if err := CheckAccounts(accountsFor(t, u), dir); err != nil {
		t.Fatalf("a good accounts config was refused: %v", err)
	}
	bad := []byte("accounts {\n  MESH {\n    jetstream: enabled\n    users = [\n      { user: \"x\", password: \"y\" \n  }\n")
	err := CheckAccounts(bad, dir)
	if err == nil {
		t.Fatal("a syntax error was accepted")
	}
	if !strings.Contains(err.Error(), "line 7") {
		t.Fatalf("the error carries no file:line: %v", err)
	}
	t.Logf("syntax error reads: %v", err)
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("CheckAccounts left %d files in %s", len(left), dir)
	}
	// An unquoted hash is a variable reference to the parser (docs/nats-behaviour.md) — unless it
	// is exactly the bcrypt form the parser special-cases; a misspelt permission key is refused.
	typo := []byte("accounts { MESH { users = [ { user: x, password: y, permissions: { publsh: { allow: [\"a\"] } } } ] } }\n")
	if err := CheckAccounts(typo, dir); err == nil {
		t.Fatal("a misspelt permissions key was accepted")
	} else {
		t.Logf("typo reads: %v", err)
	}
}

// Violations on a reloaded bus: a subscription the new config no longer allows is dropped and
// reported (the server's "(sid …)" wording), so revocations are visible to the client.
func TestARevokedSubscriptionIsReportedAfterReload(t *testing.T) {
	t.Parallel()
	u := testUser{name: "two.audit", password: "pw", pub: []string{"x"}, sub: []string{"_INBOX.two.audit.>", "mesh.mod.shop.event.order.placed"}}
	e := startTestBus(t, accountsFor(t, u))
	c := dialAs(t, e.URL(), u)
	if _, err := c.SubscribeSync("mesh.mod.shop.event.order.placed"); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	u.sub = []string{"_INBOX.two.audit.>"}
	writeAccounts(t, e.AccountsFile(), accountsFor(t, u))
	if err := e.Reload(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := c.WaitViolation(ctx, "mesh.mod.shop.event.order.placed")
	if err != nil {
		t.Fatal(err)
	}
	if v.Op != busclient.OpSubscribe {
		t.Fatalf("got %+v", v)
	}
	if c.Status() != nats.CONNECTED {
		t.Fatalf("a permission change disconnected the client: %v", c.Status())
	}
}

// A state directory's lock can outlive its bus for a moment: a process forked while the bus
// ran holds a copy of the lock's file until it execs. A start then waits for it rather than
// report a bus running that is not. Not parallel: it sets the package's hook.
func TestAStartWaitsForALockNoRecordedBusHolds(t *testing.T) {
	stateDir := t.TempDir()
	dir := filepath.Join(stateDir, busDirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	unlock, err := lockDir(filepath.Join(dir, lockName))
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan struct{}, 1)
	lockHeld = func() {
		select {
		case held <- struct{}{}:
		default:
		}
	}
	defer func() { lockHeld = func() {} }()
	started := make(chan error, 1)
	go func() {
		e, err := StartEmbedded(context.Background(), EmbeddedOptions{StateDir: stateDir, Listen: "127.0.0.1:-1"})
		if err == nil {
			e.Shutdown()
		}
		started <- err
	}()
	// Let go once the start has found the lock held.
	select {
	case <-held:
	case err := <-started:
		t.Fatalf("the start did not wait for the lock: %v", err)
	}
	unlock()
	if err := <-started; err != nil {
		t.Fatalf("the start once the lock was let go: %v", err)
	}
}
