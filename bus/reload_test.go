package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/internal/testnats"
	"github.com/meshbus/meshctl/internal/testwait"
)

// A nats-server in another process, reloaded the way an operator's bus is: by SIGHUP to the pid
// in its pid file. The accounts file is its include; after the reload a new user logs in.
func TestPIDFileReloaderReloadsAnExternalServer(t *testing.T) {
	t.Parallel()
	bin := testnats.NATSServerBinary(t)
	dir := t.TempDir()
	a := testUser{name: "one.a", password: "pw-a", pub: []string{"mesh.a"}, sub: []string{"_INBOX.one.a.>"}}
	b := testUser{name: "one.b", password: "pw-b", pub: []string{"mesh.b"}, sub: []string{"_INBOX.one.b.>"}}
	accounts := filepath.Join(dir, "mesh-accounts.conf")
	if err := os.WriteFile(accounts, accountsFor(t, a), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "nats.conf")
	pidFile := filepath.Join(dir, "nats.pid")
	if err := os.WriteFile(conf, []byte(`listen: "127.0.0.1:-1"
jetstream { store_dir: `+confQuote(filepath.Join(dir, "js"))+` }
ports_file_dir: `+confQuote(dir)+`
include "mesh-accounts.conf"
`), 0o600); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	cmd := exec.Command(bin, "-c", conf, "-P", pidFile)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("nats-server output:\n%s", out.String())
		}
	})

	// The server writes its ports file once it listens; that is its address.
	portsFile := filepath.Join(dir, "nats-server_"+strconv.Itoa(cmd.Process.Pid)+".ports")
	var url string
	testwait.Until(t, "the server's ports file", func() error {
		data, err := os.ReadFile(portsFile)
		if err != nil {
			return err
		}
		var ports struct{ Nats []string }
		if err := json.Unmarshal(data, &ports); err != nil || len(ports.Nats) == 0 {
			return fmt.Errorf("no client address in %q (%v)", data, err)
		}
		url = ports.Nats[0]
		return nil
	})
	dialAs(t, url, a)

	if err := os.WriteFile(accounts, accountsFor(t, a, b), 0o600); err != nil {
		t.Fatal(err)
	}
	r := PIDFileReloader(pidFile)
	if err := r.Reload(context.Background()); err != nil {
		t.Fatalf("%s: %v", r.Describe(), err)
	}
	// The signal is asynchronous; the outcome is the proof.
	testwait.Until(t, "the new user to log in after SIGHUP", func() error {
		c, err := busclient.Dial(context.Background(), busclient.Target{URL: url}, busclient.Credential{User: b.name, Password: b.password})
		if err != nil {
			return err
		}
		c.Close()
		return nil
	})
}

// The reloaders' failures say what is wrong: no pid file, a pid that is not running, a command
// that failed (with its output), and the operator's turn.
func TestReloaderFailuresAreClear(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()

	missing := filepath.Join(dir, "none.pid")
	if err := PIDFileReloader(missing).Reload(ctx); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing pid file: %v", err)
	}

	child := exec.Command(os.Args[0], "-test.run=^$")
	if err := child.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(dir, "dead.pid")
	if err := os.WriteFile(dead, []byte(strconv.Itoa(deadPID(t))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := PIDFileReloader(dead).Reload(ctx); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Errorf("dead pid: %v", err)
	}

	err := CommandReloader([]string{"sh", "-c", "echo no such service >&2; exit 3"}).Reload(ctx)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.Contains(err.Error(), "no such service") {
		t.Errorf("failing command: %v", err)
	}
	if err := CommandReloader([]string{"true"}).Reload(ctx); err != nil {
		t.Errorf("succeeding command: %v", err)
	}
	if err := NoReloader().Reload(ctx); !errors.Is(err, ErrReloadByOperator) {
		t.Errorf("NoReloader: %v", err)
	}
}
