package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/bus/bustest"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/wire"
)

// clusterMesh describes a mesh on the test cluster: every server with its own accounts file
// and its own pid file to reload by. The last server's file is copied into place, as for a
// server off the control host: meshctl writes a staging file and the copy command installs it.
func clusterMesh(c *bustest.TestCluster) string {
	var b strings.Builder
	b.WriteString("bus:\n  replicas: 3\n  servers:\n")
	for i, srv := range c.Servers {
		if i == len(c.Servers)-1 {
			fmt.Fprintf(&b, "    - url: %s\n      accounts_file: %s.staged\n      copy: [cp, \"{file}\", %s]\n      reload: {pid_file: %s}\n",
				srv.URL, srv.AccountsFile, srv.AccountsFile, srv.PIDFile)
			continue
		}
		fmt.Fprintf(&b, "    - url: %s\n      accounts_file: %s\n      reload: {pid_file: %s}\n", srv.URL, srv.AccountsFile, srv.PIDFile)
	}
	b.WriteString(`nodes:
  - name: alpha
modules:
  - name: shop
    on: [alpha]
    emits: [order.placed]
  - name: audit
    on: [alpha]
    follows: [shop/order.placed]
`)
	return b.String()
}

// loginAlone logs in to one server of the cluster alone, not through the pool, which could
// answer from another server.
func loginAlone(ctx context.Context, srv *bustest.TestClusterServer, user, password string) error {
	c, err := busclient.DialAlone(ctx, busclient.Target{URL: srv.URL}, busclient.Credential{User: user, Password: password})
	if err != nil {
		return err
	}
	c.Close()
	return nil
}

// eachServer waits until want holds for the login on every server given, and fails naming the
// first that does not.
func eachServer(t *testing.T, ctx context.Context, servers []*bustest.TestClusterServer, user, password string, admits bool) {
	t.Helper()
	for _, srv := range servers {
		testwait.Until(t, admitting(srv.Name, user, admits), func() error {
			return admitted(loginAlone(ctx, srv, user, password), admits, func(err error) bool { return errors.Is(err, nats.ErrAuthorization) })
		})
	}
}

// admitting says what eachServer and eachServerNkey wait for.
func admitting(server, user string, admits bool) string {
	if admits {
		return fmt.Sprintf("server %s letting %s in", server, user)
	}
	return fmt.Sprintf("server %s refusing %s", server, user)
}

// admitted is why a login that ended with err is not yet what admits asks: let in, or
// refused as refused says.
func admitted(err error, admits bool, refused func(error) bool) error {
	switch {
	case admits:
		return err
	case err == nil:
		return errors.New("the server lets the user in")
	case !refused(err):
		return err
	}
	return nil
}

// awaitReloads waits until every server of c has finished a reload since before (its
// configTimes): a reload by signal returns before the server has done it, and until then a
// JetStream request can find the account not yet enabled again.
func awaitReloads(t *testing.T, c *bustest.TestCluster, before []time.Time) {
	t.Helper()
	testwait.Until(t, "every server finishing its reload", func() error {
		done := 0
		for i, at := range configTimes(t, c) {
			if at.After(before[i]) {
				done++
			}
		}
		if done < len(before) {
			return fmt.Errorf("%d of %d servers finished their reload", done, len(before))
		}
		return nil
	})
}

func configTimes(t *testing.T, c *bustest.TestCluster) []time.Time {
	t.Helper()
	var out []time.Time
	for _, srv := range c.Servers {
		at, err := srv.ConfigLoadTime()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, at)
	}
	return out
}

// One cluster, the whole life of a mesh on it: created from empty with R3, converged with no
// call and no reload on any server, a credential issued and revoked on every server, a
// server refusing its reload, a server down and back.
func TestAMeshOnAThreeServerCluster(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	c := bustest.StartTestCluster(t, 3)
	f := newFixture(t, clusterMesh(c))
	s := f.connect(ctx)
	f.mustApply(ctx, s)

	// Created from empty with the description's replicas, consumers inheriting them.
	js := f.js(s)
	for _, name := range []string{"CONTROL", "EVENTS", "NODES"} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info := st.CachedInfo()
		if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			t.Fatalf("stream %s: replicas %d, cluster %+v; want R3 on three servers", name, info.Config.Replicas, info.Cluster)
		}
	}
	// A push consumer: read its info from the API, which the pull-only Consumer handle
	// would refuse.
	msg, err := s.Conn.RequestWithContext(ctx, "$JS.API.CONSUMER.INFO.EVENTS.alpha_audit", nil)
	if err != nil {
		t.Fatal(err)
	}
	var ci jetstream.ConsumerInfo
	if err := json.Unmarshal(msg.Data, &ci); err != nil {
		t.Fatal(err)
	}
	if ci.Config.Replicas != 0 || ci.Cluster == nil || len(ci.Cluster.Replicas) != 2 {
		t.Fatalf("consumer alpha_audit does not inherit the stream's three replicas: replicas %d, cluster %+v", ci.Config.Replicas, ci.Cluster)
	}

	// Converged: no call, and no server reloaded.
	before := configTimes(t, c)
	f.mustConverge(ctx, s)
	for i, at := range configTimes(t, c) {
		if !at.Equal(before[i]) {
			t.Fatalf("a converged apply reloaded server %s", c.Servers[i].Name)
		}
	}

	// A credential issued is let in by every server alone; revoked, refused by every one.
	pw := f.mint(ctx, "alpha.shop")["alpha.shop"]
	f.mustApply(ctx, s)
	eachServer(t, ctx, c.Servers, "alpha.shop", pw, true)
	if _, err := f.store.Revoke(ctx, "alpha.shop"); err != nil {
		t.Fatal(err)
	}
	f.mustApply(ctx, s)
	eachServer(t, ctx, c.Servers, "alpha.shop", pw, false)

	// One server refusing its reload leaves all three on the previous file.
	n2 := c.Servers[1]
	if err := os.WriteFile(n2.ConfigFile, []byte(strings.Replace(string(n2.Original), "server_name: n2", "server_name: renamed", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	audit := f.mint(ctx, "alpha.audit")["alpha.audit"]
	_, _, err = f.apply(ctx, s, RunOptions{})
	if !errors.Is(err, accounts.ErrRefused) {
		t.Fatalf("a server refusing its reload did not fail the apply as refused: %v", err)
	}
	eachServer(t, ctx, c.Servers, "alpha.audit", audit, false)
	servesItsRecord(t, ctx, c, s)
	if err := os.WriteFile(n2.ConfigFile, n2.Original, 0o600); err != nil {
		t.Fatal(err)
	}

	// The last server's copy failing leaves the two before it back on the previous file too.
	last := c.Servers[2]
	f.write(strings.Replace(clusterMesh(c), "copy: [cp, \"{file}\", "+last.AccountsFile+"]", "copy: [cp, \"{file}\", /nonexistent/dir/accounts.conf]", 1))
	// A session reads the bus section when it connects, as a command does.
	broken := f.connect(ctx)
	_, _, err = f.apply(ctx, broken, RunOptions{})
	broken.Close()
	if !errors.Is(err, accounts.ErrRefused) || !strings.Contains(err.Error(), "copying the accounts config") {
		t.Fatalf("a failed copy did not fail the apply as refused: %v", err)
	}
	eachServer(t, ctx, c.Servers, "alpha.audit", audit, false)
	f.write(clusterMesh(c))

	f.mustApply(ctx, s)
	eachServer(t, ctx, c.Servers, "alpha.audit", audit, true)

	// One server down: the others are brought up to date, the apply says which is behind, and
	// the next apply once it is back finishes the job.
	n1 := c.Servers[0]
	n1.Stop()
	shop := f.mint(ctx, "alpha.shop")["alpha.shop"]
	_, _, err = f.apply(ctx, s, RunOptions{})
	if !errors.Is(err, accounts.ErrServerDown) || !strings.Contains(err.Error(), "server "+strings.TrimPrefix(n1.URL, "nats://")) {
		t.Fatalf("an apply with a server down did not name it: %v", err)
	}
	eachServer(t, ctx, c.Servers[1:], "alpha.shop", shop, true)
	// The diff names the server that is behind, and which generation each serves.
	p, err := s.Plan(ctx, f.mesh(), plan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	_ = p.Text(&text, false)
	n1Name := "server " + strings.TrimPrefix(n1.URL, "nats://")
	if !strings.Contains(text.String(), n1Name+" not reachable") || !strings.Contains(text.String(), "generations: ") {
		t.Fatalf("the diff does not say which server is behind:\n%s", text.String())
	}
	c.Start(n1)
	eachServer(t, ctx, c.Servers[:1], "alpha.shop", shop, false)
	p, err = s.Plan(ctx, f.mesh(), plan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	text.Reset()
	_ = p.Text(&text, false)
	if !strings.Contains(text.String(), n1Name+" and ") || !strings.Contains(text.String(), "have different users") || !strings.Contains(text.String(), n1Name+" serves ") {
		t.Fatalf("the diff does not say the server back is behind:\n%s", text.String())
	}
	f.mustApply(ctx, s)
	eachServer(t, ctx, c.Servers, "alpha.shop", shop, true)
	f.mustConverge(ctx, s)
}

// servesItsRecord fails unless every server of c is seen serving the file its generation
// record names: after a roll back, the previous one.
func servesItsRecord(t *testing.T, ctx context.Context, c *bustest.TestCluster, s *Session) {
	t.Helper()
	for _, srv := range c.Servers {
		a := serverAccounts(s.Accounts, srv.URL)
		if err := a.ServesRecorded(ctx); err != nil {
			t.Fatalf("server %s is not seen serving the file its record names after the roll back: %v", srv.Name, err)
		}
	}
}

// serverAccounts is the accounts file of the server at url.
func serverAccounts(a accounts.File, url string) accounts.File {
	for _, s := range a.Servers() {
		if s.Target.URL == url {
			return s
		}
	}
	panic("no server at " + url)
}

// The JetStream meta leader stopped in the middle of an apply: the apply completes, or fails
// quickly, and the next apply (with the server back) converges.
func TestAMetaLeaderKilledMidApply(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	c := bustest.StartTestCluster(t, 3)
	f := newFixture(t, clusterMesh(c))
	s := f.connect(ctx)
	leader := c.WaitForMetaLeader()
	killed := make(chan struct{})
	var once sync.Once
	started := time.Now()
	_, _, err := f.apply(ctx, s, RunOptions{Progress: func(done, total int, ch plan.Change, err error) {
		once.Do(func() {
			leader.Stop()
			close(killed)
		})
	}})
	took := time.Since(started)
	select {
	case <-killed:
	default:
		t.Fatalf("the apply returned before its first change: %v", err)
	}
	t.Logf("the apply with its meta leader %s killed took %s: %v", leader.Name, took.Round(time.Millisecond), err)
	if err != nil && !errors.Is(err, accounts.ErrServerDown) {
		t.Fatalf("the apply failed on a leader change other than by naming the server down: %v", err)
	}
	c.Start(leader)
	c.WaitForMetaLeader()
	c.WaitForEveryPeer()
	f.mustApply(ctx, s)
	f.mustConverge(ctx, s)

	// A replica change is an update in place, down and up again, the consumers following.
	for _, replicas := range []string{"1", "3"} {
		f.write(strings.Replace(clusterMesh(c), "replicas: 3", "replicas: "+replicas, 1))
		res := f.mustApply(ctx, s)
		for _, ch := range res.Plan.Changes {
			if ch.Kind == plan.KindStream && ch.Action != plan.Update {
				t.Fatalf("going to R%s planned %s %s, not an update in place", replicas, ch.Action, ch.ID())
			}
		}
		f.mustConverge(ctx, s)
		info, err := f.js(s).Stream(ctx, "EVENTS")
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(info.CachedInfo().Config.Replicas); got != replicas {
			t.Fatalf("EVENTS has %s replicas after going to R%s", got, replicas)
		}
	}

	// The server the controller talks to stops in the middle of an apply holding an accounts
	// change: the connection moves to another server, the others take the change, the apply
	// names the one down, and once it is back the next apply converges.
	f.mint(ctx, "alpha.shop")
	var gone *bustest.TestClusterServer
	for _, srv := range c.Servers {
		if srv.URL == s.Conn.ConnectedUrl() {
			gone = srv
		}
	}
	if gone == nil {
		t.Fatalf("the controller is connected to %s, no server of the cluster", s.Conn.ConnectedUrl())
	}
	f.write(strings.Replace(clusterMesh(c), "emits: [order.placed]", "emits: [order.placed, order.paid]", 1))
	var stopOnce sync.Once
	_, _, err = f.apply(ctx, s, RunOptions{Progress: func(int, int, plan.Change, error) { stopOnce.Do(gone.Stop) }})
	if !errors.Is(err, accounts.ErrServerDown) || !strings.Contains(err.Error(), strings.TrimPrefix(gone.URL, "nats://")) {
		t.Fatalf("an apply whose server stopped did not name it down: %v", err)
	}
	if s.Conn.ConnectedUrl() == gone.URL || !s.Conn.IsConnected() {
		t.Fatalf("the controller did not move to another server")
	}
	c.Start(gone)
	c.WaitForMetaLeader()
	c.WaitForEveryPeer()
	f.mustApply(ctx, s)
	f.mustConverge(ctx, s)
}

// A module host connected to a server that stops reconnects to another of its membership's
// servers and keeps consuming: every event published before, during and after is delivered.
func TestAHostKeepsConsumingWhenItsServerStops(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	c := bustest.StartTestCluster(t, 3)
	f := newFixture(t, clusterMesh(c))
	s := f.connect(ctx)
	pw := f.mint(ctx, "alpha.shop", "alpha.audit")
	f.mustApply(ctx, s)

	// The auditor joins through n1 first, so stopping n1 is stopping its server.
	opts := []nats.Option{nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}
	auditor, err := host.Join(ctx, wire.NewMembership(s.Target.ServerURLs(), s.Target.Fingerprint, "alpha.audit", pw["alpha.audit"], false), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer auditor.Close()
	if got := auditor.Conn().ConnectedUrl(); got != c.Servers[0].URL {
		t.Fatalf("the auditor joined through %s, not the first server %s", got, c.Servers[0].URL)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	cc, err := auditor.Events(ctx, model.Instance{Node: "alpha", Module: "audit"}, func(msg jetstream.Msg) {
		// Seen when delivered: an ack lost with the server is a redelivery after the
		// consumer's ack wait, not a loss.
		mu.Lock()
		seen[string(msg.Data())] = true
		mu.Unlock()
		_ = msg.Ack()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()

	shop, err := host.Join(ctx, wire.NewMembership(s.Target.ServerURLs(), s.Target.Fingerprint, "alpha.shop", pw["alpha.shop"], false), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer shop.Close()
	publish := func(i int) {
		t.Helper()
		testwait.Until(t, fmt.Sprintf("EVENTS taking order %d", i), func() error {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err := shop.JetStream().Publish(pctx, "mesh.mod.shop.event.order.placed", fmt.Appendf(nil, "order %d", i))
			return err
		})
	}
	const total = 30
	for i := range total / 2 {
		publish(i)
	}
	c.Servers[0].Stop()
	stopped := time.Now()
	for i := total / 2; i < total; i++ {
		publish(i)
	}
	t.Logf("published the second half in %s", time.Since(stopped).Round(time.Millisecond))
	defer func() {
		t.Logf("every event received %s after the server stopped", time.Since(stopped).Round(time.Millisecond))
	}()
	testwait.Until(t, "the auditor receiving every event after its server stopped", func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) < total {
			return fmt.Errorf("%d of %d received", len(seen), total)
		}
		return nil
	})
	if got := auditor.Conn().ConnectedUrl(); got == c.Servers[0].URL {
		t.Fatalf("the auditor is still on the stopped server")
	}
}
