package bustest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/meshbus/meshctl/internal/testnats"
	"github.com/meshbus/meshctl/internal/testwait"
)

// TestServer is the real nats-server binary run as a process of its own, as an operator's
// server is: TLS with a self-signed certificate (Fingerprint pins it), a pid file to reload it
// by signal, and the accounts file meshctl writes included. Before meshctl ever ran, its
// accounts file holds the MESH account with nobody in it.
type TestServer struct {
	Dir, URL, Fingerprint, AccountsFile, PIDFile string

	cmd *exec.Cmd
}

// StartTestServer starts a TestServer with its files in dir, its JetStream store in dir/js
// (which the caller may have mounted already), and kills it when tb ends.
func StartTestServer(tb testnats.TB, dir string) *TestServer {
	tb.Helper()
	bin := testnats.NATSServerBinary(tb)
	cert, key, fp := testnats.SelfSignedCert(tb, dir)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("%v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	x := &TestServer{Dir: dir, URL: fmt.Sprintf("tls://127.0.0.1:%d", port), Fingerprint: fp,
		AccountsFile: filepath.Join(dir, "mesh-accounts.conf"), PIDFile: filepath.Join(dir, "nats.pid")}
	if err := os.WriteFile(x.AccountsFile, []byte("accounts { MESH { jetstream: enabled } }\n"), 0o600); err != nil {
		tb.Fatalf("%v", err)
	}
	conf := fmt.Sprintf(`listen: "127.0.0.1:%d"
server_name: operators-bus
pid_file: %q
jetstream { store_dir: %q }
tls { cert_file: %q, key_file: %q }
include "mesh-accounts.conf"
`, port, x.PIDFile, filepath.Join(dir, "js"), cert, key)
	confPath := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		tb.Fatalf("%v", err)
	}
	x.cmd = exec.Command(bin, "-c", confPath)
	if err := x.cmd.Start(); err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(x.Kill)
	testwait.Until(tb, "the test's nats-server starting", func() error {
		if _, err := os.Stat(x.PIDFile); err != nil {
			return err
		}
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err != nil {
			return err
		}
		c.Close()
		return nil
	})
	return x
}

// Kill stops the server at once, as a crash would.
func (x *TestServer) Kill() {
	if x.cmd.ProcessState == nil {
		_ = x.cmd.Process.Kill()
		_ = x.cmd.Wait()
	}
}

// Mesh is a description of one node and one module on this server, reloaded by its pid file
// over TLS pinned to its certificate.
func (x *TestServer) Mesh() string { return x.MeshPinnedTo(x.Fingerprint) }

// MeshPinnedTo is Mesh with the certificate pinned to fingerprint, right or wrong.
func (x *TestServer) MeshPinnedTo(fingerprint string) string {
	return fmt.Sprintf(`bus:
  url: %s
  fingerprint: %q
  accounts_file: %s
  reload: { pid_file: %s }
nodes:
  - name: alpha
modules:
  - name: shop
    on: [alpha]
    emits: [order.placed]
`, x.URL, fingerprint, x.AccountsFile, x.PIDFile)
}
