package controller

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/wire"
)

// stillJoins fails the test at once if the bus refuses m, and tries again while the bus only
// cuts the login off (a reload the controller asked for a moment earlier can).
func (f *fixture) stillJoins(m host.Membership) {
	f.t.Helper()
	testwait.Until(f.t, "joining as "+m.User, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		h, err := host.Join(ctx, m)
		cancel()
		if errors.Is(err, nats.ErrAuthorization) {
			f.t.Fatalf("the bus refuses %s's credential issued by hand: %v; the controller logged:\n%s", m.User, err, f.logs.String())
		}
		if err == nil {
			h.Close()
		}
		return err
	})
}

// A module's credential issued by hand before its node enrolled keeps working after the node
// enrols: the controller mints nothing for it and declares the instance by hand, without a
// membership, so the host given the credential is not locked out, and logs that once however
// often it declares the node. The other instances of the node are the agent's as before.
// Revoking the credential hands the instance to the agent: it is declared a fresh one.
func TestEnrolmentKeepsACredentialIssuedByHand(t *testing.T) {
	t.Parallel()
	f := start(t, twoNodes+"  - name: audit\n    on: [one]\n    emits: [checked]\n")
	ctx := context.Background()
	issued, err := f.store.Mint(ctx, []string{"one.shop"}, bcrypt.MinCost, "credentials issue")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.sync(ctx); err != nil {
		t.Fatal(err)
	}
	byHand := host.Membership{Address: f.bus.URL(), User: "one.shop", Password: issued["one.shop"]}
	f.stillJoins(byHand)
	before, _ := f.store.Hashes(ctx)

	f.ctrl.Mesh(f.mesh)
	pub, priv, nm, _ := f.enrolled("one")
	d := takeDeclaration(t, f.joinAs(nm), "one", 0)
	i := slices.IndexFunc(d.Instances, func(in wire.Instance) bool { return in.User == "one.shop" })
	if i < 0 {
		t.Fatalf("generation %d does not declare one.shop: %+v", d.Generation, d.Instances)
	}
	if len(d.Instances[i].Membership) != 0 || !d.Instances[i].ByHand {
		t.Errorf("one.shop, whose credential was issued by hand, is declared %+v; want by hand, without a membership", d.Instances[i])
	}
	_, audit := f.instance(d, "one.audit", pub, priv) // the agent's, as before
	f.joinAs(audit)

	// The declaration went out after the reload that made the node's credentials live.
	f.stillJoins(byHand)
	after, _ := f.store.Hashes(ctx)
	if after["one.shop"] != before["one.shop"] {
		t.Error("one.shop's credential issued by hand was replaced in the store")
	}
	if _, ok, err := Distributes(ctx, f.store, f.mesh, "one.shop"); ok || err != nil {
		t.Errorf("the controller says it hands out one.shop's credential issued by hand (%v)", err)
	}

	// A new generation for another reason keeps it so, and the log says it once.
	node := f.joinAs(nm)
	f.write(twoNodes + "  - name: audit\n    on: [one]\n    emits: [checked, done]\n")
	declaredOne := func(e Event) bool {
		return e.Kind == KindUnknown && e.Subject == "" && slices.Contains(e.Declared, "one")
	}
	_, from := f.waitEvent(0, declaredOne) // the pass that declared the first generation
	f.ctrl.Mesh(f.mesh)
	d2 := takeDeclaration(t, node, "one", d.Generation)
	if i := slices.IndexFunc(d2.Instances, func(in wire.Instance) bool { return in.User == "one.shop" }); i < 0 || !d2.Instances[i].ByHand {
		t.Fatalf("generation %d declares one.shop as %+v", d2.Generation, d2.Instances)
	}
	f.stillJoins(byHand)
	// The pass that declared it is over, its log written.
	f.waitEvent(from, declaredOne)
	if n := strings.Count(f.logs.String(), "kept a credential issued by hand"); n != 1 {
		t.Errorf("the log says %d times that one.shop's credential issued by hand was kept, want once:\n%s", n, f.logs.String())
	}

	// Revoking it hands the instance to the agent: the next declaration carries one.shop a
	// fresh membership, and the one issued by hand no longer logs in.
	if _, err := f.store.Revoke(ctx, "one.shop"); err != nil {
		t.Fatal(err)
	}
	if err := f.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := Distributes(ctx, f.store, f.mesh, "one.shop"); !ok || err != nil {
		t.Errorf("once revoked, the controller does not say it hands out one.shop's credential (%v)", err)
	}
	d3 := takeDeclaration(t, node, "one", d2.Generation)
	shop, sm := f.instance(d3, "one.shop", pub, priv)
	if shop.ByHand {
		t.Errorf("generation %d still declares one.shop by hand", d3.Generation)
	}
	f.joinAs(sm)
	testwait.Until(t, "the revoked credential issued by hand refused", func() bool {
		jctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		h, err := host.Join(jctx, byHand)
		if err == nil {
			h.Close()
			t.Fatal("the revoked credential issued by hand still joins")
		}
		return errors.Is(err, nats.ErrAuthorization)
	})
	f.noPassword(issued["one.shop"], nm.Password, audit.Password, sm.Password)
}
