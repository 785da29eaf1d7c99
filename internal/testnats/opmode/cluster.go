package opmode

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
	"github.com/nats-io/nats.go"
)

// ClusterOptions shape a test cluster; the zero value is three servers whose resolvers catch
// up every two seconds.
type ClusterOptions struct {
	// Servers is how many servers; 0 means 3. One is a server on its own, with no cluster:
	// JetStream clustered on one server never elects a meta leader.
	Servers int
	// ResolverInterval is how often each server asks a peer for the JWTs it lacks (the
	// resolver's `interval`); "" means "2s". A long one keeps a server that missed a push
	// behind until the next push.
	ResolverInterval string
	// OperatorName names the operator; "" means "MESHTEST".
	OperatorName string
	// MaxFileStore is each server's JetStream file store limit; "" means "256MB". A mesh of
	// thousands of instances reserves its streams' max_bytes against it: a benchmark sets it
	// larger. Nothing is allocated for it.
	MaxFileStore string
	// MaxPayload is each server's max_payload in bytes; 0 leaves the server's default (1 MiB).
	MaxPayload int
}

// Cluster is a JetStream cluster of nats-server processes in operator mode for one test: each
// server trusts Operator, keeps account JWTs in its own resolver directory, and answers on a
// monitoring port. Stopped by the test's cleanup.
type Cluster struct {
	// Operator is the operator the cluster trusts, made by StartCluster; nil for a cluster
	// StartClusterTrusting started.
	Operator *Operator
	Servers  []*Server

	tb          testnats.TB
	bin         string
	systemCreds string
}

// Server is one server of a Cluster, which Stop and Start take down and bring back on the
// same ports, store and resolver directory.
type Server struct {
	Name        string
	URL         string
	MonitorURL  string
	ConfigFile  string
	ResolverDir string
	// LogFile is the server's log, for a test to read what it refused.
	LogFile string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// StartCluster makes an operator (NewOperator) and starts a cluster that trusts it, then waits
// until JetStream has a meta leader and a system-account request reaches every server: only
// then does a push over the system account reach them all.
func StartCluster(tb testnats.TB, opts ClusterOptions) *Cluster {
	tb.Helper()
	name := opts.OperatorName
	if name == "" {
		name = "MESHTEST"
	}
	o := NewOperator(tb, name)
	preload := o.preload(tb)
	c := StartClusterTrusting(tb, opts, func(resolverDir, interval string) string {
		return fmt.Sprintf(`operator: %q
system_account: %s
resolver {
  type: full
  dir: %q
  allow_delete: false
  interval: %q
}
%s`, o.JWTFile, o.SystemAccount, resolverDir, interval, preload)
	}, o.SystemUserCreds)
	c.Operator = o
	return c
}

// StartClusterTrusting starts a cluster whose servers are put in operator mode by trust:
// given a server's own resolver directory and the resolver's interval, the statements that make
// it trust an operator (operator, system_account, resolver, resolver_preload), as an operator
// gives its servers. systemCreds is a creds file of a user of that operator's system account,
// which the test connects as. It waits as StartCluster does. opts.OperatorName is not used:
// the operator is trust's, and Cluster.Operator is nil.
func StartClusterTrusting(tb testnats.TB, opts ClusterOptions, trust func(resolverDir, interval string) string, systemCreds string) *Cluster {
	tb.Helper()
	n := opts.Servers
	if n == 0 {
		n = 3
	}
	interval := opts.ResolverInterval
	if interval == "" {
		interval = "2s"
	}
	fileStore := opts.MaxFileStore
	if fileStore == "" {
		fileStore = "256MB"
	}
	c := &Cluster{tb: tb, bin: testnats.NATSServerBinary(tb), systemCreds: systemCreds}
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
		srv := &Server{
			Name:        fmt.Sprintf("n%d", i+1),
			URL:         fmt.Sprintf("nats://127.0.0.1:%d", ports[i]),
			MonitorURL:  fmt.Sprintf("http://127.0.0.1:%d", ports[2*n+i]),
			ConfigFile:  filepath.Join(sdir, "server.conf"),
			ResolverDir: filepath.Join(sdir, "jwt"),
			LogFile:     filepath.Join(sdir, "server.log"),
		}
		conf := fmt.Sprintf(`server_name: %s
listen: "127.0.0.1:%d"
http: "127.0.0.1:%d"
log_file: %q
%s
jetstream { store_dir: %q, max_memory_store: 64MB, max_file_store: %s }
`, srv.Name, ports[i], ports[2*n+i], srv.LogFile, trust(srv.ResolverDir, interval),
			filepath.Join(sdir, "js"), fileStore)
		if opts.MaxPayload > 0 {
			conf += fmt.Sprintf("max_payload: %d\n", opts.MaxPayload)
		}
		if n > 1 {
			conf += fmt.Sprintf("cluster { name: opmode-test, listen: \"127.0.0.1:%d\", routes: [%s] }\n", ports[n+i], strings.Join(routes, ", "))
		}
		if err := os.WriteFile(srv.ConfigFile, []byte(conf), 0o600); err != nil {
			tb.Fatalf("%v", err)
		}
		c.Servers = append(c.Servers, srv)
	}
	tb.Cleanup(func() {
		for _, srv := range c.Servers {
			srv.stop()
		}
	})
	for _, srv := range c.Servers {
		if err := srv.start(c.bin); err != nil {
			tb.Fatalf("starting the operator-mode cluster: %v", err)
		}
	}
	for _, srv := range c.Servers {
		if err := srv.waitReady(); err != nil {
			tb.Fatalf("starting the operator-mode cluster: %v", err)
		}
	}
	c.waitJoined()
	return c
}

// URLs are the servers' client URLs, in order.
func (c *Cluster) URLs() []string {
	var urls []string
	for _, srv := range c.Servers {
		urls = append(urls, srv.URL)
	}
	return urls
}

// Names are the servers' names (n1, n2, …), in order: the names their replies carry.
func (c *Cluster) Names() []string {
	var names []string
	for _, srv := range c.Servers {
		names = append(names, srv.Name)
	}
	return names
}

// ConnectSystem connects to the first running server as the system account's user.
func (c *Cluster) ConnectSystem() *nats.Conn {
	c.tb.Helper()
	return c.connect(c.systemCreds)
}

// ConnectOther connects to srv as OTHER's user.
func (c *Cluster) ConnectOther(srv *Server) *nats.Conn {
	c.tb.Helper()
	nc, err := nats.Connect(srv.URL, nats.UserCredentials(c.Operator.OtherUserCreds), nats.NoReconnect())
	if err != nil {
		c.tb.Fatalf("connecting to %s as OTHER's user: %v", srv.Name, err)
	}
	c.tb.Cleanup(nc.Close)
	return nc
}

func (c *Cluster) connect(creds string) *nats.Conn {
	c.tb.Helper()
	var urls []string
	for _, srv := range c.Servers {
		if srv.Running() {
			urls = append(urls, srv.URL)
		}
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.UserCredentials(creds), nats.DontRandomize())
	if err != nil {
		c.tb.Fatalf("connecting to the operator-mode cluster: %v", err)
	}
	c.tb.Cleanup(nc.Close)
	return nc
}

// Stop kills srv, as a server lost would be.
func (c *Cluster) Stop(srv *Server) { srv.stop() }

// Start starts a stopped server again on its ports, store and resolver directory, and waits
// until every running server answers a system-account request again.
func (c *Cluster) Start(srv *Server) {
	c.tb.Helper()
	if err := srv.start(c.bin); err != nil {
		c.tb.Fatalf("%v", err)
	}
	if err := srv.waitReady(); err != nil {
		c.tb.Fatalf("%v", err)
	}
	c.waitJoined()
}

// waitJoined waits until JetStream's meta group has a leader (a server on its own has none)
// and a ping on the system account is answered by every running server: the routes carry
// system-account traffic both ways.
func (c *Cluster) waitJoined() {
	c.tb.Helper()
	nc := c.connect(c.systemCreds)
	defer nc.Close()
	want := map[string]bool{}
	for _, srv := range c.Servers {
		if srv.Running() {
			want[srv.Name] = true
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if (len(c.Servers) == 1 || c.metaLeader()) && pingAnswered(nc, want) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.tb.Fatalf("the operator-mode cluster did not join: no meta leader, or a server does not answer on the system account")
}

func (c *Cluster) metaLeader() bool {
	for _, srv := range c.Servers {
		if !srv.Running() {
			continue
		}
		var jsz struct {
			Meta *struct {
				Leader string `json:"leader"`
			} `json:"meta_cluster"`
		}
		if srv.monitorGet("/jsz", &jsz) == nil && jsz.Meta != nil && jsz.Meta.Leader != "" {
			return true
		}
	}
	return false
}

// pingAnswered reports whether $SYS.REQ.SERVER.PING is answered by every server in want.
func pingAnswered(nc *nats.Conn, want map[string]bool) bool {
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return false
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest("$SYS.REQ.SERVER.PING", inbox, nil); err != nil {
		return false
	}
	seen := map[string]bool{}
	for len(seen) < len(want) {
		msg, err := sub.NextMsg(2 * time.Second)
		if err != nil {
			return false
		}
		var r struct {
			Server struct {
				Name string `json:"name"`
			} `json:"server"`
		}
		if json.Unmarshal(msg.Data, &r) == nil && want[r.Server.Name] {
			seen[r.Server.Name] = true
		}
	}
	return true
}

// Running reports whether the server's process runs.
func (srv *Server) Running() bool {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.cmd != nil
}

// PID is the running server's process id, or 0 when it is stopped: a benchmark reads the
// server's CPU time from /proc by it.
func (srv *Server) PID() int {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.cmd == nil {
		return 0
	}
	return srv.cmd.Process.Pid
}

// ConfigLoadTime is when the server last loaded its config (started or reloaded), from its
// monitoring port's /varz.
func (srv *Server) ConfigLoadTime() (time.Time, error) {
	var v struct {
		ConfigLoadTime time.Time `json:"config_load_time"`
	}
	err := srv.monitorGet("/varz", &v)
	return v.ConfigLoadTime, err
}

func (srv *Server) start(bin string) error {
	cmd := exec.Command(bin, "-c", srv.ConfigFile)
	if err := cmd.Start(); err != nil {
		return err
	}
	srv.mu.Lock()
	srv.cmd = cmd
	srv.mu.Unlock()
	return nil
}

func (srv *Server) stop() {
	srv.mu.Lock()
	cmd := srv.cmd
	srv.cmd = nil
	srv.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

// waitReady waits until the server answers on its monitoring port and takes client
// connections: nats-server opens its client port only once JetStream has recovered its store.
func (srv *Server) waitReady() error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		var v struct{}
		if srv.monitorGet("/varz", &v) == nil {
			if conn, err := net.DialTimeout("tcp", strings.TrimPrefix(srv.URL, "nats://"), time.Second); err == nil {
				conn.Close()
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("server %s did not start", srv.Name)
}

func (srv *Server) monitorGet(path string, v any) error {
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(srv.MonitorURL + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}
