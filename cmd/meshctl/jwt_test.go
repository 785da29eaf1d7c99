package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/meshbus/meshctl/internal/lockedbuf"
	"github.com/meshbus/meshctl/internal/testnats/opmode"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/state"
	"github.com/meshbus/meshctl/wire"
)

// jwtCluster is an operator-mode cluster whose operator, SYSTEM and OTHER the nats CLI made,
// and the mesh's account MESH an admin added with it: what `bus.auth: jwt` manages. Its
// servers catch up only once an hour, so only a push brings a server level.
func jwtCluster(t *testing.T) *opmode.Cluster {
	t.Helper()
	c := opmode.StartCluster(t, opmode.ClusterOptions{ResolverInterval: "1h"})
	c.Operator.Run(t, "auth", "account", "add", "MESH", "--operator", c.Operator.Name, "--defaults")
	return c
}

// jwtDescription is a mesh on c in operator mode, modules apart.
func jwtDescription(c *opmode.Cluster, modules string) map[string]string {
	var servers strings.Builder
	for _, u := range c.URLs() {
		fmt.Fprintf(&servers, "    - url: %s\n", u)
	}
	// The test servers hold 256MB of files each: the streams are kept small, on every server
	// so that one stopped loses none.
	bus := fmt.Sprintf("bus:\n  auth: jwt\n  replicas: 3\n  servers:\n%s  operator:\n    store: %s\n    account: MESH\n    system_creds: %s\n"+
		"  jetstream:\n    streams:\n      control: {max_bytes: 16MiB}\n      events: {max_bytes: 16MiB}\n      nodes: {max_bytes: 16MiB}\n      seats: {max_bytes: 16MiB}\n",
		servers.String(), filepath.Dir(filepath.Dir(c.Operator.StoreDir)), c.Operator.SystemUserCreds)
	return map[string]string{"bus.yaml": bus, "mesh.yaml": "nodes: [{name: one}, {name: two}]\nmodules:\n" + modules}
}

const jwtModules = `  - {name: shop, on: [one], emits: [order.placed]}
  - {name: audit, on: [two], follows: [shop/order.placed]}
  - {name: mailer, on: [two], emits: [sent]}
`

// loginEverywhere logs a host in on every server of c with its user JWT and seed.
func loginEverywhere(t *testing.T, c *opmode.Cluster, userJWT, seed string) []*nats.Conn {
	t.Helper()
	var conns []*nats.Conn
	for _, srv := range c.Servers {
		nc, err := nats.Connect(srv.URL, nats.UserJWTAndSeed(userJWT, seed), nats.NoReconnect())
		if err != nil {
			t.Fatalf("logging in to %s: %v", srv.Name, err)
		}
		t.Cleanup(nc.Close)
		conns = append(conns, nc)
	}
	return conns
}

func disconnectedEverywhere(t *testing.T, what string, conns []*nats.Conn) {
	t.Helper()
	testwait.Until(t, what+" disconnected from every server", func() error {
		for _, nc := range conns {
			if !nc.IsClosed() {
				return errors.New("still connected to " + nc.ConnectedUrl())
			}
		}
		return nil
	})
}

func serverReport(t *testing.T, c *opmode.Cluster) {
	t.Helper()
	cmd := exec.Command(opmode.NatsCLIBinary(t), "--creds", c.Operator.SystemUserCreds, "-s", strings.Join(c.URLs(), ","), "server", "report", "jetstream")
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nats server report jetstream as the admin's system user: %v\n%s", err, out)
	}
}

// TestApplyDiffAndCredentialsOnAnOperatorModeCluster holds meshctl on a shared cluster in
// operator mode: apply creates the mesh and pushes its account, credentials issue prints a
// membership carrying the user JWT (or writes a creds file) that logs in on every server,
// diff shows a permission change as the account's change (credential reissue for a host
// issued by hand), apply cuts that host's old JWT everywhere and leaves a host whose grants
// did not change connected, revoke disconnects its host everywhere, a server stopped during
// a change is named and brought level by the next apply, and through it all OTHER's user
// stays connected, the admin's system user runs its server report, and no server reloads or
// has a file of its own changed.
func TestApplyDiffAndCredentialsOnAnOperatorModeCluster(t *testing.T) {
	t.Parallel()
	c := jwtCluster(t)
	files := jwtDescription(c, jwtModules)
	desc := writeMesh(t, files)
	st := t.TempDir()
	other := c.ConnectOther(c.Servers[0])
	loaded := map[string]time.Time{}
	mtimes := map[string]time.Time{}
	for _, srv := range c.Servers {
		at, err := srv.ConfigLoadTime()
		if err != nil {
			t.Fatal(err)
		}
		loaded[srv.Name] = at
		fi, err := os.Stat(srv.ConfigFile)
		if err != nil {
			t.Fatal(err)
		}
		mtimes[srv.Name] = fi.ModTime()
	}
	serverReport(t, c)

	if code, out, errOut := meshctl(t, "apply", "-f", desc, "--state", st); code != exitOK {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	if fi, err := os.Stat(filepath.Join(st, "controller.creds")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the controller's creds: %v %v; want a 0600 file", fi, err)
	}
	if code, out, errOut := meshctl(t, "diff", "-f", desc, "--state", st); code != exitOK {
		t.Fatalf("diff after apply: exit %d\n%s%s", code, out, errOut)
	}

	code, out, errOut := meshctl(t, "credentials", "issue", "two.audit", "-f", desc, "--state", st)
	if code != exitOK {
		t.Fatalf("credentials issue: exit %d\n%s%s", code, out, errOut)
	}
	var mem wire.Membership
	if err := json.Unmarshal([]byte(out), &mem); err != nil || mem.JWT == "" || mem.Seed == "" || mem.User != "two.audit" || len(mem.Servers) != 3 {
		t.Fatalf("the membership %q (%v); want the user JWT, the seed and every server", out, err)
	}
	audit := loginEverywhere(t, c, mem.JWT, mem.Seed)
	if code, out, errOut := meshctl(t, "credentials", "list", "-f", desc, "--state", st); code != exitOK ||
		!strings.Contains(out, "two.audit") || strings.Contains(out, "two.audit  none") || !strings.Contains(errOut, "8 principal(s), 6 without a credential") {
		t.Fatalf("credentials list: exit %d\n%s%s", code, out, errOut)
	}
	credsFile := filepath.Join(t.TempDir(), "mailer.creds")
	if code, out, errOut := meshctl(t, "credentials", "issue", "two.mailer", "-f", desc, "--state", st, "--creds", credsFile); code != exitOK || out != "" {
		t.Fatalf("credentials issue --creds: exit %d\n%s%s", code, out, errOut)
	}
	if fi, err := os.Stat(credsFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the creds file: %v %v; want 0600", fi, err)
	}
	var mailer []*nats.Conn
	for _, srv := range c.Servers {
		nc, err := nats.Connect(srv.URL, nats.UserCredentials(credsFile), nats.NoReconnect())
		if err != nil {
			t.Fatalf("the creds file does not log in to %s: %v", srv.Name, err)
		}
		t.Cleanup(nc.Close)
		mailer = append(mailer, nc)
	}

	// Audit follows one more event: diff shows its new grant as the account's change, a
	// reissue for a host issued by hand.
	changed := jwtModules + "  - {name: extra, on: [one], follows: [mailer/sent]}\n"
	changed = strings.Replace(changed, "follows: [shop/order.placed]", "follows: [shop/order.placed, mailer/sent]", 1)
	files["mesh.yaml"] = "nodes: [{name: one}, {name: two}]\nmodules:\n" + changed
	desc2 := writeMesh(t, files)
	code, out, errOut = meshctl(t, "diff", "-f", desc2, "--state", st)
	if code != exitChanges || !strings.Contains(out, "~ accounts JWT") || !strings.Contains(out, "two.audit") || !strings.Contains(out, "mesh.mod.mailer.event.sent") {
		t.Fatalf("diff of a permission change: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("diff of a permission change:\n%s", out)
	start := time.Now()
	if code, out, errOut := meshctl(t, "apply", "-f", desc2, "--state", st); code != exitOK {
		t.Fatalf("apply of a permission change: exit %d\n%s%s", code, out, errOut)
	}
	disconnectedEverywhere(t, "audit's old JWT", audit)
	t.Logf("audit's old JWT disconnected everywhere %s after the apply began", time.Since(start).Round(time.Millisecond))
	for _, nc := range mailer {
		if !nc.IsConnected() {
			t.Errorf("the mailer, whose grants did not change, was disconnected from %s", nc.ConnectedUrl())
		}
	}

	// Revoked: disconnected on every server.
	start = time.Now()
	if code, out, errOut := meshctl(t, "credentials", "revoke", "two.mailer", "-f", desc2, "--state", st); code != exitOK {
		t.Fatalf("credentials revoke: exit %d\n%s%s", code, out, errOut)
	}
	disconnectedEverywhere(t, "the revoked mailer", mailer)
	t.Logf("credentials revoke to disconnected everywhere: %s", time.Since(start).Round(time.Millisecond))

	// Twenty changes more, of every kind: a module added and removed (its consumer, and its
	// credential revoked with it), a permission changed back and forth, credentials issued.
	changes := 0
	for i := range 20 {
		d := desc2
		if i%2 == 0 {
			d = desc
		}
		code, out, errOut := meshctl(t, "apply", "-f", d, "--state", st)
		if code != exitOK || strings.Contains(out, "in sync") {
			t.Fatalf("change %d: exit %d\n%s%s", i, code, out, errOut)
		}
		changes++
		if i%4 == 1 {
			if code, out, errOut := meshctl(t, "credentials", "issue", "one.extra", "-f", d, "--state", st); code != exitOK {
				t.Fatalf("issuing one.extra: exit %d\n%s%s", code, out, errOut)
			}
			changes++
		}
	}
	t.Logf("%d changes applied", changes)
	for _, srv := range c.Servers {
		if at, err := srv.ConfigLoadTime(); err != nil || !at.Equal(loaded[srv.Name]) {
			t.Errorf("%s reloaded: config_load_time %s, was %s (%v)", srv.Name, at, loaded[srv.Name], err)
		}
		if fi, err := os.Stat(srv.ConfigFile); err != nil || !fi.ModTime().Equal(mtimes[srv.Name]) {
			t.Errorf("%s's config file changed (%v)", srv.Name, err)
		}
	}
	serverReport(t, c)

	// The controller's own grants change: its JWT is reissued for its key, written into its
	// creds before the push cuts its connection, which logs in again with it. The change is
	// saved, reviewed and applied exactly.
	files["mesh.yaml"] = "controller:\n  follows: [mailer/sent]\n" + "nodes: [{name: one}, {name: two}]\nmodules:\n" + jwtModules
	desc3 := writeMesh(t, files)
	saved := filepath.Join(t.TempDir(), "plan.json")
	if code, out, errOut := meshctl(t, "diff", "-f", desc3, "--state", st, "--out", saved); code != exitChanges || !strings.Contains(out, "user controller (credential rotated)") {
		t.Fatalf("diff of the controller's change: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := meshctl(t, "apply", "--plan", saved, "--state", st); code != exitOK {
		t.Fatalf("apply --plan of the controller's change: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := meshctl(t, "diff", "-f", desc3, "--state", st); code != exitOK {
		t.Fatalf("diff after the controller's change: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := meshctl(t, "apply", "-f", desc, "--state", st); code != exitOK {
		t.Fatalf("apply back: exit %d\n%s%s", code, out, errOut)
	}

	// A server stopped during a change is named; back, the next apply brings it level.
	stopped := c.Servers[2]
	c.Stop(stopped)
	if code, out, errOut := meshctl(t, "apply", "-f", desc2, "--state", st); code != exitError || !strings.Contains(errOut, stopped.URL[len("nats://"):]) {
		t.Fatalf("apply with %s stopped: exit %d, want %d naming it\n%s%s", stopped.Name, code, exitError, out, errOut)
	} else {
		t.Logf("apply with %s stopped: exit %d\n%s", stopped.Name, code, errOut)
	}
	c.Start(stopped)
	code, out, errOut = meshctl(t, "diff", "-f", desc2, "--state", st)
	if code != exitChanges || !strings.Contains(out, "behind on "+stopped.Name) {
		t.Fatalf("diff with %s back: exit %d; want it named behind\n%s%s", stopped.Name, code, out, errOut)
	}
	if code, out, errOut := meshctl(t, "apply", "-f", desc2, "--state", st); code != exitOK {
		t.Fatalf("apply with %s back: exit %d\n%s%s", stopped.Name, code, out, errOut)
	}
	if code, out, errOut := meshctl(t, "diff", "-f", desc2, "--state", st); code != exitOK {
		t.Fatalf("diff after: exit %d\n%s%s", code, out, errOut)
	}

	if !other.IsConnected() {
		t.Errorf("OTHER's user was disconnected: %v", other.LastError())
	}
	for _, srv := range c.Servers[:2] {
		if at, err := srv.ConfigLoadTime(); err != nil || !at.Equal(loaded[srv.Name]) {
			t.Errorf("%s reloaded: config_load_time %s, was %s (%v)", srv.Name, at, loaded[srv.Name], err)
		}
	}
	serverReport(t, c)
}

// TestWatchKeepsAnOperatorModeMeshInSync holds watch's loop in jwt mode: it applies the mesh,
// and a permission changed in the description reaches the servers as a push with no command.
func TestWatchKeepsAnOperatorModeMeshInSync(t *testing.T) {
	t.Parallel()
	c := jwtCluster(t)
	files := jwtDescription(c, jwtModules)
	desc := writeMesh(t, files)
	st := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &lockedbuf.Buffer{}
	done, stopped := make(chan int, 1), make(chan struct{})
	go func() {
		defer close(stopped)
		done <- run(ctx, []string{"watch", "-f", desc, "--state", st, "--debounce", "50ms"}, &bytes.Buffer{}, stderr)
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
		if t.Failed() {
			t.Logf("watch's log:\n%s", stderr)
		}
	})
	inSync := func(what string) {
		t.Helper()
		testwait.Until(t, what, func() error {
			if code, out, errOut := meshctl(t, "diff", "-f", desc, "--state", st); code != exitOK {
				return fmt.Errorf("diff exited %d:\n%s%s", code, out, errOut)
			}
			return nil
		})
	}
	inSync("watch applying the mesh")
	if code, out, errOut := meshctl(t, "credentials", "issue", "two.audit", "-f", desc, "--state", st); code != exitOK {
		t.Fatalf("credentials issue: exit %d\n%s%s", code, out, errOut)
	}
	changed := strings.Replace(files["mesh.yaml"], "follows: [shop/order.placed]", "follows: [shop/order.placed, mailer/sent]", 1)
	if err := os.WriteFile(filepath.Join(desc, "mesh.yaml"), []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	inSync("watch applying a permission change")
	users, err := openedJWTUsers(t, st)
	if err != nil || !strings.Contains(users["two.audit"], "mesh.mod.mailer.event.sent") {
		t.Errorf("audit's JWT in force after watch applied its change does not grant it: %v", err)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("watch exited %d when stopped; want 0", code)
	}
}

// openedJWTUsers is each principal's user JWT in force in the store at dir, as its claims'
// JSON, once no command holds the store.
func openedJWTUsers(t *testing.T, dir string) (map[string]string, error) {
	t.Helper()
	s, err := state.Open(dir)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	users, err := s.JWTUsers(context.Background())
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for name, u := range users {
		c, err := jwt.DecodeUserClaims(u.JWT)
		if err != nil {
			return nil, err
		}
		out[name] = c.String()
	}
	return out, nil
}

// An admin who pushed the mesh's account as `nats auth account add` made it, JetStream off,
// before meshctl's first apply: the apply pushes the account's JetStream limits before it
// reads or creates a stream, and the next diff is clean.
func TestTheFirstApplyTurnsOnJetStreamInAnAccountTheAdminPushed(t *testing.T) {
	t.Parallel()
	c := jwtCluster(t)
	sys := c.ConnectSystem()
	defer sys.Close()
	claims, err := jwt.DecodeAccountClaims(c.Operator.AccountJWT(t, "MESH"))
	if err != nil {
		t.Fatal(err)
	}
	if claims.Limits.IsJSEnabled() {
		t.Fatalf("the admin's MESH has JetStream on; the test needs it off")
	}
	// The admin's push, as `nats auth account push` makes it: every server takes it.
	sub, err := sys.SubscribeSync(sys.NewRespInbox())
	if err != nil {
		t.Fatal(err)
	}
	if err := sys.PublishRequest("$SYS.REQ.ACCOUNT."+claims.Subject+".CLAIMS.UPDATE", sub.Subject, []byte(c.Operator.AccountJWT(t, "MESH"))); err != nil {
		t.Fatal(err)
	}
	for range c.Servers {
		if _, err := sub.NextMsg(30 * time.Second); err != nil {
			t.Fatalf("a server did not take the admin's push: %v", err)
		}
	}

	desc := writeMesh(t, jwtDescription(c, jwtModules))
	st := t.TempDir()
	if code, out, errOut := meshctl(t, "apply", "-f", desc, "--state", st); code != exitOK {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := meshctl(t, "diff", "-f", desc, "--state", st); code != exitOK {
		t.Fatalf("diff after apply: exit %d\n%s%s", code, out, errOut)
	}
}

// `credentials rotate controller` in jwt mode: the controller's creds file gets a new user,
// the previous key is refused on every server, and meshctl carries on with the new one.
func TestRotatingTheControllerInJWTModeRevokesItsPreviousKey(t *testing.T) {
	t.Parallel()
	c := jwtCluster(t)
	desc := writeMesh(t, jwtDescription(c, jwtModules))
	st := t.TempDir()
	if code, out, errOut := meshctl(t, "apply", "-f", desc, "--state", st); code != exitOK {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	path := filepath.Join(st, "controller.creds")
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	userJWT, err := jwt.ParseDecoratedJWT(before)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := jwt.ParseDecoratedUserNKey(before)
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	old := loginEverywhere(t, c, userJWT, string(seed))

	if code, out, errOut := meshctl(t, "credentials", "rotate", "controller", "-f", desc, "--state", st); code != exitOK {
		t.Fatalf("credentials rotate controller: exit %d\n%s%s", code, out, errOut)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(before, after) {
		t.Fatal("controller.creds is unchanged")
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the controller's creds: %v %v; want a 0600 file", fi, err)
	}
	disconnectedEverywhere(t, "the previous controller key", old)
	for _, srv := range c.Servers {
		if nc, err := nats.Connect(srv.URL, nats.UserJWTAndSeed(userJWT, string(seed)), nats.NoReconnect()); err == nil {
			nc.Close()
			t.Errorf("the previous controller key logs in to %s", srv.Name)
		}
	}
	if code, out, errOut := meshctl(t, "diff", "-f", desc, "--state", st); code != exitOK {
		t.Fatalf("diff after the rotation: exit %d\n%s%s", code, out, errOut)
	}
}

// In jwt mode, as in the others, credentials issue and rotate refuse a user an enrolled node's
// agent holds: the node's own, and an instance's the controller declares to it. A key minted
// here would be revoked by the push under the agent. They refuse before joining any bus.
func TestCredentialsInJWTModeLeaveAnAgentsUsersAlone(t *testing.T) {
	t.Parallel()
	desc := writeMesh(t, map[string]string{"mesh.yaml": `bus:
  auth: jwt
  url: nats://127.0.0.1:1
  operator: {store: /nonexistent, account: MESH, system_creds: sys.creds}
nodes: [{name: one}]
modules:
  - {name: shop, on: [one], emits: [order.placed]}
`})
	dir := t.TempDir()
	st, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := st.IssueJWTUser(ctx, state.JWTUser{Principal: "enrol.one", UserKey: "UENROL", JWT: "jwt", IssuedAt: time.Now(), Operation: "credentials issue"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.EnrolNode(ctx, state.NodeEnrolment{Node: "one", EnrolPrincipal: "enrol.one", NodePrincipal: "node.one", PublicKey: []byte("key"),
		JWT: &state.JWTUser{UserKey: "UNODE", JWT: "jwt", IssuedAt: time.Now()}}, 0); err != nil {
		t.Fatal(err)
	}
	st.Close()
	for _, args := range [][]string{{"issue", "node.one"}, {"issue", "one.shop"}, {"rotate", "one.shop"}} {
		code, _, errOut := meshctl(t, append(append([]string{"credentials"}, args...), "-f", desc, "--state", dir)...)
		if code != exitError || !strings.Contains(errOut, "enrolled") {
			t.Errorf("credentials %s: exit %d\n%s; want it refused, saying the node enrolled", strings.Join(args, " "), code, errOut)
		}
	}
}
