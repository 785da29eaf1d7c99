package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/controller"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/lockedbuf"
	"github.com/meshbus/meshctl/internal/testnats/opmode"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// jwtMesh is a node of two modules on an operator-mode cluster, whose operator the nats CLI
// made and whose account MESH an admin added with it. Its servers catch up only once an hour,
// so what reaches them is what meshctl pushed.
func jwtMesh(t *testing.T, c *opmode.Cluster, shopEmits string) string {
	t.Helper()
	var servers strings.Builder
	for _, u := range c.URLs() {
		fmt.Fprintf(&servers, "    - url: %s\n", u)
	}
	return fmt.Sprintf(`bus:
  auth: jwt
  replicas: 3
  servers:
%s  operator:
    store: %s
    account: MESH
    system_creds: %s
  jetstream:
    streams:
      control: {max_bytes: 16MiB}
      events: {max_bytes: 16MiB}
      nodes: {max_bytes: 16MiB}
      seats: {max_bytes: 16MiB}
nodes:
  - name: one
modules:
  - name: shop
    on: [one]
    emits: [%s]
  - name: audit
    on: [one]
    emits: [checked]
`, servers.String(), filepath.Dir(filepath.Dir(c.Operator.StoreDir)), c.Operator.SystemUserCreds, shopEmits)
}

// withJWTAccount runs change on the mesh's account as `meshctl credentials` does against a
// running watch: the description loaded, the store opened and the account's backend connected
// under the apply lock; then it pushes the account's JWT as the store holds it.
func withJWTAccount(t *testing.T, dir, stateDir string, change func(j *accounts.JWT, m *model.Mesh, desired *render.Desired)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := state.Open(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	j, done, err := reconcile.OpenJWT(ctx, m, st)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	desired := render.Derive(m)
	change(j, m, desired)
	if _, _, err := j.Sync(ctx, desired.Principals); err != nil {
		t.Fatal(err)
	}
}

// issueJWTEnrolment does what `meshctl credentials issue enrol.<node> -o FILE` does in jwt
// mode: a fresh user of the mesh's account for the node's enrolment identity, recorded in the
// store, the account's JWT pushed, and its membership (the user JWT and its seed) written to a
// file.
func issueJWTEnrolment(t *testing.T, dir, stateDir, node string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "enrol.json")
	withJWTAccount(t, dir, stateDir, func(j *accounts.JWT, m *model.Mesh, desired *render.Desired) {
		p, _ := desired.Principal(render.EnrolUser(node))
		creds, err := j.Issue(context.Background(), p, "credentials issue")
		if err != nil {
			t.Fatal(err)
		}
		kp, err := jwt.ParseDecoratedUserNKey(creds.File)
		if err != nil {
			t.Fatal(err)
		}
		seed, _ := kp.Seed()
		target, err := accounts.BusTarget(m)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(host.MembershipOf(target, p.User, string(seed), true).WithJWT(creds.JWT))
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	})
	return path
}

// hostOf joins as the membership file at path, as a module's host does (host.JoinFile, taking
// a credential written over the file at its next reconnect), counting its disconnects.
func hostOf(t *testing.T, path string, disconnects *atomic.Int64) *host.Host {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	h, err := host.JoinFile(ctx, path, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { disconnects.Add(1) }))
	if err != nil {
		t.Fatalf("joining with %s: %v", path, err)
	}
	t.Cleanup(h.Close)
	return h
}

// The issue's operator-mode test of enrolled nodes: on a three-server cluster in operator mode,
// a node handed only an enrolment credential (a user JWT and its seed) enrols, its agent writes
// each module's membership (a user JWT of the mesh's account and its seed), and each host
// joined from its file works. The shop gains an event in the description; with no operator
// action, watch pushes the account (revoking the shop's old JWT, which disconnects it), the
// controller declares the shop's new JWT, the agent writes it over the shop's file, and the
// shop's host, reconnecting with it, may publish the new event; its seed is the one it had. The audit's grants did not
// change: its host is never disconnected. Status shows both instances held by the agent. The
// audit's user revoked, the controller declares the agent a fresh one, and the audit's host
// takes it from its file.
func TestAnEnrolledNodeTakesANewPermissionInOperatorMode(t *testing.T) {
	t.Parallel()
	c := opmode.StartCluster(t, opmode.ClusterOptions{ResolverInterval: "1h"})
	c.Operator.Run(t, "auth", "account", "add", "MESH", "--operator", c.Operator.Name, "--defaults")
	w := &world{t: t, dir: t.TempDir(), stateDir: t.TempDir(), hup: make(chan os.Signal, 1), logs: &lockedbuf.Buffer{}, more: make(chan struct{})}
	w.write(jwtMesh(t, c, "order.placed"))
	t.Cleanup(w.startWatch())

	enrolment := issueJWTEnrolment(t, w.dir, w.stateDir, "one")
	dir := w.runAgent(enrolment)
	shopFile, auditFile := filepath.Join(dir, "one.shop.json"), filepath.Join(dir, "one.audit.json")
	w.wait("the agent writes both modules' memberships", func() bool { return exists(shopFile) && exists(auditFile) })
	for _, p := range []string{shopFile, auditFile, filepath.Join(dir, "node.one.json")} {
		if m := w.membership(p); m.JWT == "" || m.Seed == "" || m.Password != "" {
			t.Fatalf("%s is not an operator-mode membership (a user JWT and its seed)", p)
		}
	}
	w.wait("node one reports its declared generation", func() bool { return atDeclared(t, w.stateDir, "one") })

	var shopDown, auditDown atomic.Int64
	shop, audit := hostOf(t, shopFile, &shopDown), hostOf(t, auditFile, &auditDown)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	placed, refunded, checked := render.ModuleEvent("shop", "order.placed"), render.ModuleEvent("shop", "order.refunded"), render.ModuleEvent("audit", "checked")
	for h, subject := range map[*host.Host]string{shop: placed, audit: checked} {
		if _, err := h.Publish(ctx, subject, []byte("{}")); err != nil {
			t.Fatalf("%s cannot emit with the membership its agent wrote: %v", h.User(), err)
		}
	}
	var refused *busclient.PermissionError
	if _, err := shop.Publish(ctx, refunded, []byte("{}")); !errors.As(err, &refused) {
		t.Fatalf("the shop emitted %s before the description granted it: %v", refunded, err)
	}

	before := w.membership(shopFile)
	w.write(jwtMesh(t, c, "order.placed, order.refunded"))
	testwait.Until(t, "the shop's host emits its new event, with no operator action", func() error {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := shop.Publish(pctx, refunded, []byte("{}"))
		return err
	})
	if _, err := audit.Publish(ctx, checked, []byte("{}")); err != nil {
		t.Errorf("the audit cannot emit after the shop's change: %v", err)
	}
	if n := auditDown.Load(); n != 0 {
		t.Errorf("the audit's host, whose grants did not change, was disconnected %d times; want 0", n)
	}
	if shopDown.Load() == 0 {
		t.Errorf("the shop's host took its new permission without reconnecting: the old JWT was not revoked")
	}
	w.wait("node one reports the new generation", func() bool { return atDeclared(t, w.stateDir, "one") })
	// The same key: a new JWT declared for the seed the agent holds, no fresh user.
	if after := w.membership(shopFile); after.Seed != before.Seed || after.JWT == before.JWT {
		t.Errorf("the shop's membership after its change: same seed %v, same JWT %v; want the same seed with a new JWT",
			after.Seed == before.Seed, after.JWT == before.JWT)
	}

	// Status shows the node's instances, each held by its agent.
	st, err := state.Open(w.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	inv, err := st.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := controller.Nodes(ctx, st, inv)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 1 || len(nodes[0].Instances) != 2 {
		t.Fatalf("status shows %+v; want node one with its two instances", nodes)
	}
	for _, in := range nodes[0].Instances {
		if in.Credential != controller.HeldByAgent {
			t.Errorf("status says %s's credential is held by %q; want the agent", in.User, in.Credential)
		}
	}

	// Revoked (`meshctl credentials revoke one.audit`), the audit's user is handed back to the
	// agent: the controller declares a fresh one, which the host joined with the file takes at
	// the reconnect the revocation forces.
	auditBefore := w.membership(auditFile)
	withJWTAccount(t, w.dir, w.stateDir, func(j *accounts.JWT, _ *model.Mesh, _ *render.Desired) {
		if had, err := j.RevokePrincipals(ctx, []string{"one.audit"}); err != nil || len(had) != 1 {
			t.Fatalf("revoking one.audit: %v, %v", had, err)
		}
	})
	w.wait("the agent writes the audit's fresh user", func() bool {
		m, err := host.ReadMembershipFile(auditFile)
		return err == nil && m.Seed != auditBefore.Seed
	})
	testwait.Until(t, "the audit's host emits with its fresh user", func() error {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := audit.Publish(pctx, checked, []byte("{}"))
		return err
	})
	for _, f := range []string{shopFile, auditFile} {
		if strings.Contains(w.logs.String(), w.membership(f).Seed) {
			t.Errorf("the seed of %s is in the log", f)
		}
	}
}
