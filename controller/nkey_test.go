package controller

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/render"
)

// publicKeyOf is the public key of a user's nkey seed.
func publicKeyOf(t *testing.T, seed string) string {
	t.Helper()
	kp, err := nkeys.FromSeed([]byte(seed))
	if err != nil {
		t.Fatalf("not an nkey seed: %v", err)
	}
	pub, err := kp.PublicKey()
	if err != nil || !nkeys.IsValidPublicUserKey(pub) {
		t.Fatalf("not a user's seed: %v", err)
	}
	return pub
}

// With bus.auth: nkey the controller mints nkeys where it minted passwords: the enrolling node
// is answered with its own seed sealed to its key, the store keeping only the public key; each
// instance is declared its seed, sealed; each logs in with its seed, and a seed rotated out or
// used up is refused. No seed appears in the declaration or the controller's log.
func TestAnNkeyMeshEnrolsAndDeclaresSealedSeeds(t *testing.T) {
	t.Parallel()
	f := start(t, "bus:\n  auth: nkey\n"+twoNodes)
	f.ctrl.Mesh(f.mesh)
	pub, priv, nm, _ := f.enrolled("one")
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if nm.User != render.NodeUser("one") || nm.Password != "" || !strings.HasPrefix(nm.Seed, "SU") {
		t.Fatalf("the node's membership is %v: want node.one with a seed and no password", nm)
	}
	hashes, _ := f.store.Hashes(ctx)
	if hashes["node.one"] != publicKeyOf(t, nm.Seed) {
		t.Errorf("the store keeps %q for node.one, not its seed's public key", hashes["node.one"])
	}
	node := f.joinAs(nm)
	enrol := host.Membership{Address: f.bus.URL(), User: render.EnrolUser("one"), Seed: f.passwords[render.EnrolUser("one")]}
	// Refused as unauthorized; a refusal cut short by the socket closing is tried again.
	testwait.Until(t, "the used enrolment seed refused as unauthorized", func() error {
		h, err := host.Join(ctx, enrol)
		if err == nil {
			h.Close()
			t.Fatal("the used enrolment seed still joins")
		}
		if errors.Is(err, nats.ErrAuthorization) {
			return nil
		}
		return err
	})

	d1 := takeDeclaration(t, node, "one", 0)
	_, sm := f.instance(d1, "one.shop", pub, priv)
	if sm.Password != "" || !strings.HasPrefix(sm.Seed, "SU") {
		t.Fatalf("one.shop's declared membership carries no seed, or a password")
	}
	hashes, _ = f.store.Hashes(ctx)
	if hashes["one.shop"] != publicKeyOf(t, sm.Seed) {
		t.Errorf("the store keeps %q for one.shop, not its seed's public key", hashes["one.shop"])
	}
	if _, err := f.joinAs(sm).Publish(ctx, render.ModuleEvent("shop", "order.placed"), []byte("{}")); err != nil {
		t.Fatalf("one.shop cannot emit with its declared seed: %v", err)
	}
	if bytes.Contains(mustJSON(d1), []byte(sm.Seed)) {
		t.Fatal("the declaration carries a plaintext seed")
	}

	// Rotated (`credentials rotate` revokes it): declared afresh, the old seed refused.
	if _, err := f.store.Revoke(ctx, "one.shop"); err != nil {
		t.Fatal(err)
	}
	if err := f.sync(ctx); err != nil {
		t.Fatal(err)
	}
	f.ctrl.Mesh(f.mesh)
	d2 := takeDeclaration(t, node, "one", d1.Generation)
	_, after := f.instance(d2, "one.shop", pub, priv)
	if after.Seed == sm.Seed || after.Seed == "" {
		t.Fatal("the rotated credential was declared with the old seed, or none")
	}
	f.joinAs(after)
	if _, err := host.Join(ctx, sm); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("the rotated-out seed still joins: %v", err)
	}
	f.noPassword(nm.Seed, sm.Seed, after.Seed, enrol.Seed)
}
