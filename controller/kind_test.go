package controller

import (
	"context"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/jsapi"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/wire"
)

// A reconcile that turns the CONTROL consumer into the other kind (bus.consumers changed, so
// the consumer was replaced) leaves the controller taking reports: handed the new mesh, it binds
// the new consumer. Without that it would pull from a consumer that pushes, or wait on a deliver
// subject nothing delivers to, and every report would wait in CONTROL.
func TestTheControllerRebindsWhenTheConsumerKindChanges(t *testing.T) {
	t.Parallel()
	f := start(t, twoNodes) // pull: the default
	f.ctrl.Mesh(f.mesh)
	node := f.join(render.NodeUser("one"))
	isReport := func(e Event) bool { return e.Kind == KindReport }
	f.report(node, "one", wire.Report{})
	_, next := f.waitEvent(0, isReport)

	for _, kind := range []string{"push", "pull"} {
		f.write("bus:\n  consumers: " + kind + "\n" + twoNodes)
		f.apply()
		f.ctrl.Mesh(f.mesh)
		f.report(node, "one", wire.Report{})
		_, next = f.waitEvent(next, isReport)
	}
}

// apply brings the bus to f.mesh, as watch's reconcile would before handing the mesh over.
func (f *fixture) apply() {
	f.t.Helper()
	ctx := context.Background()
	password, err := f.store.ControllerPassword(ctx, bcrypt.MinCost)
	if err != nil {
		f.t.Fatal(err)
	}
	conn, err := busclient.Dial(ctx, busclient.Target{URL: f.bus.URL()}, busclient.Credential{User: render.ControllerUser, Password: password})
	if err != nil {
		f.t.Fatal(err)
	}
	defer conn.Close()
	api, err := jsapi.New(conn.Conn)
	if err != nil {
		f.t.Fatal(err)
	}
	live, err := reconcile.ReadLive(ctx, api, f.bus.AccountsFile(), f.mesh.Holding)
	if err != nil {
		f.t.Fatal(err)
	}
	hashes, err := f.store.Hashes(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	p := plan.Compute(plan.TargetOf(render.Derive(f.mesh), hashes), live, plan.Options{})
	if p.Blocked() {
		f.t.Fatalf("the plan is blocked: %+v", p.Changes)
	}
	if _, err := reconcile.Apply(ctx, p, api, accounts.File{Path: f.bus.AccountsFile(), Reloader: f.bus.Reloader(),
		Target: busclient.Target{URL: f.bus.URL()}, StateDir: f.store.Dir()}, nil); err != nil {
		f.t.Fatalf("applying: %v", err)
	}
}
