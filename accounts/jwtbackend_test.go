package accounts

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/meshbus/meshctl/internal/testnats/opmode"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// principalsOf is every principal a description derives.
func principalsOf(t *testing.T, description string) []render.Principal {
	t.Helper()
	m, err := model.Parse([]model.File{{Name: "mesh.yaml", Data: []byte(description)}})
	if err != nil {
		t.Fatal(err)
	}
	return render.DerivePrincipals(m, nil)
}

func principalNamed(t *testing.T, ps []render.Principal, user string) render.Principal {
	t.Helper()
	for _, p := range ps {
		if p.User == user {
			return p
		}
	}
	t.Fatalf("no principal %s", user)
	return render.Principal{}
}

const meshV1 = `
nodes: [{name: one}, {name: two}]
modules:
  - {name: shop, on: [one], emits: [order.placed]}
  - {name: audit, on: [two], follows: [shop/order.placed]}
  - {name: mailer, on: [two], emits: [sent]}
`

// TestPlanJWTSettlesWhatACrashLeft holds the plan's reading of the store against the servers'
// JWT: a pending JWT whose push reached the servers is in force and one whose push did not
// is dropped, a key kept to revoke is settled once the servers revoke it and pushed again
// otherwise, a principal gone is removed, one whose grants changed is reissued, and what
// meshctl owns of the account's JWT is set.
func TestPlanJWTSettlesWhatACrashLeft(t *testing.T) {
	t.Parallel()
	a, opKey := testAccount(t)
	userSigner, signerPub := newKey(t, nkeys.CreateAccount)
	a.SigningKeys = []string{signerPub}
	op := Operator{Account: a, Signer: opKey, UserSigner: userSigner}
	ps := principalsOf(t, meshV1)
	mint := func(user string, g Grants) (Creds, int64) {
		c, err := a.MintUser(userSigner, user, g)
		if err != nil {
			t.Fatal(err)
		}
		uc, _ := jwt.DecodeUserClaims(c.JWT)
		return c, uc.IssuedAt
	}
	shop, _ := mint("one.shop", GrantsOf(principalNamed(t, ps, "one.shop")))
	audit, _ := mint("two.audit", GrantsOf(principalNamed(t, ps, "two.audit")))
	mailer, mailerIAT := mint("two.mailer", Grants{Publish: []string{"old.grant"}})
	gone, _ := mint("three.gone", Grants{})
	pendingShop, err := a.IssueUser(userSigner, "one.shop", shop.UserKey, GrantsOf(principalNamed(t, ps, "one.shop")), time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	pendingAudit, err := a.IssueUser(userSigner, "two.audit", audit.UserKey, GrantsOf(principalNamed(t, ps, "two.audit")), time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	pendingShopIAT := decodeUser(t, pendingShop).IssuedAt
	users := map[string]state.JWTUser{
		"one.shop":   {Principal: "one.shop", UserKey: shop.UserKey, JWT: shop.JWT, Pending: pendingShop, Operation: "issue"},
		"two.audit":  {Principal: "two.audit", UserKey: audit.UserKey, JWT: audit.JWT, Pending: pendingAudit, Operation: state.OpDeclare},
		"two.mailer": {Principal: "two.mailer", UserKey: mailer.UserKey, JWT: mailer.JWT, Operation: "issue"},
		"three.gone": {Principal: "three.gone", UserKey: gone.UserKey, JWT: gone.JWT, Operation: "issue"},
	}
	_, settledKey := newKey(t, nkeys.CreateUser)
	_, unpushedKey := newKey(t, nkeys.CreateUser)
	revoked := []state.JWTRevoked{{UserKey: settledKey, Principal: "x", At: 100}, {UserKey: unpushedKey, Principal: "y", At: 200}}
	// The servers hold a JWT that revokes shop's key at its pending JWT's iat-1 (that push
	// was proven), and the settled key; neither audit's revocation nor the unpushed key's.
	unlisted := a
	unlisted.SigningKeys = nil
	held, err := unlisted.EncodeRevoking(opKey, "", time.Now(), map[string]int64{shop.UserKey: pendingShopIAT - 1, settledKey: 150})
	if err != nil {
		t.Fatal(err)
	}

	p, err := PlanJWT(op, ps, users, revoked, held)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Promote, []string{"one.shop"}) || !slices.Equal(p.Drop, []string{"two.audit"}) {
		t.Errorf("promote %v drop %v; want one.shop promoted and two.audit dropped", p.Promote, p.Drop)
	}
	if !slices.Equal(p.Settled, []string{settledKey}) || len(p.Revoke) != 1 || p.Revoke[0].UserKey != unpushedKey || p.Revoke[0].At != 200 {
		t.Errorf("settled %v revoke %+v; want %s settled and %s pushed again at 200", p.Settled, p.Revoke, settledKey, unpushedKey)
	}
	if len(p.Remove) != 1 || p.Remove[0].Principal != "three.gone" || p.Remove[0].UserKey != gone.UserKey {
		t.Errorf("remove %+v; want three.gone", p.Remove)
	}
	if len(p.Reissue) != 1 || p.Reissue[0].Principal != "two.mailer" || p.Reissue[0].After != mailerIAT || !p.Reissue[0].ByHand ||
		!p.Reissue[0].Grants.Equal(GrantsOf(principalNamed(t, ps, "two.mailer"))) {
		t.Errorf("reissue %+v; want two.mailer, by hand, after %d, with its grants", p.Reissue, mailerIAT)
	}
	// The servers' JWT lists no signing key of the users.
	if len(p.Owned) != 1 || !strings.Contains(p.Owned[0], signerPub) {
		t.Errorf("owned %v; want the users' signing key", p.Owned)
	}
	if !p.Pushes() {
		t.Error("a plan with changes does not push")
	}

	// Converged: nothing to push, nothing to settle.
	delete(users, "three.gone")
	users["two.mailer"] = state.JWTUser{Principal: "two.mailer", UserKey: mailer.UserKey, JWT: mustIssue(t, a, userSigner, "two.mailer", mailer.UserKey, GrantsOf(principalNamed(t, ps, "two.mailer")))}
	users["one.shop"] = state.JWTUser{Principal: "one.shop", UserKey: shop.UserKey, JWT: pendingShop}
	users["two.audit"] = state.JWTUser{Principal: "two.audit", UserKey: audit.UserKey, JWT: audit.JWT}
	converged, err := a.Encode(opKey, held, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p, err = PlanJWT(op, ps, users, nil, converged)
	if err != nil {
		t.Fatal(err)
	}
	if p.Pushes() || len(p.Promote)+len(p.Drop)+len(p.Settled) > 0 {
		t.Errorf("a converged account plans %+v", p)
	}
}

func mustIssue(t *testing.T, a Account, signer nkeys.KeyPair, name, key string, g Grants) string {
	t.Helper()
	token, err := a.IssueUser(signer, name, key, g, time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

func decodeUser(t *testing.T, token string) *jwt.UserClaims {
	t.Helper()
	c, err := jwt.DecodeUserClaims(token)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// jwtMesh is the JWT backend on an operator-mode cluster whose operator, SYSTEM and OTHER
// accounts the nats CLI made, and the mesh's account MESH an admin added with it.
type jwtMesh struct {
	c       *opmode.Cluster
	backend JWT
	root    string
}

func startJWTMesh(t *testing.T, opts opmode.ClusterOptions) *jwtMesh {
	t.Helper()
	c := opmode.StartCluster(t, opts)
	c.Operator.Run(t, "auth", "account", "add", "MESH", "--operator", c.Operator.Name, "--defaults")
	root := filepath.Dir(filepath.Dir(c.Operator.StoreDir))
	op, err := LoadOperator(model.Operator{Store: root, Account: "MESH", SystemCreds: c.Operator.SystemUserCreds})
	if err != nil {
		t.Fatal(err)
	}
	st, err := state.Open(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &jwtMesh{c: c, root: root, backend: JWT{
		Operator: op, Store: st,
		// Wait bounds a hang on a running server, and how long a stopped one is waited for.
		Resolver: Resolver{Conn: c.ConnectSystem(), Servers: c.Names(), Wait: 10 * time.Second},
	}}
}

// login connects to srv with creds, reporting each asynchronous error on errs.
func (m *jwtMesh) login(t *testing.T, srv *opmode.Server, creds Creds, errs chan<- error) *nats.Conn {
	t.Helper()
	kp, err := jwt.ParseDecoratedUserNKey(creds.File)
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	nc, err := nats.Connect(srv.URL, nats.UserJWTAndSeed(creds.JWT, string(seed)), nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("logging in to %s as %s: %v", srv.Name, creds.UserKey, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// connectedNowhere waits until no server counts a connection of key.
func (m *jwtMesh) connectedNowhere(t *testing.T, ctx context.Context, key string) {
	t.Helper()
	testwait.Until(t, "the user "+key+" disconnected on every server", func() error {
		counts, err := m.backend.Resolver.UserConnections(ctx, m.backend.Operator.Account.PublicKey, key)
		if err != nil {
			return err
		}
		for _, name := range m.c.Names() {
			if n, ok := counts[name]; !ok || n > 0 {
				return errors.New(name + " still counts it, or did not answer")
			}
		}
		return nil
	})
}

// serverReport runs `nats server report jetstream` as the admin's system user.
func (m *jwtMesh) serverReport(t *testing.T) {
	t.Helper()
	cmd := exec.Command(opmode.NatsCLIBinary(t), "--creds", m.c.Operator.SystemUserCreds, "-s", strings.Join(m.c.URLs(), ","), "server", "report", "jetstream")
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nats server report jetstream as the admin's system user: %v\n%s", err, out)
	}
	for _, name := range m.c.Names() {
		if !strings.Contains(string(out), name) {
			t.Errorf("the admin's server report does not show %s:\n%s", name, out)
		}
	}
}

// TestJWTBackendManagesOnlyItsAccount holds the backend on a shared operator-mode cluster:
// every change of a mesh (a module added or removed, permissions changed, a credential issued
// or revoked) is a push proven on every server, with no server reloading and no server file
// changed; OTHER's JWT and user are untouched; a host whose grants did not change stays
// connected, one reissued or removed is disconnected on every server; and the admin's system
// user runs its server report throughout.
func TestJWTBackendManagesOnlyItsAccount(t *testing.T) {
	t.Parallel()
	m := startJWTMesh(t, opmode.ClusterOptions{ResolverInterval: "1h"})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	b := m.backend

	other := m.c.ConnectOther(m.c.Servers[2])
	otherJWT, _, err := b.Resolver.Held(ctx, m.c.Operator.Other)
	if err != nil || otherJWT == "" {
		t.Fatalf("OTHER's JWT: %v", err)
	}
	loaded := map[string]time.Time{}
	mtimes := map[string]time.Time{}
	for _, srv := range m.c.Servers {
		if loaded[srv.Name], err = srv.ConfigLoadTime(); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(srv.ConfigFile)
		if err != nil {
			t.Fatal(err)
		}
		mtimes[srv.ConfigFile] = fi.ModTime()
	}
	m.serverReport(t)

	ps := principalsOf(t, meshV1)
	p, res, err := b.Sync(ctx, ps)
	if err != nil {
		t.Fatalf("the first sync: %v (%+v)", err, res)
	}
	if !slices.Contains(p.Owned, "the account's JWT is on no server yet") || res.Pushed == "" {
		t.Fatalf("the first sync planned %+v and pushed %q", p, res.Pushed)
	}
	if p.Size != len(res.Pushed) || p.Revocations != 0 || p.Limit != jwt.MaxTokenSize {
		t.Errorf("the plan measured %d bytes and %d revocations against %d; the push was %d bytes, against the servers' 1 MiB",
			p.Size, p.Revocations, p.Limit, len(res.Pushed))
	}
	if c := decodeAccount(t, res.Pushed); !c.Limits.IsJSEnabled() || !deniesEverything(c.DefaultPermissions) {
		t.Errorf("the account's JWT pushed lacks JetStream or default permissions denying everything: %+v", c.Limits)
	}

	issue := func(user string, ps []render.Principal) Creds {
		t.Helper()
		creds, err := b.Issue(ctx, principalNamed(t, ps, user), "issue")
		if err != nil {
			t.Fatal(err)
		}
		return creds
	}
	shopCreds, auditCreds, mailerCreds := issue("one.shop", ps), issue("two.audit", ps), issue("two.mailer", ps)
	shopErrs, auditErrs, mailerErrs := make(chan error, 4), make(chan error, 4), make(chan error, 4)
	var shop, audit []*nats.Conn
	for _, srv := range m.c.Servers {
		shop = append(shop, m.login(t, srv, shopCreds, shopErrs))
		audit = append(audit, m.login(t, srv, auditCreds, auditErrs))
	}
	m.login(t, m.c.Servers[0], mailerCreds, mailerErrs)
	// The shop may publish its event, and audit, following it, may not publish it.
	if err := shop[0].Publish("mesh.mod.shop.event.order.placed", nil); err != nil {
		t.Fatal(err)
	}
	if err := shop[0].Flush(); err != nil {
		t.Fatalf("the shop's publish of its own event: %v", err)
	}

	changes := 0
	sync := func(ps []render.Principal) (JWTPlan, JWTResult) {
		t.Helper()
		start := time.Now()
		p, res, err := b.Sync(ctx, ps)
		if err != nil {
			t.Fatalf("sync: %v (%+v)", err, res)
		}
		if !p.Pushes() {
			if res.Pushed != "" {
				t.Fatalf("a sync with nothing to change pushed")
			}
			return p, res
		}
		changes++
		t.Logf("change %d: planned %d reissued, %d removed, %d revoked; pushed and proven in %s", changes, len(p.Reissue), len(p.Remove), len(p.Revoke),
			time.Since(start).Round(time.Millisecond))
		return p, res
	}

	// Audit follows one more event: its grants change, its JWT is reissued for the same key,
	// and its connections holding the old JWT are cut on every server. The shop is untouched.
	meshV2 := strings.Replace(meshV1, "follows: [shop/order.placed]", "follows: [shop/order.placed, mailer/sent]", 1)
	ps2 := principalsOf(t, meshV2)
	start := time.Now()
	p, _ = sync(ps2)
	if len(p.Reissue) != 1 || p.Reissue[0].Principal != "two.audit" || !p.Reissue[0].ByHand {
		t.Fatalf("reissued %+v; want two.audit, by hand", p.Reissue)
	}
	m.connectedNowhere(t, ctx, auditCreds.UserKey)
	t.Logf("a reissue disconnected the old JWT on every server %s after the sync began", time.Since(start).Round(time.Millisecond))
	users, err := b.Store.JWTUsers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	newAudit := users["two.audit"]
	if newAudit.UserKey != auditCreds.UserKey || newAudit.Pending != "" || !UserGrants(decodeUser(t, newAudit.JWT)).Equal(GrantsOf(principalNamed(t, ps2, "two.audit"))) {
		t.Fatalf("audit's user after the reissue: %+v; want its key with the new grants in force", newAudit)
	}
	// The host logs in again with its seed and the new JWT.
	kp, _ := jwt.ParseDecoratedUserNKey(auditCreds.File)
	seed, _ := kp.Seed()
	relogin, err := nats.Connect(m.c.Servers[1].URL, nats.UserJWTAndSeed(newAudit.JWT, string(seed)), nats.NoReconnect())
	if err != nil {
		t.Fatalf("audit's new JWT does not log in: %v", err)
	}
	relogin.Close()

	// Many changes of every kind: modules added and removed, permissions changed back and
	// forth, credentials issued (replacing a key) and revoked.
	for i := range 16 {
		desc := meshV1
		if i%2 == 1 {
			desc = meshV2 + "  - {name: extra, on: [one], follows: [mailer/sent]}\n"
		}
		ps := principalsOf(t, desc)
		if p, _ := sync(ps); !p.Pushes() {
			t.Fatalf("change %d pushed nothing", i)
		}
		if i%2 == 1 {
			// A fresh key needs no push: the servers take any JWT the account's key signed.
			extra := issue("one.extra", ps)
			m.login(t, m.c.Servers[i%3], extra, make(chan error, 1))
			if p, _ := sync(ps); p.Pushes() {
				t.Fatalf("a credential issued for a fresh key planned a push: %+v", p)
			}
		}
	}
	sync(ps)
	// A credential issued again: a fresh key, the old one revoked on the next sync.
	replaced := issue("two.mailer", ps)
	sync(ps)
	m.connectedNowhere(t, ctx, mailerCreds.UserKey)
	m.login(t, m.c.Servers[2], replaced, make(chan error, 1))

	// The shop is revoked: disconnected on every server.
	if had, err := b.RevokePrincipals(ctx, []string{"one.shop"}); err != nil || len(had) != 1 {
		t.Fatalf("revoking the shop: %v %v", had, err)
	}
	start = time.Now()
	_, res = sync(ps)
	pushed := time.Since(start)
	m.connectedNowhere(t, ctx, shopCreds.UserKey)
	t.Logf("a revocation: pushed and proven in %s, disconnected on every server %s after the sync began", pushed.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	for _, nc := range shop {
		if nc.IsConnected() {
			t.Errorf("the revoked shop is still connected to %s", nc.ConnectedUrl())
		}
	}
	select {
	case err := <-shopErrs:
		if !errors.Is(err, nats.ErrAuthRevoked) {
			t.Errorf("the revoked shop was told %v; want %v", err, nats.ErrAuthRevoked)
		}
	default:
		t.Error("the revoked shop was told nothing")
	}
	if users, _ := b.Store.JWTUsers(ctx); users["one.shop"].UserKey != "" {
		t.Errorf("the revoked shop still has a user: %+v", users["one.shop"])
	}
	if revoked, _ := b.Store.JWTRevokedKeys(ctx); len(revoked) != 0 {
		t.Errorf("keys still to revoke after proven pushes: %+v", revoked)
	}
	if changes < 20 {
		t.Fatalf("only %d changes", changes)
	}

	// What did not change, across every push.
	if !other.IsConnected() {
		t.Errorf("OTHER's user was disconnected: %v", other.LastError())
	}
	if got, _, err := b.Resolver.Held(ctx, m.c.Operator.Other); err != nil || got != otherJWT {
		t.Errorf("OTHER's JWT changed: %v", err)
	}
	for _, srv := range m.c.Servers {
		at, err := srv.ConfigLoadTime()
		if err != nil {
			t.Fatal(err)
		}
		if !at.Equal(loaded[srv.Name]) {
			t.Errorf("%s reloaded: config_load_time %s, was %s", srv.Name, at, loaded[srv.Name])
		}
		if fi, err := os.Stat(srv.ConfigFile); err != nil || !fi.ModTime().Equal(mtimes[srv.ConfigFile]) {
			t.Errorf("%s's config file changed (%v)", srv.Name, err)
		}
	}
	m.serverReport(t)
	// A converged account pushes nothing.
	if p, err := b.Plan(ctx, ps); err != nil || p.Pushes() {
		t.Errorf("the converged account plans %+v (%v)", p, err)
	}
}

// TestJWTBackendNamesAStoppedServer holds a server stopped during a change: the sync fails
// naming it, nothing pushed is recorded as in force, and once the server is back the next
// sync brings it level and settles the store.
func TestJWTBackendNamesAStoppedServer(t *testing.T) {
	t.Parallel()
	// An hour between catch-ups: only a push brings the stopped server level.
	m := startJWTMesh(t, opmode.ClusterOptions{ResolverInterval: "1h"})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	b := m.backend
	b.Resolver.Wait = 3 * time.Second
	ps := principalsOf(t, meshV1)
	if _, res, err := b.Sync(ctx, ps); err != nil {
		t.Fatalf("the first sync: %v (%+v)", err, res)
	}
	creds, err := b.Issue(ctx, principalNamed(t, ps, "two.audit"), "issue")
	if err != nil {
		t.Fatal(err)
	}
	stopped := m.c.Servers[2]
	m.c.Stop(stopped)
	b.Resolver.Conn = m.c.ConnectSystem()

	ps2 := principalsOf(t, strings.Replace(meshV1, "follows: [shop/order.placed]", "follows: [mailer/sent]", 1))
	_, res, err := b.Sync(ctx, ps2)
	if !errors.Is(err, ErrPushIncomplete) || !strings.Contains(err.Error(), stopped.Name) {
		t.Fatalf("a sync with %s stopped: %v; want ErrPushIncomplete naming it", stopped.Name, err)
	}
	for _, name := range []string{"n1", "n2"} {
		if !slices.ContainsFunc(res.Push.Replies, func(r PushReply) bool { return r.Server == name && r.State == Stored }) {
			t.Errorf("%s did not store the push: %+v", name, res.Push.Replies)
		}
	}
	users, _ := b.Store.JWTUsers(ctx)
	if u := users["two.audit"]; u.JWT != creds.JWT || u.Pending == "" {
		t.Errorf("after a push not proven, audit's user is %+v; want the old JWT in force and the new one pending", u)
	}

	m.c.Start(stopped)
	p, err := b.Plan(ctx, ps2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Behind, []string{stopped.Name}) || !slices.Equal(p.Promote, []string{"two.audit"}) || len(p.Reissue) != 0 {
		t.Errorf("with %s back: behind %v, promote %v, reissue %+v; want it behind and audit's JWT in force", stopped.Name, p.Behind, p.Promote, p.Reissue)
	}
	res, err = b.Apply(ctx, p)
	if err != nil {
		t.Fatalf("the sync after %s came back: %v", stopped.Name, err)
	}
	if len(res.Status.NotCurrent()) != 0 {
		t.Errorf("not every server current: %+v", res.Status)
	}
	users, _ = b.Store.JWTUsers(ctx)
	if u := users["two.audit"]; u.Pending != "" || u.JWT == creds.JWT {
		t.Errorf("audit's user after the servers were level: %+v; want the new JWT in force", u)
	}
	if p, err := b.Plan(ctx, ps2); err != nil || p.Pushes() {
		t.Errorf("the converged account plans %+v (%v)", p, err)
	}
}

// failingReplica is a copy of the store on a bus that does not answer.
type failingReplica struct{}

func (failingReplica) Write(context.Context, []state.Record) error {
	return errors.New("nats: timeout")
}

// A change of the account goes on while the store's copy on the bus does not take the
// store's changes: they stand in the store (the copy catches up at the next change kept), so
// the push is made and proven, the new JWT is in force, and what the copy lacks is said.
func TestJWTBackendGoesOnWhileTheStoresCopyIsBehind(t *testing.T) {
	t.Parallel()
	m := startJWTMesh(t, opmode.ClusterOptions{})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	b := m.backend
	ps := principalsOf(t, meshV1)
	if _, res, err := b.Sync(ctx, ps); err != nil {
		t.Fatalf("the first sync: %v (%+v)", err, res)
	}
	creds, err := b.Issue(ctx, principalNamed(t, ps, "two.audit"), "issue")
	if err != nil {
		t.Fatal(err)
	}
	b.Store.SetReplica(failingReplica{})
	ps2 := principalsOf(t, strings.Replace(meshV1, "follows: [shop/order.placed]", "follows: [mailer/sent]", 1))
	_, res, err := b.Sync(ctx, ps2)
	if !errors.Is(err, state.ErrReplicaBehind) {
		t.Fatalf("a sync with the store's copy failing: %v; want ErrReplicaBehind", err)
	}
	if res.Pushed == "" || len(res.Status.NotCurrent()) != 0 {
		t.Errorf("the push was not made and proven on every server: %+v", res)
	}
	users, _ := b.Store.JWTUsers(ctx)
	if u := users["two.audit"]; u.Pending != "" || u.JWT == creds.JWT {
		t.Errorf("audit's user after the push: %+v; want the new JWT in force", u)
	}
}
