package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/jsapi"
	"github.com/meshbus/meshctl/plan"
)

// limitsMesh is quickMesh with EVENTS and the seat's queue bounded as given.
func limitsMesh(events, seat string) string {
	m := strings.Replace(quickMesh, "bus:\n  listen: \"127.0.0.1:-1\"\n",
		"bus:\n  listen: \"127.0.0.1:-1\"\n  jetstream:\n    streams:\n      events: "+events+"\n", 1)
	return strings.Replace(m, "    accepts: [send]\n", "    accepts: [send]\n    stream: "+seat+"\n", 1)
}

// joinHost joins the bus as user, as a host does.
func joinHost(ctx context.Context, t *testing.T, s *Session, user string, pw map[string]string) *host.Host {
	t.Helper()
	h, err := host.Join(ctx, host.Membership{Address: s.Target.Address(), User: user, Password: pw[user]})
	if err != nil {
		t.Fatalf("%s cannot join: %v", user, err)
	}
	t.Cleanup(h.Close)
	return h
}

func streamState(ctx context.Context, t *testing.T, js jetstream.JetStream, name string) jetstream.StreamState {
	t.Helper()
	info, err := mustStream(ctx, t, js, name).Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State
}

// A stream at its byte limit does as the description declares: EVENTS (discard old) drops its
// oldest event for each new one and acknowledges every publish, while a seat's queue (discard
// new, its default) keeps the work it holds and refuses the publish that would not fit.
func TestAStreamAtItsByteLimitDiscardsOrRefusesAsDeclared(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, limitsMesh("{max_bytes: 4KiB}", "{max_bytes: 4KiB}"))
	s := f.connect(ctx)
	pw := f.mint(ctx, "alpha.shop")
	f.mustApply(ctx, s)
	shop := joinHost(ctx, t, s, "alpha.shop", pw)
	js := f.js(s)
	payload := []byte(strings.Repeat("x", 1000))

	for i := range 10 {
		if _, err := shop.Publish(ctx, "mesh.mod.shop.event.order.placed", payload); err != nil {
			t.Fatalf("event %d: EVENTS drops its oldest at its limit, yet refused: %v", i+1, err)
		}
	}
	events := streamState(ctx, t, js, "EVENTS")
	if events.Bytes > 4<<10 || events.Msgs >= 10 || events.FirstSeq == 1 || events.LastSeq != 10 {
		t.Errorf("EVENTS after ten 1 KB events under 4 KiB: %d messages, %d bytes, sequences %d to %d; want its oldest dropped",
			events.Msgs, events.Bytes, events.FirstSeq, events.LastSeq)
	}

	var refused error
	acked := 0
	for range 10 {
		if _, err := shop.Publish(ctx, "mesh.seat.mailer.accept.send", payload); err != nil {
			refused = err
			break
		}
		acked++
	}
	var apiErr *jetstream.APIError
	if !errors.As(refused, &apiErr) || acked == 0 || acked >= 5 {
		t.Fatalf("the seat's queue took %d of ten 1 KB publishes under 4 KiB, then %v; want a few, then the server's refusal", acked, refused)
	}
	queue := streamState(ctx, t, js, "SEAT_MAILER")
	if queue.Msgs != uint64(acked) || queue.FirstSeq != 1 || queue.Bytes > 4<<10 {
		t.Errorf("the seat's queue holds %d messages from sequence %d (%d bytes); want the %d it acknowledged, none dropped",
			queue.Msgs, queue.FirstSeq, queue.Bytes, acked)
	}
}

// A limit lowered below what a stream holds is refused, with nothing changed, and the plan
// says how many messages it would discard; allowed, the server discards exactly that many.
// The messages differ in size, and some carry headers, so the count must add them up as the
// server's store does.
func TestALoweredLimitIsRefusedThenAllowedAndTheCountIsTheServers(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, limitsMesh("{max_bytes: 256KiB}", "{max_bytes: 64KiB}"))
	s := f.connect(ctx)
	pw := f.mint(ctx, "alpha.shop")
	f.mustApply(ctx, s)
	shop := joinHost(ctx, t, s, "alpha.shop", pw)
	js := f.js(s)
	for i := range 120 {
		msg := nats.NewMsg("mesh.mod.shop.event.order.placed")
		msg.Data = []byte(strings.Repeat("o", 200+37*(i%29)))
		if i%3 == 0 {
			msg.Header.Set("Nats-Msg-Id", fmt.Sprintf("order-%d", i))
			msg.Header.Set("Order", strings.Repeat("h", i%11))
		}
		if _, err := shop.JetStream().PublishMsg(ctx, msg); err != nil {
			t.Fatalf("publishing event %d: %v", i, err)
		}
	}
	before := streamState(ctx, t, js, "EVENTS")
	if before.Msgs != 120 || before.Bytes <= 32<<10 {
		t.Fatalf("EVENTS holds %d messages, %d bytes; the test needs all 120 and more than 32 KiB", before.Msgs, before.Bytes)
	}
	// Each message's size, as the count adds them, sums to what the server says it holds.
	var sum uint64
	for seq := uint64(0); ; {
		m, err := s.API.NextStored(ctx, "EVENTS", seq)
		if errors.Is(err, jsapi.ErrNoMessage) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		sum += m.Size(jetstream.FileStorage)
		seq = m.Seq + 1
	}
	if sum != before.Bytes {
		t.Fatalf("the messages' sizes sum to %d bytes; the server says EVENTS holds %d", sum, before.Bytes)
	}

	f.write(limitsMesh("{max_bytes: 32KiB}", "{max_bytes: 64KiB}"))
	res, counting, err := f.apply(ctx, s, RunOptions{})
	if !errors.Is(err, ErrBlocked) || counting.Mutations.Load() != 0 {
		t.Fatalf("lowering EVENTS below what it holds: %v, %d mutating call(s); want it refused with nothing changed", err, counting.Mutations.Load())
	}
	said := discardsOf(t, res.Plan, "stream EVENTS")
	if said.Discards == 0 || said.AtLeast || said.Discards >= 120 {
		t.Fatalf("the plan says %+v; want a count of some of the 120, exact", said)
	}
	if got := streamState(ctx, t, js, "EVENTS"); got.Msgs != 120 {
		t.Fatalf("a refused apply left EVENTS with %d of its 120 messages", got.Msgs)
	}

	if _, _, err := f.apply(ctx, s, RunOptions{AllowDataLoss: true}); err != nil {
		t.Fatalf("the same, allowed: %v", err)
	}
	after := streamState(ctx, t, js, "EVENTS")
	if discarded := before.Msgs - after.Msgs; discarded != said.Discards {
		t.Errorf("the plan said %d messages would go; the server discarded %d (%d of %d bytes left)", said.Discards, discarded, after.Bytes, before.Bytes)
	}
	if after.FirstSeq != said.Discards+1 || after.Bytes > 32<<10 {
		t.Errorf("EVENTS now starts at %d with %d bytes; want the oldest %d gone and at most 32 KiB", after.FirstSeq, after.Bytes, said.Discards)
	}
	f.mustConverge(ctx, s)
}

// discardsOf is what p's change id says it would discard.
func discardsOf(t *testing.T, p *plan.Plan, id string) plan.AtStake {
	t.Helper()
	if p == nil {
		t.Fatal("no plan")
	}
	for _, c := range p.Changes {
		if c.ID() == id && c.AtStake != nil {
			if c.Refused == "" || c.Risk != plan.RiskDataLoss {
				t.Errorf("%s discards %+v, yet is not refused as data loss: %+v", id, c.AtStake, c)
			}
			return *c.AtStake
		}
	}
	t.Fatalf("the plan has no %s discarding anything", id)
	return plan.AtStake{}
}

// An apply whose streams may hold more than the server's JetStream has is refused whole, with
// nothing created; forced, it goes to the server, which refuses the stream that does not fit
// itself (insufficient storage, 10047) — what the guard saves an operator from finding half
// way through an apply.
func TestAnApplyPastTheServersStoreIsRefusedUnlessForced(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, limitsMesh("{max_bytes: 1PiB}", "{max_bytes: 64KiB}"))
	s := f.connect(ctx)
	res, counting, err := f.apply(ctx, s, RunOptions{})
	if !errors.Is(err, ErrBlocked) || counting.Mutations.Load() != 0 {
		t.Fatalf("a 1 PiB EVENTS: %v, %d mutating call(s); want it refused with nothing changed", err, counting.Mutations.Load())
	}
	oc := res.Plan.Overcommit
	if oc == nil || !res.Plan.OvercommitRefused() || oc.Capacity.File <= 0 || oc.Footprint.File <= uint64(oc.Capacity.File) ||
		!strings.Contains(oc.Refused, "--allow-overcommit") {
		t.Fatalf("the plan's overcommit: %+v", oc)
	}
	if want := s.Embedded.Server().JetStreamConfig().MaxStore; oc.Capacity.File != want {
		t.Errorf("the capacity said is %d bytes; the server's store is %d", oc.Capacity.File, want)
	}

	_, _, err = f.apply(ctx, s, RunOptions{AllowOvercommit: true})
	var apiErr *jetstream.APIError
	if errors.Is(err, ErrBlocked) || !errors.As(err, &apiErr) || apiErr.ErrorCode != 10047 {
		t.Fatalf("forced: %v; want past meshctl's guard, to the server's own refusal (10047)", err)
	}
}

// Every setting the description may give, applied, reads back as derived: a bus made with
// them plans nothing more, so no setting drifts for ever against what the server fills in.
func TestEverySettingConverges(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	mesh := strings.Replace(quickMesh, "bus:\n  listen: \"127.0.0.1:-1\"\n", `bus:
  listen: "127.0.0.1:-1"
  jetstream:
    streams:
      control: {max_bytes: 16MiB, max_msg_size: 64KiB, discard: new}
      events: {max_bytes: 100MB, max_age: 30s, max_msgs: 100000}
      nodes: {max_bytes: unlimited, storage: memory}
      seats: {max_age: 1h}
    consumers: {ack_wait: 1m, max_ack_pending: 100, max_deliver: 20}
`, 1)
	mesh = strings.Replace(mesh, "    accepts: [send]\n", "    accepts: [send]\n    stream: {storage: memory, max_msgs: unlimited}\n    consumer: {backoff: [5s, 1m, 10m], max_ack_pending: unlimited}\n", 1)
	mesh = strings.Replace(mesh, "    follows: [shop/order.placed]\n", "    follows: [shop/order.placed]\n    consumer: {max_deliver: unlimited, ack_wait: 45s}\n", 1)
	f := newFixture(t, mesh)
	s := f.connect(ctx)
	f.mustApply(ctx, s)
	f.mustConverge(ctx, s)
	c, err := f.js(s).Consumer(ctx, "SEAT_MAILER", "SEAT_MAILER_worker")
	if err != nil {
		t.Fatal(err)
	}
	if cfg := c.CachedInfo().Config; cfg.AckWait != 5*time.Second || len(cfg.BackOff) != 3 || cfg.MaxAckPending != -1 || cfg.MaxDeliver != 20 {
		t.Errorf("the worker as the server holds it: ack_wait %s backoff %v max_ack_pending %d max_deliver %d", cfg.AckWait, cfg.BackOff, cfg.MaxAckPending, cfg.MaxDeliver)
	}
}

// A lowered limit the plan found the stream within is checked again as the update runs: a
// stream that took more meanwhile is left as it was, not cut to the new limit unasked.
func TestALoweredLimitIsCheckedAgainAsItRuns(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, limitsMesh("{max_bytes: 256KiB}", "{max_bytes: 64KiB}"))
	s := f.connect(ctx)
	pw := f.mint(ctx, "alpha.shop")
	f.mustApply(ctx, s)
	shop := joinHost(ctx, t, s, "alpha.shop", pw)
	publish := func(n int) {
		for range n {
			if _, err := shop.Publish(ctx, "mesh.mod.shop.event.order.placed", []byte(strings.Repeat("o", 500))); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(4) // about 2 KiB: within 8 KiB

	f.write(limitsMesh("{max_bytes: 8KiB}", "{max_bytes: 64KiB}"))
	planned := false
	_, _, err := f.apply(ctx, s, RunOptions{OnPlan: func(p *plan.Plan) {
		for _, c := range p.Changes {
			if c.ID() == "stream EVENTS" && c.Action == plan.Update && c.AtStake == nil && c.Refused == "" {
				planned = true
			}
		}
		publish(30) // about 16 KiB more, after the plan and before the update
	}})
	if !planned {
		t.Fatal("the plan did not update EVENTS to 8KiB with nothing at stake")
	}
	if !errors.Is(err, jsapi.ErrWouldDiscard) {
		t.Fatalf("the update of a stream that grew past its new limit meanwhile: %v; want it not sent", err)
	}
	if got := streamState(ctx, t, f.js(s), "EVENTS"); got.Msgs != 34 {
		t.Errorf("EVENTS holds %d messages; want all 34, none discarded", got.Msgs)
	}
	if _, _, err := f.apply(ctx, s, RunOptions{}); !errors.Is(err, ErrBlocked) {
		t.Errorf("the next apply: %v; want the discard counted and refused", err)
	}
}
