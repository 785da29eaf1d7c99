package accounts

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/meshbus/meshctl/internal/backoff"
	"github.com/meshbus/meshctl/internal/testnats"
	"github.com/meshbus/meshctl/internal/testnats/opmode"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testnats.RemoveBuiltServer()
	os.Exit(code)
}

// liveMesh is an operator-mode cluster with the mesh's account in it: its key, an account
// signing key for its users, and the operator's signing key for its JWT.
type liveMesh struct {
	c       *opmode.Cluster
	r       Resolver
	acc     Account
	accKey  nkeys.KeyPair
	userKey nkeys.KeyPair
	opKey   nkeys.KeyPair
}

func startMesh(t *testing.T, opts opmode.ClusterOptions) *liveMesh {
	t.Helper()
	start := time.Now()
	c := opmode.StartCluster(t, opts)
	t.Logf("the operator-mode cluster started in %s", time.Since(start).Round(time.Millisecond))
	accKey, accPub := newKey(t, nkeys.CreateAccount)
	userKey, userPub := newKey(t, nkeys.CreateAccount)
	return &liveMesh{
		c: c,
		// Every server is up unless a test stops one: Wait only bounds a hang.
		r:      Resolver{Conn: c.ConnectSystem(), Servers: c.Names(), Wait: 60 * time.Second},
		accKey: accKey, userKey: userKey, opKey: c.Operator.SigningKey(t),
		acc: Account{Name: "MESH", PublicKey: accPub, SigningKeys: []string{userPub},
			JetStream: jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}},
	}
}

// push encodes the account's successor of previous and pushes it, and fails the test unless
// every server stored it.
func (m *liveMesh) push(t *testing.T, ctx context.Context, previous string, revoke ...string) string {
	t.Helper()
	token, err := m.acc.Encode(m.opKey, previous, time.Now(), revoke...)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, err := m.r.Push(ctx, token)
	if err == nil {
		err = res.Err()
	}
	if err != nil {
		t.Fatalf("push: %v (%+v)", err, res)
	}
	t.Logf("a push answered by %d servers in %s", len(res.Replies), time.Since(start).Round(time.Millisecond))
	return token
}

// connect logs in to srv as the holder of creds.
func (m *liveMesh) connect(t *testing.T, srv *opmode.Server, creds Creds, opts ...nats.Option) *nats.Conn {
	t.Helper()
	kp, err := jwt.ParseDecoratedUserNKey(creds.File)
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.URL, append([]nats.Option{nats.UserJWTAndSeed(creds.JWT, string(seed)), nats.NoReconnect()}, opts...)...)
	if err != nil {
		t.Fatalf("logging in to %s as %s: %v", srv.Name, creds.UserKey, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func (m *liveMesh) mint(t *testing.T, name string, g Grants) Creds {
	t.Helper()
	creds, err := m.acc.MintUser(m.userKey, name, g)
	if err != nil {
		t.Fatal(err)
	}
	return creds
}

// loadEverywhere logs a user of the mesh in on every server, so that every server loads the
// account and ACCOUNTZ shows the JWT it applies.
func (m *liveMesh) loadEverywhere(t *testing.T) {
	t.Helper()
	creds := m.mint(t, "loader", Grants{})
	for _, srv := range m.c.Servers {
		m.connect(t, srv, creds)
	}
}

// waitForStatus reads every server's JWT until want holds of it, and fails the test with the
// last reading otherwise.
func (m *liveMesh) waitForStatus(t *testing.T, ctx context.Context, token string, want func(Status) bool) Status {
	t.Helper()
	var st Status
	var err error
	if !backoff.Retry(ctx, backoff.Backoff{Min: 50 * time.Millisecond, Max: time.Second}, func() bool {
		st, err = m.r.Status(ctx, token)
		return err == nil && want(st)
	}) {
		t.Fatalf("servers' JWTs never as wanted: %+v (%v)", st, err)
	}
	return st
}

func allCurrent(st Status) bool { return len(st.NotCurrent()) == 0 }

// TestPushReachesEveryServerAndNothingElse holds a push on a cluster: each server answers
// and applies it, in place (no server reloads), a successor in the same second still wins,
// OTHER's account and user are untouched, and a JWT without JetStream never leaves.
func TestPushReachesEveryServerAndNothingElse(t *testing.T) {
	t.Parallel()
	m := startMesh(t, opmode.ClusterOptions{})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	others := map[string]*nats.Conn{}
	for _, srv := range m.c.Servers {
		others[srv.Name] = m.c.ConnectOther(srv)
	}
	otherBefore, err := m.r.held(ctx, m.c.Operator.Other)
	if err != nil || len(otherBefore) != 3 {
		t.Fatalf("OTHER's JWT on each server: %+v (%v)", otherBefore, err)
	}
	loaded := map[string]time.Time{}
	for _, srv := range m.c.Servers {
		if loaded[srv.Name], err = srv.ConfigLoadTime(); err != nil {
			t.Fatal(err)
		}
	}
	// Every account JWT pushed, as the servers receive it.
	watch, err := m.r.Conn.SubscribeSync("$SYS.REQ.ACCOUNT.*.CLAIMS.UPDATE")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.r.Conn.Flush(); err != nil {
		t.Fatal(err)
	}

	noJS, err := jwt.NewAccountClaims(m.acc.PublicKey).Encode(m.opKey)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := m.r.Push(ctx, noJS); !errors.Is(err, ErrNoJetStream) || len(res.Replies) != 0 {
		t.Fatalf("a push without JetStream: %+v, %v; want %v and nothing sent", res, err, ErrNoJetStream)
	}

	first, err := m.acc.Encode(m.opKey, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.r.Push(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	want := []PushReply{{"n1", Stored, ""}, {"n2", Stored, ""}, {"n3", Stored, ""}}
	if !slices.Equal(res.Replies, want) || res.Err() != nil {
		t.Fatalf("push replies %+v (%v); want %+v", res.Replies, res.Err(), want)
	}
	sent, err := watch.NextMsgWithContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(sent.Data) != first {
		t.Fatalf("the first JWT on the wire is not the first pushed: the refused one was sent (%q)", sent.Data)
	}

	m.loadEverywhere(t)
	m.waitForStatus(t, ctx, first, allCurrent)

	// A successor in the same second as the JWT it replaces: its iat moves on regardless,
	// and every server takes it.
	second, err := m.acc.Encode(m.opKey, first, time.Unix(decodeAccount(t, first).IssuedAt, 0))
	if err != nil {
		t.Fatal(err)
	}
	if got, prev := decodeAccount(t, second).IssuedAt, decodeAccount(t, first).IssuedAt; got != prev+1 {
		t.Fatalf("iat %d after %d in the same second", got, prev)
	}
	if res, err := m.r.Push(ctx, second); err != nil || res.Err() != nil {
		t.Fatalf("push: %v %v", err, res.Err())
	}
	st, err := m.r.Status(ctx, second)
	if err != nil || !allCurrent(st) {
		t.Fatalf("after a push answered by every server, the servers hold %+v (%v)", st, err)
	}
	// Compared with a JWT newer than any pushed, every server is behind.
	third, err := m.acc.Encode(m.opKey, second, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st, err := m.r.Status(ctx, third); err != nil || !slices.Equal(st.Behind(), m.c.Names()) {
		t.Errorf("compared with an unpushed successor, behind: %v (%+v, %v); want every server", st.Behind(), st, err)
	}

	otherAfter, err := m.r.held(ctx, m.c.Operator.Other)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range m.c.Names() {
		if otherAfter[name].token == "" || otherAfter[name].token != otherBefore[name].token {
			t.Errorf("OTHER's JWT on %s changed across the pushes:\n%s\n%s", name, otherBefore[name].token, otherAfter[name].token)
		}
	}
	for name, nc := range others {
		if !nc.IsConnected() {
			t.Errorf("OTHER's user on %s was disconnected by the pushes: %v", name, nc.LastError())
		} else if err := nc.FlushTimeout(30 * time.Second); err != nil {
			t.Errorf("OTHER's user on %s: %v", name, err)
		}
	}
	for _, srv := range m.c.Servers {
		at, err := srv.ConfigLoadTime()
		if err != nil {
			t.Fatal(err)
		}
		if !at.Equal(loaded[srv.Name]) {
			t.Errorf("%s's config_load_time moved from %s to %s across the pushes: it reloaded", srv.Name, loaded[srv.Name], at)
		}
	}

	// An account JWT signed by a key this operator does not list passes every check the
	// sender can make, and each server answers that it stored it; none applies it.
	stranger, _ := newKey(t, nkeys.CreateOperator)
	foreign, err := m.acc.Encode(stranger, second, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if res, err := m.r.Push(ctx, foreign); err != nil || res.Err() != nil {
		t.Fatalf("a push of a JWT from a key the operator does not list: %v %v; the servers answered 200 when this test was written", err, res.Err())
	}
	if st, err := m.r.Status(ctx, foreign); err != nil || !slices.Equal(st.Behind(), m.c.Names()) {
		t.Errorf("after a foreign-signed push, behind: %v (%+v, %v); want every server, still on the JWT before", st.Behind(), st, err)
	}
}

// TestMintedUserGetsExactlyItsGrants logs in with creds MintUser made and finds one subject
// allowed and one denied each way, and a user granted nothing denied everything.
func TestMintedUserGetsExactlyItsGrants(t *testing.T) {
	t.Parallel()
	m := startMesh(t, opmode.ClusterOptions{})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	m.push(t, ctx, "")
	srv := m.c.Servers[1]

	// The observer is signed by the account's own key, the user by its signing key.
	observerCreds, err := m.acc.MintUser(m.accKey, "observer", Grants{Publish: []string{"mesh.in"}, Subscribe: []string{"mesh.>"}})
	if err != nil {
		t.Fatal(err)
	}
	observer := m.connect(t, srv, observerCreds)
	seen, err := observer.SubscribeSync("mesh.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := observer.Flush(); err != nil {
		t.Fatal(err)
	}

	violations := make(chan error, 10)
	user := m.connect(t, srv, m.mint(t, "one.telegram", Grants{Publish: []string{"mesh.out"}, Subscribe: []string{"mesh.in"}}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }), nats.PermissionErrOnSubscribe(true))
	in, err := user.SubscribeSync("mesh.in")
	if err != nil {
		t.Fatal(err)
	}
	denied, err := user.SubscribeSync("mesh.other")
	if err != nil {
		t.Fatal(err)
	}
	if err := user.Publish("mesh.denied", []byte("denied")); err != nil {
		t.Fatal(err)
	}
	if err := user.Publish("mesh.out", []byte("allowed")); err != nil {
		t.Fatal(err)
	}
	if err := user.Flush(); err != nil {
		t.Fatal(err)
	}
	// Published in this order on one connection, the denied message would arrive first.
	msg, err := seen.NextMsgWithContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Subject != "mesh.out" {
		t.Errorf("the observer first got %s %q; want the allowed mesh.out", msg.Subject, msg.Data)
	}
	waitForViolation(t, ctx, violations, 2) // the denied subscription and the denied publish
	if _, err := denied.NextMsg(time.Millisecond); !errors.Is(err, nats.ErrPermissionViolation) {
		t.Errorf("the subscription to mesh.other: %v; want %v", err, nats.ErrPermissionViolation)
	}

	if err := observer.Publish("mesh.in", []byte("to the user")); err != nil {
		t.Fatal(err)
	}
	if msg, err := in.NextMsgWithContext(ctx); err != nil || string(msg.Data) != "to the user" {
		t.Errorf("the allowed subscription: %v, %v", msg, err)
	}

	nobody := m.connect(t, srv, m.mint(t, "nobody", Grants{}), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	if _, err := nobody.SubscribeSync("mesh.in"); err != nil {
		t.Fatal(err)
	}
	if err := nobody.Publish("mesh.in", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := nobody.Flush(); err != nil {
		t.Fatal(err)
	}
	waitForViolation(t, ctx, violations, 2)
}

func waitForViolation(t *testing.T, ctx context.Context, errs <-chan error, n int) {
	t.Helper()
	for range n {
		select {
		case err := <-errs:
			if !errors.Is(err, nats.ErrPermissionViolation) {
				t.Errorf("error %v; want a permissions violation", err)
			}
		case <-ctx.Done():
			t.Fatal("the server reported no permissions violation")
		}
	}
}

// TestStoppedServerIsNamedAndCatchesUp stops a server during a push: the push names it as not
// answering, and once it runs again its resolver fetches the JWT from a peer within its
// interval, with no push.
func TestStoppedServerIsNamedAndCatchesUp(t *testing.T) {
	t.Parallel()
	m := startMesh(t, opmode.ClusterOptions{ResolverInterval: "2s"})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	first := m.push(t, ctx, "")
	m.loadEverywhere(t)
	n3 := m.c.Servers[2]
	m.c.Stop(n3)

	second := m.pushWithoutN3(t, ctx, first)
	m.c.Start(n3)
	m.loadEverywhere(t)
	start := time.Now()
	m.waitForStatus(t, ctx, second, allCurrent)
	t.Logf("n3 caught up %s after it was loaded", time.Since(start).Round(time.Millisecond))
}

// TestRestartedServerIsBehindUntilTheNextPush holds what a resolver that syncs rarely does: a
// server started again serves the JWT it held (there is no sync at start-up), Status names it
// behind, and the next push brings it level.
func TestRestartedServerIsBehindUntilTheNextPush(t *testing.T) {
	t.Parallel()
	m := startMesh(t, opmode.ClusterOptions{ResolverInterval: "1h"})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	first := m.push(t, ctx, "")
	m.loadEverywhere(t)
	n3 := m.c.Servers[2]
	m.c.Stop(n3)
	second := m.pushWithoutN3(t, ctx, first)
	m.c.Start(n3)
	m.loadEverywhere(t)

	st, err := m.r.Status(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Behind(), []string{"n3"}) || !slices.Equal(st.NotCurrent(), []string{"n3"}) {
		t.Fatalf("after n3 restarted, behind %v, not current %v (%+v); want n3 alone", st.Behind(), st.NotCurrent(), st)
	}
	third := m.push(t, ctx, second)
	m.waitForStatus(t, ctx, third, allCurrent)
}

// pushWithoutN3 pushes the successor of previous while n3 is down, and checks that the result
// names n3, and only n3, as not answering.
func (m *liveMesh) pushWithoutN3(t *testing.T, ctx context.Context, previous string) string {
	t.Helper()
	token, err := m.acc.Encode(m.opKey, previous, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	r := m.r
	r.Wait = 10 * time.Second // how long n3's silence takes to count as no answer
	res, err := r.Push(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	want := []PushReply{{"n1", Stored, ""}, {"n2", Stored, ""}, {"n3", NoAnswer, ""}}
	if !slices.Equal(res.Replies, want) || !errors.Is(res.Err(), ErrPushIncomplete) {
		t.Fatalf("a push with n3 down: %+v (%v); want %+v", res.Replies, res.Err(), want)
	}
	t.Logf("with n3 down: %v", res.Err())
	st, err := r.Status(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.NotCurrent(), []string{"n3"}) || st[2].State != Unanswered {
		t.Fatalf("with n3 down, status %+v; want n3 alone unanswered", st)
	}
	return token
}

// TestRevokedUserIsDisconnectedOnEveryServer connects one user to each server, revokes it, and
// finds every connection closed with the revocation, and another user untouched.
func TestRevokedUserIsDisconnectedOnEveryServer(t *testing.T) {
	t.Parallel()
	m := startMesh(t, opmode.ClusterOptions{})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	first := m.push(t, ctx, "")
	revoked := m.mint(t, "one.telegram", Grants{Subscribe: []string{"mesh.in"}})
	kept := m.mint(t, "two.shop", Grants{Subscribe: []string{"mesh.in"}})
	// Each connection's errors, by server: the default handler would only print them.
	errs := map[string]chan error{}
	for _, srv := range m.c.Servers {
		ch := make(chan error, 10)
		errs[srv.Name] = ch
		m.connect(t, srv, revoked, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { ch <- err }))
	}
	other := m.connect(t, m.c.Servers[0], kept)
	counts, err := m.r.UserConnections(ctx, m.acc.PublicKey, revoked.UserKey)
	if err != nil || len(counts) != 3 || counts["n1"] != 1 || counts["n2"] != 1 || counts["n3"] != 1 {
		t.Fatalf("the user's connections before: %v (%v); want one on each server", counts, err)
	}

	token, res, err := m.r.RevokeUser(ctx, m.acc, m.opKey, first, revoked.UserKey, time.Now())
	if err != nil {
		t.Fatalf("revoking: %v (%+v)", err, res)
	}
	if _, ok := decodeAccount(t, token).Revocations[revoked.UserKey]; !ok {
		t.Fatalf("the JWT pushed does not revoke %s", revoked.UserKey)
	}
	for name, ch := range errs {
		select {
		case err := <-ch:
			if !errors.Is(err, nats.ErrAuthRevoked) {
				t.Errorf("the revoked user's connection to %s got %v; want %v", name, err, nats.ErrAuthRevoked)
			}
		case <-ctx.Done():
			t.Fatalf("the revoked user's connection to %s was never told it was revoked", name)
		}
	}
	if !other.IsConnected() {
		t.Errorf("another user was disconnected: %v", other.LastError())
	}
	for _, srv := range m.c.Servers {
		kp, _ := jwt.ParseDecoratedUserNKey(revoked.File)
		seed, _ := kp.Seed()
		if nc, err := nats.Connect(srv.URL, nats.UserJWTAndSeed(revoked.JWT, string(seed)), nats.NoReconnect()); err == nil {
			nc.Close()
			t.Errorf("the revoked user logged in to %s again", srv.Name)
		}
	}
	m.waitForStatus(t, ctx, token, allCurrent)
}
