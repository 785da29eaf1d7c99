package bustest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/meshbus/meshctl/internal/testnats"
	"github.com/meshbus/meshctl/internal/testwait"
)

// TestCluster is a JetStream cluster of real nats-server processes on loopback for one test,
// each with its own config file that includes its own accounts file and its own pid file to
// reload it by — as an operator's cluster would be, so every server is written, reloaded and
// proven on its own. Separate processes, because a SIGHUP in one process would reload every
// embedded server in it.
type TestCluster struct {
	tb      testnats.TB
	bin     string
	Servers []*TestClusterServer
}

// TestClusterServer is one server of a TestCluster: stopped and started again on the same
// ports, store and config.
type TestClusterServer struct {
	Name         string
	URL          string
	ConfigFile   string
	AccountsFile string
	PIDFile      string
	// Original is the server config as written, to put back after a test made it refuse a
	// reload.
	Original []byte

	monitor string // http://127.0.0.1:port
	mu      sync.Mutex
	cmd     *exec.Cmd
}

// StartTestCluster starts n servers with routes to each other and waits for a JetStream meta
// leader. Each server's accounts file starts as the operator's would: one account, nobody in
// it.
func StartTestCluster(tb testnats.TB, n int) *TestCluster {
	tb.Helper()
	c := NewTestCluster(tb, n)
	for _, srv := range c.Servers {
		if err := os.WriteFile(srv.AccountsFile, []byte("accounts { MESH { jetstream: enabled } }\n"), 0o600); err != nil {
			tb.Fatalf("%v", err)
		}
	}
	c.StartAll()
	return c
}

// NewTestCluster writes the config of n servers with routes to each other and starts none:
// a cluster before its first start, whose configs include accounts files nobody has written
// yet, so no server can start until one is (StartAll).
func NewTestCluster(tb testnats.TB, n int) *TestCluster {
	tb.Helper()
	return newTestCluster(tb, n, "include \"mesh-accounts.conf\"\n")
}

// newTestCluster is NewTestCluster with accounts, the text of each server's config that
// includes its accounts file. One server is a server alone, with no cluster block.
func newTestCluster(tb testnats.TB, n int, accounts string) *TestCluster {
	tb.Helper()
	c := &TestCluster{tb: tb, bin: testnats.NATSServerBinary(tb)}
	dir := tb.TempDir()
	ports := testnats.FreePorts(tb, 3*n)
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[n+i]))
	}
	for i := range n {
		sdir := filepath.Join(dir, fmt.Sprintf("n%d", i+1))
		if err := os.MkdirAll(sdir, 0o700); err != nil {
			tb.Fatalf("%v", err)
		}
		srv := &TestClusterServer{Name: fmt.Sprintf("n%d", i+1), URL: fmt.Sprintf("nats://127.0.0.1:%d", ports[i]),
			ConfigFile: filepath.Join(sdir, "server.conf"), AccountsFile: filepath.Join(sdir, "mesh-accounts.conf"),
			PIDFile: filepath.Join(sdir, "nats.pid"), monitor: fmt.Sprintf("http://127.0.0.1:%d", ports[2*n+i])}
		cluster := ""
		if n > 1 {
			cluster = fmt.Sprintf("cluster { name: mesh-test, listen: \"127.0.0.1:%d\", routes: [%s] }\n", ports[n+i], strings.Join(routes, ", "))
		}
		srv.Original = fmt.Appendf(nil, `server_name: %s
listen: "127.0.0.1:%d"
http: "127.0.0.1:%d"
pid_file: %q
jetstream { store_dir: %q }
%s%s`, srv.Name, ports[i], ports[2*n+i], srv.PIDFile, filepath.Join(sdir, "js"), cluster, accounts)
		if err := os.WriteFile(srv.ConfigFile, srv.Original, 0o600); err != nil {
			tb.Fatalf("%v", err)
		}
		c.Servers = append(c.Servers, srv)
	}
	tb.Cleanup(func() {
		for _, srv := range c.Servers {
			srv.Stop()
		}
	})
	return c
}

// StartAll starts every server at once, as an operator starts a new cluster, and waits until
// each answers and the cluster has a JetStream meta leader.
func (c *TestCluster) StartAll() {
	c.tb.Helper()
	for _, srv := range c.Servers {
		if err := srv.start(c.bin); err != nil {
			c.tb.Fatalf("starting the test cluster: %v", err)
		}
	}
	for _, srv := range c.Servers {
		srv.waitReady(c.tb)
	}
	if len(c.Servers) > 1 {
		c.WaitForMetaLeader()
	}
}

func (srv *TestClusterServer) start(bin string) error {
	_ = os.Remove(srv.PIDFile)
	cmd := exec.Command(bin, "-c", srv.ConfigFile)
	if err := cmd.Start(); err != nil {
		return err
	}
	srv.mu.Lock()
	srv.cmd = cmd
	srv.mu.Unlock()
	return nil
}

// waitReady waits until the server answers its monitoring port, has written its pid file
// (which its reload needs) and takes client connections: nats-server opens its monitoring
// port first and its client port only once JetStream has recovered its store.
func (srv *TestClusterServer) waitReady(tb testnats.TB) {
	tb.Helper()
	testwait.Until(tb, "test cluster server "+srv.Name+" starting", func() error {
		if _, err := os.Stat(srv.PIDFile); err != nil {
			return err
		}
		resp, err := http.Get(srv.monitor + "/varz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		c, err := net.DialTimeout("tcp", strings.TrimPrefix(srv.URL, "nats://"), time.Second)
		if err != nil {
			return err
		}
		c.Close()
		return nil
	})
}

// Stop kills the server (a server lost); Start brings it back.
func (srv *TestClusterServer) Stop() {
	srv.mu.Lock()
	cmd := srv.cmd
	srv.cmd = nil
	srv.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

// Running reports whether the server process runs.
func (srv *TestClusterServer) Running() bool {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.cmd != nil
}

// Start starts a stopped server again, on its ports, store and config, and waits until it
// answers.
func (c *TestCluster) Start(srv *TestClusterServer) {
	c.tb.Helper()
	if err := srv.start(c.bin); err != nil {
		c.tb.Fatalf("%v", err)
	}
	srv.waitReady(c.tb)
}

// ConfigLoadTime is when the server last loaded its config (started or reloaded), from its
// monitoring port.
func (srv *TestClusterServer) ConfigLoadTime() (time.Time, error) {
	var v struct {
		ConfigLoadTime time.Time `json:"config_load_time"`
	}
	err := srv.monitorGet("/varz", &v)
	return v.ConfigLoadTime, err
}

func (srv *TestClusterServer) monitorGet(path string, v any) error {
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(srv.monitor + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// MetaLeader is the running server that leads JetStream's meta group, as a running server
// says, or nil.
func (c *TestCluster) MetaLeader() *TestClusterServer {
	for _, srv := range c.Servers {
		if !srv.Running() {
			continue
		}
		var jsz struct {
			Meta *struct {
				Leader string `json:"leader"`
			} `json:"meta_cluster"`
		}
		if srv.monitorGet("/jsz", &jsz) != nil || jsz.Meta == nil || jsz.Meta.Leader == "" {
			continue
		}
		for _, l := range c.Servers {
			if l.Name == jsz.Meta.Leader && l.Running() {
				return l
			}
		}
	}
	return nil
}

// WaitForMetaLeader waits until one running server leads JetStream's meta group.
func (c *TestCluster) WaitForMetaLeader() *TestClusterServer {
	c.tb.Helper()
	var l *TestClusterServer
	testwait.Until(c.tb, "the test cluster electing a JetStream meta leader", func() bool {
		l = c.MetaLeader()
		return l != nil
	})
	return l
}

// WaitForEveryPeer waits until the meta leader counts every running server a current peer of
// JetStream's meta group: a server just started again leads nothing and is offline to the
// placement of a stream until then (err 10005, "no suitable peers for placement").
func (c *TestCluster) WaitForEveryPeer() {
	c.tb.Helper()
	testwait.Until(c.tb, "the test cluster's meta leader counting every running server a current peer", c.everyPeerCurrent)
}

func (c *TestCluster) everyPeerCurrent() bool {
	l := c.MetaLeader()
	if l == nil {
		return false
	}
	var jsz struct {
		Meta *struct {
			Replicas []struct {
				Name    string `json:"name"`
				Current bool   `json:"current"`
				Offline bool   `json:"offline"`
			} `json:"replicas"`
		} `json:"meta_cluster"`
	}
	if l.monitorGet("/jsz", &jsz) != nil || jsz.Meta == nil {
		return false
	}
	for _, srv := range c.Servers {
		if !srv.Running() || srv == l {
			continue
		}
		found := false
		for _, p := range jsz.Meta.Replicas {
			if p.Name == srv.Name {
				found = p.Current && !p.Offline
			}
		}
		if !found {
			return false
		}
	}
	return true
}
