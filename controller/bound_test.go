package controller

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/jsapi"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
	"github.com/meshbus/meshctl/wire"
)

// CONTROL is bounded per subject: a node that files more reports than the bound while the
// controller does not take them loses its oldest, not another node's, and not its own enrolment
// request; the controller then records the newest report it filed.
func TestTheControlQueueKeepsANodesLatestWithinTheBound(t *testing.T) {
	t.Parallel()
	f := startStopped(t, twoNodes)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()

	one := f.join(render.NodeUser("one"))
	const filed = render.ControlPerSubject + 4
	// Node one was declared each generation it reports; node two none, so its report is let
	// go when taken — but taken, not crowded out.
	enrolAndDeclare(t, f, "one", filed)
	for g := uint64(1); g <= filed; g++ {
		f.report(one, "one", wire.Report{Generation: g})
	}
	f.report(f.join(render.NodeUser("two")), "two", wire.Report{Generation: 7})
	ident := f.join(render.EnrolUser("two"))
	pub, _, err := wire.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	req, _ := json.Marshal(wire.EnrolRequest{Reply: render.Inbox(render.EnrolUser("two")) + ".bound", Key: pub})
	if _, err := ident.Publish(ctx, render.EnrolSubject("two"), req); err != nil {
		t.Fatal(err)
	}

	js, err := jetstream.New(f.ctrl.probe(t, f.bus.URL()).Conn)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, render.StreamControl)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("mesh.control.>"))
	if err != nil {
		t.Fatal(err)
	}
	counts := info.State.Subjects
	if got := counts[render.ReportSubject("one")]; got != render.ControlPerSubject {
		t.Errorf("CONTROL keeps %d of node one's %d reports, want the bound of %d", got, filed, render.ControlPerSubject)
	}
	if counts[render.ReportSubject("two")] != 1 || counts[render.EnrolSubject("two")] != 1 {
		t.Errorf("CONTROL holds %v: node two's report and enrolment request must not give way to node one's reports", counts)
	}
	// The oldest went: the first report of node one still queued is the fifth it filed.
	first, err := s.GetMsg(ctx, info.State.FirstSeq)
	if err != nil {
		t.Fatal(err)
	}
	var r wire.Report
	if err := json.Unmarshal(first.Data, &r); err != nil || first.Subject != render.ReportSubject("one") || r.Generation != filed-render.ControlPerSubject+1 {
		t.Errorf("the oldest message queued is %s %+v, want node one's report of generation %d", first.Subject, r, filed-render.ControlPerSubject+1)
	}

	// The reports are taken before the description is handed over, so that no declaration to
	// node one supersedes its newest report first; the enrolment waits for the description.
	f.run()
	f.waitEvent(0, func(e Event) bool { return e.Kind == KindReport && e.Node == "two" })
	f.waitEvent(0, func(e Event) bool {
		return e.Kind == KindReport && e.Node == "one" && strings.HasPrefix(e.Settle.Reason, "recorded")
	})
	f.ctrl.Mesh(f.mesh)
	// Polled on the connection opened before: enrolling node two reloads the bus, and a login
	// during a reload can be cut off.
	testwait.Until(t, "CONTROL is emptied", func() bool {
		info, err := s.Info(ctx)
		return err == nil && info.State.Msgs == 0
	})
	got := map[string]uint64{}
	for _, r := range f.reports() {
		got[r.Node] = r.Generation
	}
	if got["one"] != filed || len(got) != 1 {
		t.Errorf("the store recorded the reports %v, want node one's newest (%d) alone", got, filed)
	}
	enrolled, err := f.store.Enrolments(ctx)
	if err != nil || !slices.ContainsFunc(enrolled, func(e state.Enrolment) bool { return e.Node == "two" }) {
		t.Errorf("enrolments %+v (%v), want node two's request taken", enrolled, err)
	}
}

// A bus whose CONTROL predates the bound is brought to it in place: the plan updates the stream,
// it does not replace it (which would drop every report and enrolment request queued), and
// what it queued beyond the bound goes, oldest first.
func TestTheControlBoundIsAnUpdateInPlace(t *testing.T) {
	t.Parallel()
	f := startStopped(t, twoNodes)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	api, err := jsapi.New(f.ctrl.probe(t, f.bus.URL()).Conn)
	if err != nil {
		t.Fatal(err)
	}
	desired := render.Derive(f.mesh)
	var unbounded jetstream.StreamConfig
	for _, s := range desired.Streams {
		if s.Name == render.StreamControl {
			unbounded = s
		}
	}
	unbounded.MaxMsgsPerSubject = -1
	if err := api.UpdateStream(ctx, unbounded); err != nil {
		t.Fatalf("taking CONTROL back to no bound: %v", err)
	}
	one := f.join(render.NodeUser("one"))
	const filed = render.ControlPerSubject + 3
	for g := uint64(1); g <= filed; g++ {
		f.report(one, "one", wire.Report{Generation: g})
	}

	hashes, err := f.store.Hashes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	live, err := reconcile.ReadLive(ctx, api, f.bus.AccountsFile(), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := plan.Compute(plan.TargetOf(desired, hashes), live, plan.Options{})
	var found bool
	for _, c := range p.Changes {
		if c.Kind != plan.KindStream || c.Name != render.StreamControl {
			continue
		}
		found = true
		if c.Action != plan.Update || c.Risk != plan.RiskNone {
			t.Errorf("CONTROL: %s (risk %q), want an update in place", c.Action, c.Risk)
		}
	}
	if !found {
		t.Fatalf("the plan does not bound CONTROL: %+v", p.Changes)
	}
	if _, err := reconcile.Apply(ctx, p, api, accounts.File{Path: f.bus.AccountsFile(), Reloader: f.bus.Reloader(),
		Target: busclient.Target{URL: f.bus.URL()}, StateDir: f.store.Dir()}, nil); err != nil {
		t.Fatal(err)
	}
	if n := f.controlMessages(); n != render.ControlPerSubject {
		t.Errorf("CONTROL holds %d of the %d reports after the update, want the bound of %d", n, filed, render.ControlPerSubject)
	}
	enrolAndDeclare(t, f, "one", filed) // each generation it reports was declared to it
	f.run()
	testwait.Until(t, "CONTROL is emptied", func() bool { return f.controlMessages() == 0 })
	if r := f.reports(); len(r) != 1 || r[0].Generation != filed {
		t.Errorf("the store recorded %+v, want node one's newest report (%d)", r, filed)
	}
}
