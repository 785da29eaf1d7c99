//go:build unix

package reconcile

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/internal/atomicfile"
	"github.com/meshbus/meshctl/internal/lockedbuf"
	"github.com/meshbus/meshctl/internal/testnats"
	"github.com/meshbus/meshctl/internal/testwait"
)

// modeAndGroup is the mode and group of the file at path.
func modeAndGroup(t *testing.T, path string) (os.FileMode, int) {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Mode().Perm(), int(info.Sys().(*syscall.Stat_t).Gid)
}

// The operator gave the accounts file a group and mode 0640, for a server that reads it through
// its group: every write of it — the bootstrap, a plan's, a credential's — keeps both. Made
// open to every user, it is refused before anything is written.
func TestTheAccountsFileKeepsTheModeAndGroupItWasGiven(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	x := startExternal(t)
	gid := testnats.OtherGroup(t)
	if err := os.Chown(x.accounts, -1, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(x.accounts, 0o640); err != nil {
		t.Fatal(err)
	}
	kept := func(after string) {
		t.Helper()
		if mode, g := modeAndGroup(t, x.accounts); mode != 0o640 || g != gid {
			t.Fatalf("after %s the accounts file is mode %04o, group %d; want 0640, group %d as it was given", after, mode, g, gid)
		}
	}
	f := newFixture(t, x.mesh(x.fingerprint))
	s := f.connect(ctx)
	kept("the bootstrap")
	f.mustApply(ctx, s)
	f.mint(ctx, "alpha.shop")
	f.mustApply(ctx, s)
	kept("an apply")
	f.mustConverge(ctx, s)

	if err := os.Chmod(x.accounts, 0o644); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(x.accounts)
	if err != nil {
		t.Fatal(err)
	}
	f.mint(ctx, "alpha.shop")
	_, _, err = f.apply(ctx, s, RunOptions{})
	if !errors.Is(err, atomicfile.ErrOpenToAll) || !strings.Contains(err.Error(), x.accounts) {
		t.Fatalf("an accounts file every user may read was not refused, naming it: %v", err)
	}
	if after, _ := os.ReadFile(x.accounts); string(after) != string(before) {
		t.Fatal("the refused accounts file was written")
	}
	if mode, _ := modeAndGroup(t, x.accounts); mode != 0o644 {
		t.Fatalf("the refused accounts file's mode changed to %04o", mode)
	}
}

// nobody is the user the server runs as in TestAServerRunningAsItsOwnUserReadsEveryFile: not
// the test's, and in no group of the accounts file but the one it is given.
const nobody = 65534

// nats-server run as a user of its own, which reads its accounts file through the file's
// group (mode 0640): meshctl, as root, writes the file at the bootstrap and at each apply, and
// the server reloads and serves each one. A file reset to 0600 and root's group would be
// unreadable to it, and the reload refused. Only root can run a process as another user.
func TestAServerRunningAsItsOwnUserReadsEveryFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running nats-server as another user needs root")
	}
	t.Parallel()
	ctx := testContext(t)
	gid := testnats.OtherGroup(t)
	base := t.TempDir()
	// The test's directories are root's and 0700: the server's user must pass through them.
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(base, "srv")
	if err := os.Mkdir(dir, 0o770); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 0, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o770); err != nil { // past the umask: the server writes its pid and store here
		t.Fatal(err)
	}
	// The binary the tests built is in a directory only root may enter.
	bin := filepath.Join(dir, "nats-server")
	copyExecutable(t, testnats.NATSServerBinary(t), bin)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	accounts, pid, conf := filepath.Join(dir, "mesh-accounts.conf"), filepath.Join(dir, "nats.pid"), filepath.Join(dir, "server.conf")
	for path, text := range map[string]string{
		accounts: "accounts { MESH { jetstream: enabled } }\n",
		conf: fmt.Sprintf("listen: \"127.0.0.1:%d\"\npid_file: %q\njetstream { store_dir: %q }\ninclude \"mesh-accounts.conf\"\n",
			port, pid, filepath.Join(dir, "js")),
	} {
		if err := os.WriteFile(path, []byte(text), 0o640); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(path, 0, gid); err != nil {
			t.Fatal(err)
		}
	}
	srv := exec.Command(bin, "-c", conf)
	srv.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: uint32(gid)}}
	var log lockedbuf.Buffer // the server writes it as the test reads it
	srv.Stderr = &log
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	testwait.Until(t, fmt.Sprintf("nats-server starting as user %d", nobody), func() error {
		if _, err := os.Stat(pid); err != nil {
			return err
		}
		c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "nats://"), time.Second)
		if err != nil {
			return fmt.Errorf("%w; its log:\n%s", err, log.String())
		}
		c.Close()
		return nil
	})

	f := newFixture(t, fmt.Sprintf(`bus:
  url: %s
  accounts_file: %s
  reload: { pid_file: %s }
nodes:
  - name: alpha
modules:
  - name: shop
    on: [alpha]
    emits: [order.placed]
`, url, accounts, pid))
	s := f.connect(ctx)
	f.mustApply(ctx, s)
	pw := f.mint(ctx, "alpha.shop")["alpha.shop"]
	f.mustApply(ctx, s)
	c, err := busclient.Dial(ctx, busclient.Target{URL: url}, busclient.Credential{User: "alpha.shop", Password: pw})
	if err != nil {
		t.Fatalf("a credential applied does not log in to the server running as user %d: %v\n%s", nobody, err, log.String())
	}
	c.Close()
	f.mustConverge(ctx, s)
	if mode, g := modeAndGroup(t, accounts); mode != 0o640 || g != gid {
		t.Fatalf("the accounts file is mode %04o, group %d; want 0640, group %d", mode, g, gid)
	}
}

// copyExecutable copies the program at from to to, mode 0755.
func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
