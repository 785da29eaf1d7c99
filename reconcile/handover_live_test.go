package reconcile

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/backoff"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/wire"
)

// handoverMesh is quickMesh with a second claimant of seat mailer, alpha's courier, declared
// first so that it holds the seat; consumers is the mesh's bus.consumers.
func handoverMesh(consumers string) string {
	m := strings.Replace(quickMesh, "  - name: postman\n", "  - name: courier\n    on: [alpha]\n    claims: [mailer]\n  - name: postman\n", 1)
	return strings.Replace(m, "bus:\n", "bus:\n  consumers: "+consumers+"\n", 1)
}

// handedOver is that mesh with the seat handed to beta's postman.
func handedOver(consumers string) string {
	return handoverMesh(consumers) + "holders:\n  - seat: mailer\n    node: beta\n    module: postman\n"
}

// mailerAcks is what a holder of seat mailer acknowledges its work on.
var mailerAcks = "$JS.ACK." + render.SeatStreamName("mailer") + "." + render.WorkerConsumer("mailer") + ".>"

// A handover while the old holder is halfway through its work: it has taken ten pieces and
// acknowledged none, and ten more wait in the queue. The new holder takes the ten waiting at
// once; the old one, still running, finishes its ten and acknowledges them, which the server
// takes; and once the old holder's grace is over nothing is delivered again. Each of the
// twenty is done exactly once, pulled or pushed. When the grace is over (render.GraceOf: the
// ack wait, and with pull consumers the pull window), the plan takes the old holder's acknowledgements away and nothing else, the server refuses them
// from then on, and the bus is converged.
func TestAHandoverDoesEachPieceOfWorkOnce(t *testing.T) {
	t.Parallel()
	for _, consumers := range []string{"pull", "push"} {
		t.Run(consumers, func(t *testing.T) {
			t.Parallel()
			ctx := handoverContext(t)
			f := newFixture(t, handoverMesh(consumers))
			s := f.connect(ctx)
			pw := f.mint(ctx, "alpha.shop", "alpha.courier", "beta.postman")
			f.mustApply(ctx, s)
			shop := dialAs(ctx, t, s, "alpha.shop", pw)
			courier := joinAs(ctx, t, s, "alpha.courier", pw)
			postman := joinAs(ctx, t, s, "beta.postman", pw)

			// The courier takes the first ten and is still working on them when ten more come.
			send(t, shop, 0, 10)
			inHand := takeWork(ctx, t, courier, consumers, 10)
			send(t, shop, 10, 20)

			f.write(handedOver(consumers))
			res := f.mustApply(ctx, s)
			if len(res.Plan.Holders) != 1 || res.Plan.Holders[0].To.Module != "postman" {
				t.Fatalf("holder move: %+v", res.Plan.Holders)
			}
			courierChange := userChange(res.Plan, "alpha.courier")
			if slices.Contains(courierChange.PublishRemoved, mailerAcks) {
				t.Errorf("the handover takes the old holder's acknowledgements away at once: %+v", courierChange)
			}
			if !slices.Contains(courierChange.PublishRemoved, "$JS.API.CONSUMER.INFO."+render.SeatStreamName("mailer")+"."+render.WorkerConsumer("mailer")) {
				t.Errorf("the old holder may still bind the worker: %+v", courierChange)
			}

			// The new holder takes the ten waiting, at once, and nothing of the courier's.
			taken := takeWork(ctx, t, postman, consumers, 10)
			if got, want := bodies(taken), seq(10, 20); !slices.Equal(got, want) {
				t.Fatalf("the new holder took %v, want the ten queued %v", got, want)
			}
			ackAll(ctx, t, postman, taken)
			// The courier finishes its ten, and the server takes every acknowledgement.
			ackAll(ctx, t, courier, inHand)
			// During the grace nothing more is planned.
			f.mustConverge(ctx, s)

			// The grace ends: the bus plans the old holder's acknowledgements away and nothing
			// else, and from then on the server refuses them.
			p := graceEnds(ctx, t, f, s)
			want := plan.UserChange{User: "alpha.courier", Action: plan.Update, PublishRemoved: []string{mailerAcks}}
			if len(p.Changes) != 1 || len(p.Changes[0].Users) != 1 || !reflect.DeepEqual(p.Changes[0].Users[0], want) || len(p.Holders) != 0 {
				var b strings.Builder
				_ = p.Text(&b, false)
				t.Errorf("the end of the grace plans more than the old holder's acknowledgements:\n%s", b.String())
			}
			f.mustApply(ctx, s)
			// An acknowledgement of a delivery that never was: the server would ignore it, were it let in.
			ack := strings.TrimSuffix(mailerAcks, ">") + "1.999999.999999.1.0"
			err := courier.Check(ctx, func(context.Context) error { return courier.Conn().Publish(ack, nil) })
			var refused *busclient.PermissionError
			if !errors.As(err, &refused) || refused.Subject != ack {
				t.Errorf("after the grace the old holder's acknowledgement was not refused: %v", err)
			}
			// Every delivery's ack wait has passed: anything not acknowledged would now be
			// delivered again, to the new holder who asks for more.
			if again := takeNone(ctx, t, postman, consumers); len(again) > 0 {
				t.Errorf("delivered again after the grace: %v", bodies(again))
			}
			info, err := host.ConsumerInfo(ctx, f.js(s), render.SeatStreamName("mailer"), render.WorkerConsumer("mailer"))
			if err != nil {
				t.Fatal(err)
			}
			if info.NumAckPending != 0 || info.NumPending != 0 || info.NumRedelivered != 0 || info.Delivered.Consumer != 20 {
				t.Errorf("the worker: %d unacknowledged, %d pending, %d redelivered, %d deliveries; want 0, 0, 0, 20",
					info.NumAckPending, info.NumPending, info.NumRedelivered, info.Delivered.Consumer)
			}
			st, err := f.js(s).Stream(ctx, render.SeatStreamName("mailer"))
			if err != nil {
				t.Fatal(err)
			}
			if n := st.CachedInfo().State.Msgs; n != 0 {
				t.Errorf("%d pieces of work are still queued, to be done again", n)
			}
			if got := append(bodies(inHand), bodies(taken)...); !slices.Equal(got, seq(0, 20)) {
				t.Errorf("done: %v, want each of the twenty once", got)
			}
			f.mustConverge(ctx, s)
		})
	}
}

// graceEnds waits, planning again and again, for the plan that takes the old holder's
// acknowledgements of seat mailer away, and returns it.
func graceEnds(ctx context.Context, t *testing.T, f *fixture, s *Session) *plan.Plan {
	t.Helper()
	var p *plan.Plan
	var err error
	ok := backoff.Retry(ctx, backoff.Backoff{Min: 200 * time.Millisecond, Max: 2 * time.Second}, func() bool {
		p, err = s.Plan(ctx, f.mesh(), plan.Options{})
		return err != nil || slices.Contains(userChange(p, "alpha.courier").PublishRemoved, mailerAcks)
	})
	if err != nil || !ok {
		t.Fatalf("the old holder's grace never ended: %v", errors.Join(err, ctx.Err()))
	}
	return p
}

// handoverContext bounds a test that waits out a grace of up to a minute, on a busy machine.
func handoverContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func joinAs(ctx context.Context, t *testing.T, s *Session, user string, pw map[string]string) *host.Host {
	t.Helper()
	h, err := host.Join(ctx, wire.NewMembership(s.Target.ServerURLs(), s.Target.Fingerprint, user, pw[user], false))
	if err != nil {
		t.Fatalf("%s cannot join: %v", user, err)
	}
	t.Cleanup(h.Close)
	return h
}

// send sends the pieces of work numbered from to to, each its number as its body.
func send(t *testing.T, c *busclient.Conn, from, to int) {
	t.Helper()
	for _, b := range seq(from, to) {
		if err := c.Publish(render.AcceptSubject("mailer", "send"), []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
}

// takeWork takes n pieces of seat mailer's work as h without acknowledging them: pulled in one
// batch, or pushed to h until n came, when h stops taking more.
func takeWork(ctx context.Context, t *testing.T, h *host.Host, consumers string, n int) []jetstream.Msg {
	t.Helper()
	stream, worker := render.SeatStreamName("mailer"), render.WorkerConsumer("mailer")
	if consumers == "pull" {
		c, err := h.JetStream().Consumer(ctx, stream, worker)
		if err != nil {
			t.Fatalf("%s cannot bind the worker: %v", h.User(), err)
		}
		batch, err := c.Fetch(n, jetstream.FetchMaxWait(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var out []jetstream.Msg
		for m := range batch.Messages() {
			out = append(out, m)
		}
		if len(out) != n {
			t.Fatalf("%s took %d pieces of work, want %d: %v", h.User(), len(out), n, batch.Error())
		}
		return out
	}
	got := make(chan jetstream.Msg, 2*n)
	cc, err := h.Work(ctx, "mailer", func(m jetstream.Msg) { got <- m })
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.Msg
	for len(out) < n {
		select {
		case m := <-got:
			out = append(out, m)
		case <-ctx.Done():
			t.Fatalf("%s took %d pieces of work, want %d", h.User(), len(out), n)
		}
	}
	// Taking no more is the server's to know: until it has seen the subscription go, it pushes
	// what comes next to h, which would drop it.
	cc.Stop()
	ok := backoff.Retry(ctx, backoff.Backoff{Min: 10 * time.Millisecond, Max: time.Second}, func() bool {
		info, err := host.ConsumerInfo(ctx, h.JetStream(), stream, worker)
		return err == nil && !info.PushBound
	})
	if !ok {
		t.Fatalf("the server still pushes %s's work to %s", worker, h.User())
	}
	return out
}

// takeNone asks for more of seat mailer's work as h, and returns what came: pulled without
// waiting for more, or pushed until the server has been asked a round trip later.
func takeNone(ctx context.Context, t *testing.T, h *host.Host, consumers string) []jetstream.Msg {
	t.Helper()
	stream, worker := render.SeatStreamName("mailer"), render.WorkerConsumer("mailer")
	var out []jetstream.Msg
	if consumers == "pull" {
		c, err := h.JetStream().Consumer(ctx, stream, worker)
		if err != nil {
			t.Fatal(err)
		}
		batch, err := c.FetchNoWait(20)
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			out = append(out, m)
		}
		return out
	}
	got := make(chan jetstream.Msg, 20)
	cc, err := h.Work(ctx, "mailer", func(m jetstream.Msg) { got <- m })
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Conn().FlushWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	cc.Stop()
	close(got)
	for m := range got {
		out = append(out, m)
	}
	return out
}

func ackAll(ctx context.Context, t *testing.T, h *host.Host, msgs []jetstream.Msg) {
	t.Helper()
	for _, m := range msgs {
		if err := h.Ack(ctx, m); err != nil {
			t.Fatalf("%s's acknowledgement of %q: %v", h.User(), m.Data(), err)
		}
	}
}

func bodies(msgs []jetstream.Msg) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = string(m.Data())
	}
	return out
}

// seq is the bodies of the pieces of work numbered from to to, in order.
func seq(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, string(rune('a'+i)))
	}
	return out
}

// userChange is the plan's change of user, the zero UserChange when it has none.
func userChange(p *plan.Plan, user string) plan.UserChange {
	for _, c := range p.Changes {
		for _, u := range c.Users {
			if u.User == user {
				return u
			}
		}
	}
	return plan.UserChange{}
}
