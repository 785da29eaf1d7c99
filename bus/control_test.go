package bus

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshbus/meshctl/internal/atomicfile"
)

// Another process reloads the bus through its control socket and learns the outcome: a new
// user logs in as soon as Reload returns, and a config the server refuses comes back as the
// server's own error.
func TestTheControlSocketReloadsAndAnswers(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := testUser{name: "one.a", password: "pw-a", pub: []string{"mesh.a"}, sub: []string{"_INBOX.one.a.>"}}
	b := testUser{name: "one.b", password: "pw-b", pub: []string{"mesh.b"}, sub: []string{"_INBOX.one.b.>"}}
	e := startTestBus(t, accountsFor(t, a))
	sock := filepath.Join(stateDirOf(e), "bus", controlSockName)
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("the control socket %s: %v, %v; want a socket, 0600", sock, fi, err)
	}
	r := ControlReloader(stateDirOf(e))

	writeAccounts(t, e.AccountsFile(), accountsFor(t, a, b))
	if err := r.Reload(ctx); err != nil {
		t.Fatalf("reloading through the control socket: %v", err)
	}
	dialAs(t, e.URL(), b) // no waiting: the reload is done when Reload returns

	// A second user named twice parses, and the server refuses it at reload.
	if err := atomicfile.Write(e.AccountsFile(), accountsFor(t, a, b, b)); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(ctx); err == nil || !strings.Contains(err.Error(), "Duplicate user") {
		t.Fatalf("a reload the server refused: %v; want the server's reason", err)
	}
	dialAs(t, e.URL(), b) // still served the config before

	// Its check parses nothing: the serving process's reload is the check, and a config
	// its parser refuses comes back from the reload, the users before it still served.
	reload, err := r.(AccountsChecker).CheckAccounts([]byte("accounts { MESH { users = [ { user: "))
	if err != nil {
		t.Fatalf("the control socket's check: %v", err)
	}
	if err := atomicfile.Write(e.AccountsFile(), []byte("accounts { MESH { users = [ { user: ")); err != nil {
		t.Fatal(err)
	}
	if err := reload(ctx); err == nil {
		t.Fatal("a config that does not parse was reloaded")
	}
	dialAs(t, e.URL(), b)
}

// A hold keeps the bus of a one-shot process up: WaitReleased returns only once every
// holder has let go, and names who holds it meanwhile.
func TestAHoldKeepsTheBusUntilReleased(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e := startTestBus(t, nil)
	release, err := Hold(ctx, stateDirOf(e))
	if err != nil {
		t.Fatal(err)
	}
	told := make(chan []Holder, 1)
	done := make(chan error, 1)
	go func() {
		done <- e.WaitReleased(ctx, func(hs []Holder) {
			select {
			case told <- hs:
			default:
			}
		})
	}()
	hs := <-told
	if len(hs) != 1 || hs[0].PID != os.Getpid() {
		t.Fatalf("holders %v; want this process", hs)
	}
	select {
	case err := <-done:
		t.Fatalf("WaitReleased returned while the bus was held: %v", err)
	default:
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Once the bus stops, its socket is gone and a reload through it says nobody serves the bus;
// a hold taken before is ended rather than left hanging.
func TestAStoppedBusIsNotServed(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e := startTestBus(t, nil)
	dir := stateDirOf(e)
	if _, err := Hold(ctx, dir); err != nil {
		t.Fatal(err)
	}
	e.Shutdown()
	if _, err := os.Stat(filepath.Join(dir, "bus", controlSockName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the control socket outlived the bus: %v", err)
	}
	if err := ControlReloader(dir).Reload(ctx); !errors.Is(err, ErrNotServed) {
		t.Errorf("reloading a stopped bus: %v; want ErrNotServed", err)
	}
	if _, err := Hold(ctx, dir); !errors.Is(err, ErrNotServed) {
		t.Errorf("holding a stopped bus: %v; want ErrNotServed", err)
	}
}

// A state directory deep enough that its socket path passes what a unix socket address
// holds still gets a control socket, in the bus directory itself.
func TestALongStateDirectoryStillHasAControlSocket(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dir := filepath.Join(t.TempDir(), strings.Repeat("a-long-directory-name/", 6))
	e, err := StartEmbedded(ctx, EmbeddedOptions{StateDir: dir, Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatalf("starting a bus in a %d-byte state directory: %v", len(dir), err)
	}
	defer e.Shutdown()
	if sock := filepath.Join(dir, "bus", controlSockName); len(sock) <= maxSocketPath {
		t.Fatalf("the socket path is only %d bytes", len(sock))
	}
	if err := ControlReloader(dir).Reload(ctx); err != nil {
		t.Fatalf("reloading through a long socket path: %v", err)
	}
}
