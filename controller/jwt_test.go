package controller

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/state"
	"github.com/meshbus/meshctl/wire"
)

// In a jwt mesh a JWT reissued for the key the agent holds the seed of is declared anew, the
// sealed membership kept: the digest changes and the instance carries the new JWT, with nothing
// minted. A new key for an instance (revoked, or enrolled again) is minted, and an instance
// issued by hand is declared no JWT.
func TestAReissuedJWTIsDeclaredForTheKeyTheAgentHolds(t *testing.T) {
	declared := func(jwts map[string]string) wire.Declaration {
		d := wire.Declaration{Node: "one", Instances: []wire.Instance{{User: "one.a"}, {User: "one.b"}, {User: "one.c", ByHand: true}}}
		for i := range d.Instances {
			d.Instances[i].JWT = jwts[d.Instances[i].User]
		}
		return d
	}
	was := declared(map[string]string{"one.a": "jwt-a1", "one.b": "jwt-b1"})
	last := state.Declared{Generation: 3, Digest: was.Digest(), Credentials: map[string]state.DeclaredCredential{
		"one.a": {Hash: "UA", Sealed: []byte("sealed a")}, "one.b": {Hash: "UB", Sealed: []byte("sealed b")}}}
	byHand := jwtCredential("UC", "jwt-c")

	same := map[string]string{"one.a": jwtCredential("UA", "jwt-a1"), "one.b": jwtCredential("UB", "jwt-b1"), "one.c": byHand}
	d := declared(nil)
	if c := changeFor(true, last, same, &d); c.Changed() || !slices.Equal(c.Keep, []string{"one.a", "one.b"}) {
		t.Errorf("nothing changed in the store: %+v; want both kept and nothing declared", c)
	}

	reissued := map[string]string{"one.a": jwtCredential("UA", "jwt-a2"), "one.b": jwtCredential("UB", "jwt-b1"), "one.c": byHand}
	d = declared(nil)
	c := changeFor(true, last, reissued, &d)
	if !c.DigestChanged || c.ChangesCredentials() || !slices.Equal(c.Keep, []string{"one.a", "one.b"}) {
		t.Errorf("a JWT reissued for the same key: %+v; want a new digest, both kept, nothing minted", c)
	}
	if d.Instances[0].JWT != "jwt-a2" || d.Instances[1].JWT != "jwt-b1" || d.Instances[2].JWT != "" {
		t.Errorf("declared JWTs %q, %q, %q; want jwt-a2, jwt-b1 and none for the instance issued by hand",
			d.Instances[0].JWT, d.Instances[1].JWT, d.Instances[2].JWT)
	}

	newKey := map[string]string{"one.a": jwtCredential("UA", "jwt-a1"), "one.b": jwtCredential("UB2", "jwt-b2"), "one.c": byHand}
	d = declared(nil)
	if c := changeFor(true, last, newKey, &d); !slices.Equal(c.Mint, []string{"one.b"}) || !slices.Equal(c.Keep, []string{"one.a"}) {
		t.Errorf("a new key for one.b: %+v; want one.b minted, one.a kept", c)
	}
}

// In a jwt mesh an instance's user issued by hand stays the operator's when its node enrolled,
// as a password does: Distributes reads who issued it from the account's users.
func TestTheControllerDistributesOnlyTheUsersItMintsInAJWTMesh(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := load(t, `bus:
  auth: jwt
  url: nats://127.0.0.1:4222
  operator: {store: /nonexistent, account: MESH, system_creds: sys.creds}
nodes: [{name: one}]
modules:
  - {name: shop, on: [one], emits: [order.placed]}
  - {name: audit, on: [one], emits: [checked]}
`)
	st, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for user, op := range map[string]string{"enrol.one": "credentials issue", "one.shop": "credentials issue"} {
		if err := st.IssueJWTUser(ctx, state.JWTUser{Principal: user, UserKey: "U" + user, JWT: "jwt", IssuedAt: time.Now(), Operation: op}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.EnrolNode(ctx, state.NodeEnrolment{Node: "one", EnrolPrincipal: "enrol.one", NodePrincipal: "node.one", PublicKey: []byte("key"),
		JWT: &state.JWTUser{UserKey: "UNODE", JWT: "jwt", IssuedAt: time.Now()}}, 0); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := Distributes(ctx, st, m, "one.shop"); ok || err != nil {
		t.Errorf("the shop's user issued by hand: distributed %v (%v); want it left to the operator", ok, err)
	}
	if node, ok, err := Distributes(ctx, st, m, "one.audit"); !ok || node != "one" || err != nil {
		t.Errorf("the audit on enrolled node one: %s, %v (%v); want the controller to hand it out", node, ok, err)
	}
}

// On the embedded bus in operator mode the description names no operator: the controller signs
// its nodes' users with the one meshctl keeps in the state directory, as apply does.
func TestTheControllerSignsWithTheOperatorKeptInTheStateDirectory(t *testing.T) {
	t.Parallel()
	m := load(t, "bus:\n  auth: jwt\nnodes: [{name: one}]\n")
	st, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l := &loop{Controller: &Controller{cfg: Config{Store: st}}, mesh: m}
	if _, err := l.account(); err == nil {
		t.Fatal("an account with no operator kept yet")
	}
	made, err := accounts.MakeOperator(filepath.Join(st.Dir(), accounts.KeptOperatorDir), "MESHCTL", "")
	if err != nil {
		t.Fatal(err)
	}
	j, err := l.account()
	if err != nil {
		t.Fatal(err)
	}
	if j.Operator.PublicKey != made.PublicKey || j.Operator.Account.PublicKey != made.Account.PublicKey {
		t.Fatalf("the controller read operator %s, account %s; want %s, %s", j.Operator.PublicKey, j.Operator.Account.PublicKey, made.PublicKey, made.Account.PublicKey)
	}
}
