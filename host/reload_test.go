package host_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/host/hosttest"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// ackPending is how many of a consumer's deliveries await an ack, read as the controller.
func ackPending(t *testing.T, ctx context.Context, b *hosttest.Mesh, stream, consumer string) int {
	t.Helper()
	c, err := b.MustJoin(t, ctl).JetStream().Consumer(ctx, stream, consumer)
	if errors.Is(err, jetstream.ErrNotPullConsumer) {
		var pc jetstream.PushConsumer
		if pc, err = b.MustJoin(t, ctl).JetStream().PushConsumer(ctx, stream, consumer); err == nil {
			return pc.CachedInfo().NumAckPending
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return c.CachedInfo().NumAckPending
}

// A reload that changes nothing for a connected principal leaves its deliveries in flight
// acknowledgeable: the server forgets, on every reload, which replies allow_responses allowed
// (docs/nats-behaviour.md, "Reload"), and the explicit $JS.ACK grant is what still lets the ack
// through.
func TestAnAckAfterAReloadTakes(t *testing.T) {
	t.Parallel()
	b := hosttest.Start(t, matrixMesh)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	audit := b.MustJoin(t, "two.audit")
	d := newDeliveries()
	cc, err := audit.Events(ctx, model.Instance{Node: "two", Module: "audit"}, d.handle)
	if err != nil {
		t.Fatal(err)
	}
	defer stop(audit, cc)
	order := token("order")
	if _, err := b.MustJoin(t, "two.shop").Publish(ctx, orderPlaced, order); err != nil {
		t.Fatal(err)
	}
	m, err := d.await(ctx, order, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := ackPending(t, ctx, b, render.StreamEvents, "two_audit"); n != 1 {
		t.Fatalf("%d deliveries await an ack before the reload, want the one in flight", n)
	}
	if err := b.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if err := audit.Ack(ctx, m); err != nil {
		t.Fatalf("the ack after a reload was not taken: %v", err)
	}
	if n := ackPending(t, ctx, b, render.StreamEvents, "two_audit"); n != 0 {
		t.Fatalf("%d deliveries still await an ack after it was confirmed", n)
	}

	// And the counterfactual: a holder that serves a tool has allow_responses, which lets it ack
	// a delivery without the grant — until a reload.
	t.Run("allow_responses alone does not survive a reload", func(t *testing.T) {
		stream, worker := render.SeatStreamName(telegramSender), render.WorkerConsumer(telegramSender)
		p, _ := b.Desired.Principal("one.telegram")
		w := withheld{publish: true, grant: render.Grant{Subject: "$JS.ACK." + stream + "." + worker + ".>"}}
		for _, g := range p.Publish {
			if g.Subject == w.grant.Subject {
				w.grant = g
			}
		}
		if w.grant.Job == "" || !p.AllowResponses {
			t.Fatalf("one.telegram should have allow_responses and %s", w.grant.Subject)
		}
		less := slices.Clone(b.Desired.Principals)
		less[slices.IndexFunc(less, func(q render.Principal) bool { return q.User == p.User })] = w.from(p)
		b.Install(t, less)
		defer b.Install(t, b.Desired.Principals)

		holder := b.Dial(t, p.User)
		d := newDeliveries()
		cc, err := holder.Work(ctx, telegramSender, d.handle)
		if err != nil {
			t.Fatal(err)
		}
		defer stop(holder, cc)
		want, err := counterparts(ctx, b,
			published{"two.shop", sendWork, token("before")},
			published{"two.shop", sendWork, token("after")})
		if err != nil {
			t.Fatal(err)
		}
		before, err := d.await(ctx, want[0], nil)
		if err != nil {
			t.Fatal(err)
		}
		after, err := d.await(ctx, want[1], nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := holder.Ack(ctx, before); err != nil {
			t.Fatalf("before a reload, allow_responses should let the ack through: %v", err)
		}
		if err := b.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		err = holder.Ack(ctx, after)
		var v *busclient.PermissionError
		if !errors.As(err, &v) || !w.refuses(p.User, err) {
			t.Fatalf("after a reload, an ack without the grant: got %v, want it refused", err)
		}
	})
}

// The subjects host spells are the ones render derives: each is granted to the principal whose
// job it is, or kept by the stream render says keeps it.
func TestSubjectsMatchTheDerivation(t *testing.T) {
	t.Parallel()
	m, err := model.Load(matrixMesh)
	if err != nil {
		t.Fatal(err)
	}
	d := render.Derive(m)
	granted := func(user string, publish bool, subject string) bool {
		p, ok := d.Principal(user)
		if !ok {
			t.Fatalf("no principal %s", user)
		}
		gs := p.Subscribe
		if publish {
			gs = p.Publish
		}
		return slices.ContainsFunc(gs, func(g render.Grant) bool { return subjectMatches(g.Subject, subject) })
	}
	keptBy := func(subject string) string {
		for _, s := range d.Streams {
			if slices.ContainsFunc(s.Subjects, func(pattern string) bool { return subjectMatches(pattern, subject) }) {
				return s.Name
			}
		}
		return ""
	}
	enrol, _ := d.Principal(render.EnrolUser("one"))
	if len(enrol.Publish) != 1 || enrol.Publish[0].Subject != render.EnrolSubject("one") {
		t.Errorf("enrol.one may publish %v, host asks on %s", enrol.Publish, render.EnrolSubject("one"))
	}
	for _, c := range []struct {
		subject, user string
		publish       bool
		stream        string
	}{
		{render.EnrolSubject("one"), "enrol.one", true, render.StreamControl},
		{render.ReportSubject("one"), "node.one", true, render.StreamControl},
		{render.HeartbeatSubject("one"), "node.one", true, ""},
		{render.DeclareSubject("one"), "node.one", false, render.StreamNodes},
		{render.DeclareSubject("one"), ctl, true, render.StreamNodes},
		{render.AcceptSubject(telegramSender, "send"), "two.shop", true, render.SeatStreamName(telegramSender)},
		{render.AcceptSubject(telegramSender, "send"), "one.telegram", false, render.SeatStreamName(telegramSender)},
		{render.ModuleEvent("shop", "order.placed"), "two.shop", true, render.StreamEvents},
		{render.SeatEvent(telegramSender, "failed"), "one.telegram", true, render.StreamEvents},
		{render.ModuleTool("telegram", "status"), "one.telegram", false, ""},
		{render.SeatTool(telegramSender, "queue"), "one.telegram", false, ""},
	} {
		if !granted(c.user, c.publish, c.subject) {
			t.Errorf("%s is not granted %s (publish %v)", c.user, c.subject, c.publish)
		}
		if got := keptBy(c.subject); got != c.stream {
			t.Errorf("%s is kept by %q, want %q", c.subject, got, c.stream)
		}
	}
	for _, n := range d.Consumers {
		if n.Stream == render.StreamNodes && n.Config.FilterSubject != render.DeclareSubject(n.Name()) {
			t.Errorf("node %s's consumer filters %q, host says its declarations are on %s", n.Name(), n.Config.FilterSubject, render.DeclareSubject(n.Name()))
		}
	}
}
