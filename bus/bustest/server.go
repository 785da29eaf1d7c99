package bustest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/meshbus/meshctl/internal/testnats"
	"github.com/meshbus/meshctl/internal/testwait"
)

// TestServer is the real nats-server binary run as a process of its own, as an operator's
// server is: TLS with a self-signed certificate (Fingerprint pins it) or the certificates a
// ServerTLS names, a pid file to reload it by signal, and the accounts file meshctl writes
// included. Before meshctl ever ran, its accounts file holds the MESH account with nobody in it.
type TestServer struct {
	Dir, URL, AccountsFile, PIDFile string
	// Fingerprint is the self-signed certificate's of StartTestServer; "" for
	// StartTestServerTLS's, whose certificates are the caller's.
	Fingerprint string

	bin, conf, addr string
	monitor         string
	cmd             *exec.Cmd
}

// ServerTLS is a TestServer's tls block, as an operator writes it: the server's certificate
// and key files (which it reads again when reloaded) and, with Verify, the CA whose client
// certificates it asks every client for, refusing one that presents none.
type ServerTLS struct {
	CertFile, KeyFile string
	CAFile            string
	Verify            bool
}

// StartTestServer starts a TestServer with its files in dir, its JetStream store in dir/js
// (which the caller may have mounted already), and kills it when tb ends.
func StartTestServer(tb testnats.TB, dir string) *TestServer {
	tb.Helper()
	cert, key, fp := testnats.SelfSignedCert(tb, dir)
	x := StartTestServerTLS(tb, dir, ServerTLS{CertFile: cert, KeyFile: key})
	x.Fingerprint = fp
	return x
}

// StartTestServerTLS is StartTestServer serving the certificates tls names.
func StartTestServerTLS(tb testnats.TB, dir string, tls ServerTLS) *TestServer {
	tb.Helper()
	port := testnats.FreePort(tb)
	monitorPort := testnats.FreePort(tb)
	x := &TestServer{Dir: dir, URL: fmt.Sprintf("tls://127.0.0.1:%d", port), monitor: fmt.Sprintf("http://127.0.0.1:%d", monitorPort),
		AccountsFile: filepath.Join(dir, "mesh-accounts.conf"), PIDFile: filepath.Join(dir, "nats.pid"),
		bin: testnats.NATSServerBinary(tb), conf: filepath.Join(dir, "server.conf"), addr: fmt.Sprintf("127.0.0.1:%d", port)}
	if err := os.WriteFile(x.AccountsFile, []byte("accounts { MESH { jetstream: enabled } }\n"), 0o600); err != nil {
		tb.Fatalf("%v", err)
	}
	block := fmt.Sprintf("cert_file: %q, key_file: %q", tls.CertFile, tls.KeyFile)
	if tls.CAFile != "" {
		block += fmt.Sprintf(", ca_file: %q", tls.CAFile)
	}
	if tls.Verify {
		block += ", verify: true"
	}
	conf := fmt.Sprintf(`listen: %q
http: "127.0.0.1:%d"
server_name: operators-bus
pid_file: %q
jetstream { store_dir: %q }
tls { %s }
include "mesh-accounts.conf"
`, x.addr, monitorPort, x.PIDFile, filepath.Join(dir, "js"), block)
	if err := os.WriteFile(x.conf, []byte(conf), 0o600); err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(x.Kill)
	x.start(tb)
	return x
}

// start runs the server and waits until it has written its pid file (which its reload needs)
// and takes connections: nats-server opens its client port only once JetStream has recovered
// its store.
func (x *TestServer) start(tb testnats.TB) {
	tb.Helper()
	_ = os.Remove(x.PIDFile) // a killed server's, which would read as this one's
	x.cmd = exec.Command(x.bin, "-c", x.conf)
	if err := x.cmd.Start(); err != nil {
		tb.Fatalf("%v", err)
	}
	testwait.Until(tb, "the test's nats-server starting", func() error {
		if _, err := os.Stat(x.PIDFile); err != nil {
			return err
		}
		c, err := net.DialTimeout("tcp", x.addr, time.Second)
		if err != nil {
			return err
		}
		c.Close()
		return nil
	})
}

// Kill stops the server at once, as a crash would.
func (x *TestServer) Kill() {
	if x.cmd.ProcessState == nil {
		_ = x.cmd.Process.Kill()
		_ = x.cmd.Wait()
	}
}

// Restart kills the server and starts it again on its port, config and store, and waits until
// it takes connections: every client connected is dropped and reconnects to what the server
// now serves (a certificate renewed on disk, say).
func (x *TestServer) Restart(tb testnats.TB) {
	tb.Helper()
	x.Kill()
	x.start(tb)
}

// Reload has the server re-read its config and the files it names (its certificates among
// them) by SIGHUP, as an operator's renewal hook does. Connections already made keep the
// certificate they were made with; a new one gets what the server now reads.
func (x *TestServer) Reload(tb testnats.TB) {
	tb.Helper()
	if err := x.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		tb.Fatalf("reloading the test's nats-server: %v", err)
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

// ConfigLoadTime is when the server last finished loading its config (/varz): a reload is
// done only once it moves.
func (x *TestServer) ConfigLoadTime() (time.Time, error) {
	var v struct {
		ConfigLoadTime time.Time `json:"config_load_time"`
	}
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(x.monitor + "/varz")
	if err != nil {
		return time.Time{}, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&v)
	return v.ConfigLoadTime, err
}
