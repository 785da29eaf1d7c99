package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshbus/meshctl/internal/lockedbuf"
	"github.com/meshbus/meshctl/internal/testnats"
	"github.com/meshbus/meshctl/internal/testwait"
)

// An external server's first start, in the order docs/external-server.md gives: the server's config
// includes the accounts file, so it cannot start before meshctl wrote one. The first apply,
// with no server running, writes the file and leaves it (exit 2, saying to start the server);
// the server then starts on it, and the next apply finishes and proves it: the diff is clean.
func TestAnExternalServersFirstStartIsBootstrapped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	port := freePort(t)
	accounts := filepath.Join(dir, "mesh-accounts.conf")
	pid := filepath.Join(dir, "nats.pid")
	conf := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("listen: %q\npid_file: %q\njetstream { store_dir: %q }\ninclude \"mesh-accounts.conf\"\n",
		"127.0.0.1:"+port, pid, filepath.Join(dir, "js"))), 0o600); err != nil {
		t.Fatal(err)
	}
	desc := writeMesh(t, map[string]string{"mesh.yaml": fmt.Sprintf(`bus:
  url: nats://127.0.0.1:%s
  accounts_file: %s
  reload: { pid_file: %s }
nodes:
  - name: alpha
modules:
  - name: shop
    on: [alpha]
`, port, accounts, pid)})
	st := t.TempDir()

	code, out, errOut := meshctl(t, "apply", "-f", desc, "--state", st, "--bcrypt-cost", "4")
	if code != exitError || !strings.Contains(errOut, "left at "+accounts+" for its first start") {
		t.Fatalf("the first apply with no server: exit %d, want %d saying the file is left for the first start:\n%s%s", code, exitError, out, errOut)
	}
	if _, err := os.Stat(accounts); err != nil {
		t.Fatalf("the first apply with no server left no accounts file: %v", err)
	}

	srv := exec.Command(testnats.NATSServerBinary(t), "-c", conf)
	log := &lockedbuf.Buffer{} // written by exec's copying goroutine while the test reads it
	srv.Stderr = log
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	testwait.Until(t, "the server starting on the accounts file meshctl left", func() error {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second)
		if err != nil {
			return fmt.Errorf("%w; its log:\n%s", err, log)
		}
		c.Close()
		return nil
	})

	if code, out, errOut := meshctl(t, "apply", "-f", desc, "--state", st, "--bcrypt-cost", "4"); code != exitOK {
		t.Fatalf("the apply once the server runs: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := meshctl(t, "diff", "-f", desc, "--state", st); code != exitOK || !strings.Contains(out+errOut, "in sync") {
		t.Fatalf("the diff after: exit %d\n%s%s", code, out, errOut)
	}
}
