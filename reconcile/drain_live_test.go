package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/backoff"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/render"
)

// renameMesh is a seat named desk<i>, renamed from desk<i-1>: one sender, one holder.
func renameMesh(i int) string {
	formerly := ""
	if i > 0 {
		formerly = fmt.Sprintf("    formerly: [desk%d]\n", i-1)
	}
	return fmt.Sprintf(`
bus:
  listen: "127.0.0.1:-1"
nodes:
  - name: alpha
  - name: beta
seats:
  - name: desk%[1]d
%[2]s    accepts: [send]
modules:
  - name: shop
    on: [alpha]
    sends: [desk%[1]d/send]
  - name: postman
    on: [beta]
    claims: [desk%[1]d]
`, i, formerly)
}

// renames is how many times TestASeatRenamedWhileWorkFlowsLosesNothing renames the seat.
const renames = 10

// TestASeatRenamedWhileWorkFlowsLosesNothing renames a seat ten times in a row while a sender
// publishes to it up to 333 times a second, waiting for each PubAck, and the holder takes and
// acknowledges the work. The sender uses whichever of the old and the new name the bus lets it,
// as a sender does while a rename is rolled out; the holder binds the new seat's worker as soon
// as it may. Every publish the bus acknowledged must reach the holder, and once only unless
// its first delivery went unacknowledged past the ack wait (docs/safety.md). Deleting the
// old queue as planned, without looking at it again, deletes with it the work published between
// the plan and the deletion (tens of messages in ten renames), and a holder that loses its grants
// on the old queue with work in hand cannot acknowledge it.
func TestASeatRenamedWhileWorkFlowsLosesNothing(t *testing.T) {
	t.Parallel()
	// Ten renames with work flowing take minutes on a loaded machine (each may wait out the
	// worker's 30 s ack wait), more than testContext's bound for a test.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	f := newFixture(t, renameMesh(0))
	s := f.connect(ctx)
	pw := f.mint(ctx, "alpha.shop", "beta.postman")
	f.mustApply(ctx, s)
	join := func(user string) *host.Host {
		h, err := host.Join(ctx, host.Membership{Address: s.Target.Address(), User: user, Password: pw[user]})
		if err != nil {
			t.Fatalf("%s cannot join: %v", user, err)
		}
		t.Cleanup(h.Close)
		return h
	}
	shop := join("alpha.shop")
	started := time.Now()
	seat := func(i int) string { return "desk" + strconv.Itoa(i) }

	var mu sync.Mutex
	acked := map[int]bool{}             // the bus acknowledged the publish
	deliveries := map[int][]*delivery{} // each time the holder was given it
	var holding atomic.Int64            // the highest seat index the holder has bound
	var refusedAcks atomic.Int64        // acks the bus would not take
	var moved atomic.Int64              // deliveries moved from a renamed seat's old queue
	var reached atomic.Int64            // publishes delivered to the holder at least once

	// The holder and the sender stop apart: the holder keeps taking work after the sender
	// has stopped, until everything acknowledged has reached it.
	holder, stopHolder := context.WithCancel(ctx)
	sender, stopSender := context.WithCancel(ctx)
	var holderDone, senderDone sync.WaitGroup
	// Stopped before the test ends however it ends: a goroutine that reports to t after the
	// test is over panics.
	t.Cleanup(func() {
		stopSender()
		stopHolder()
		senderDone.Wait()
		holderDone.Wait()
	})
	// The holder binds desk<i+1>'s worker as soon as its grants allow, keeping desk<i>'s: the
	// server takes the old binding away itself when the reload removes its grants. Each seat's
	// binding has a connection of its own, so the refusal the server reports when it drops the
	// old binding is not taken for a refusal of the new one (a refused bind would drop
	// deliveries already taken, stranding them until their ack wait).
	holderDone.Go(func() {
		var bound []jetstream.ConsumeContext
		defer func() {
			for _, cc := range bound {
				cc.Stop()
			}
		}()
		// handle takes work bound by h, acknowledging it as the product's hosts do (Host.Ack):
		// an acknowledgement the server refuses is an error at once, not a wait for the
		// holder's deadline.
		handle := func(h *host.Host) jetstream.MessageHandler {
			return func(m jetstream.Msg) {
				n, err := strconv.Atoi(string(m.Data()))
				if err != nil {
					t.Errorf("a delivery that is not the test's: %q", m.Data())
					return
				}
				d := deliveryOf(m, time.Since(started))
				if d.moved() {
					moved.Add(1)
				}
				mu.Lock()
				if len(deliveries[n]) == 0 {
					reached.Add(1)
				}
				deliveries[n] = append(deliveries[n], &d)
				mu.Unlock()
				err = h.Ack(holder, m)
				if err != nil && holder.Err() != nil {
					return // cut short by the test's end: whether the server took it is unknown
				}
				if err != nil {
					refusedAcks.Add(1)
				}
				mu.Lock()
				d.acked, d.ack = true, err
				mu.Unlock()
			}
		}
		for next := 0; next <= renames && holder.Err() == nil; next++ {
			h := join("beta.postman")
			backoff.Retry(holder, backoff.Backoff{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond}, func() bool {
				cc, err := h.Work(holder, seat(next), handle(h))
				if err != nil {
					return false
				}
				bound = append(bound, cc)
				holding.Store(int64(next))
				return true
			})
		}
		<-holder.Done()
	})
	// The sender keeps to a schedule of one publish every 3 ms (333 a second), catching up
	// when a publish took longer, to the name it last succeeded with, trying the next one when
	// that is refused. It stays at most aheadAtMost publishes ahead of the holder: on a loaded
	// machine an unbounded lead grows to thousands of queued messages, which each rename then
	// moves one by one, and the test measures a backlog instead of the renames.
	var sent atomic.Int64
	const aheadAtMost = 300
	senderDone.Go(func() {
		const every = 3 * time.Millisecond
		tick := time.NewTicker(every)
		defer tick.Stop()
		begun := time.Now()
		name := 0
		for n := 0; ; n++ {
			if time.Since(begun) < time.Duration(n)*every {
				select {
				case <-sender.Done():
					return
				case <-tick.C:
				}
			} else if sender.Err() != nil {
				return
			}
			if sent.Load()-reached.Load() >= aheadAtMost {
				select {
				case <-sender.Done():
					return
				case <-tick.C:
				}
				n-- // the same number again
				continue
			}
			for _, i := range []int{name, name + 1} {
				if i > renames {
					continue
				}
				err := shop.Check(sender, func(ctx context.Context) error {
					pctx, cancel := context.WithTimeout(ctx, time.Second)
					defer cancel()
					_, err := shop.JetStream().Publish(pctx, render.AcceptSubject(seat(i), "send"), []byte(strconv.Itoa(n)))
					return err
				})
				if err == nil {
					mu.Lock()
					acked[n] = true
					mu.Unlock()
					sent.Add(1)
					name = i
					break
				}
			}
		}
	})

	blocked := 0
	for i := 1; i <= renames; i++ {
		// Work flows under the current name, and the holder has bound its worker.
		testwait.Until(t, "the holder binding "+seat(i-1), func() bool { return holding.Load() >= int64(i-1) })
		before := sent.Load()
		testwait.Until(t, "the sender acknowledged under "+seat(i-1), func() bool { return sent.Load() >= before+25 })
		f.write(renameMesh(i))
		t.Logf("at %s: renaming %s to %s", time.Since(started).Round(time.Millisecond), seat(i-1), seat(i))
		testwait.Until(t, fmt.Sprintf("renaming %s to %s", seat(i-1), seat(i)), func() error {
			_, _, err := f.apply(ctx, s, RunOptions{})
			if errors.Is(err, ErrBlocked) {
				blocked++ // an operator would run it again
				return err
			}
			if err != nil {
				t.Fatalf("renaming %s to %s: %v", seat(i-1), seat(i), err)
			}
			return nil
		})
	}
	testwait.Until(t, "the holder binding "+seat(renames), func() bool { return holding.Load() == renames })
	before := sent.Load()
	testwait.Until(t, "the sender acknowledged under "+seat(renames), func() bool { return sent.Load() >= before+25 })
	stopSender()
	senderDone.Wait()
	elapsed := time.Since(started)

	// missing lists the acknowledged publishes never delivered, those delivered again only as
	// at-least-once delivery allows (redelivered), and those delivered twice otherwise (twice).
	missing := func() (lost, redelivered, twice []int) {
		mu.Lock()
		defer mu.Unlock()
		for n := range acked {
			if len(deliveries[n]) == 0 {
				lost = append(lost, n)
			}
		}
		for n, ds := range deliveries {
			switch {
			case len(ds) < 2:
			case allRedeliveries(ds):
				redelivered = append(redelivered, n)
			default:
				twice = append(twice, n)
			}
		}
		slices.Sort(lost)
		slices.Sort(redelivered)
		slices.Sort(twice)
		return lost, redelivered, twice
	}
	// Whatever was acknowledged and is not delivered yet is in the last seat's queue, or
	// stranded in a binding the server took away, to be handed out again after its ack wait
	// (30 s), which testwait's limit outlasts.
	testwait.Until(t, "every acknowledged publish reaching the holder", func() error {
		if lost, _, _ := missing(); len(lost) > 0 {
			return fmt.Errorf("%d of %d acknowledged publishes never reached it (%v)", len(lost), sent.Load(), firstFew(lost))
		}
		return nil
	})
	stopHolder()
	holderDone.Wait()
	lost, redelivered, twice := missing()
	total := sent.Load()
	t.Logf("%d renames in %s: %d publishes acknowledged (%.0f/s), %d lost, %d delivered more than once, %d redelivered after their ack wait, %d delivered after a move, %d acks refused, %d blocked plans",
		renames, elapsed.Round(time.Millisecond), total, float64(total)/elapsed.Seconds(), len(lost), len(twice), len(redelivered), moved.Load(), refusedAcks.Load(), blocked)
	deliveredAs := func(ns []int) {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range firstFew(ns) {
			for _, d := range deliveries[n] {
				t.Logf("publish %d: %s", n, d)
			}
		}
	}
	// At-least-once delivery: what the holder did not acknowledge within its ack wait is
	// handed out again. Reported, so a run that shows it says how.
	deliveredAs(redelivered)
	if len(lost) > 0 || len(twice) > 0 {
		t.Errorf("of %d acknowledged publishes, %d never reached the holder (%v) and %d reached it more than once although it had acknowledged them (%v)",
			total, len(lost), firstFew(lost), len(twice), firstFew(twice))
		deliveredAs(twice)
	}
	if moved.Load() == 0 {
		t.Error("no work was queued under an old name when its seat was renamed: the test did not exercise a move")
	}
	if blocked > 0 {
		t.Errorf("%d plans were refused: a rename moves its queued work and loses none, so it needs no --allow-data-loss", blocked)
	}
	js := f.js(s)
	for i := range renames {
		if _, err := js.Stream(ctx, render.SeatStreamName(seat(i))); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("the work queue of %s is still there: %v", seat(i), err)
		}
	}
	f.mustConverge(ctx, s)
}

// delivery is what the holder was handed: from which queue and binding, which delivery of the
// message the server said it was, and whether the server took its acknowledgement.
type delivery struct {
	stream, consumer  string
	seq, numDelivered uint64
	msgID             string
	at                time.Duration
	acked             bool // the acknowledgement has returned, with ack
	ack               error
}

func deliveryOf(m jetstream.Msg, at time.Duration) delivery {
	d := delivery{msgID: m.Headers().Get(jetstream.MsgIDHeader), at: at}
	if md, err := m.Metadata(); err == nil {
		d.stream, d.consumer, d.seq, d.numDelivered = md.Stream, md.Consumer, md.Sequence.Stream, md.NumDelivered
	}
	return d
}

// moved: the delivery is of a copy a rename's move made.
func (d *delivery) moved() bool { return strings.HasPrefix(d.msgID, "meshctl.move.") }

func (d *delivery) String() string {
	ack := "not acknowledged yet"
	switch {
	case d.acked && d.ack == nil:
		ack = "acknowledged"
	case d.acked:
		ack = fmt.Sprintf("acknowledgement not taken: %v", d.ack)
	}
	return fmt.Sprintf("at %s from %s/%s, stream sequence %d, delivery %d, message id %q: %s",
		d.at.Round(time.Millisecond), d.stream, d.consumer, d.seq, d.numDelivered, d.msgID, ack)
}

// allRedeliveries reports whether a message's deliveries ds are all that at-least-once delivery
// allows for work the holder did not acknowledge in time: the server handing it out again (its
// second delivery from a queue, or later), and a rename's move copying it into the new queue
// after the server refused the holder's acknowledgement of it in the old one. A move copies
// what is still queued once the old queue's worker had its ack wait to have it acknowledged,
// and the reload then takes the holder's grants on the old queue away. So of its first
// deliveries from each queue, all but one had their acknowledgement refused.
func allRedeliveries(ds []*delivery) bool {
	mayBeDone := 0
	for _, d := range ds {
		if d.numDelivered == 1 && !(d.acked && d.ack != nil) {
			mayBeDone++
		}
	}
	return mayBeDone <= 1
}

func firstFew(ns []int) []int {
	if len(ns) > 10 {
		return ns[:10]
	}
	return ns
}

// A replacement or deletion planned with nothing at stake finds messages when it runs: it
// deletes nothing, the stream takes messages again as before, and the change fails saying so.
// With leave to lose them, the next apply does it.
func TestMessagesArrivingAfterThePlanAreNotDeleted(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	spare := strings.Replace(quickMesh, "seats:\n", "seats:\n  - name: spare\n    accepts: [job]\n", 1)
	spare = strings.Replace(spare, "sends: [mailer/send]", "sends: [mailer/send, spare/job]", 1)
	f := newFixture(t, spare)
	s := f.connect(ctx)
	pw := f.mint(ctx, "alpha.shop")
	f.mustApply(ctx, s)
	js := f.js(s)
	shop, err := jetstream.New(dialAs(ctx, t, s, "alpha.shop", pw).Conn)
	if err != nil {
		t.Fatal(err)
	}
	// late plans the mesh, publishes n messages to subject, and applies the plan.
	late := func(subject string, n int) error {
		t.Helper()
		p, err := s.Plan(ctx, f.mesh(), plan.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Blocked() {
			t.Fatalf("with nothing queued the plan is blocked: %+v", p.Summary())
		}
		for range n {
			if _, err := shop.Publish(ctx, subject, []byte("late")); err != nil {
				t.Fatal(err)
			}
		}
		_, err = Apply(ctx, p, s.API, s.Accounts, nil)
		f.logf("apply: %v", err)
		return err
	}
	asItWas := func(stream, seat string, storage jetstream.StorageType, msgs uint64, err error) {
		t.Helper()
		if !errors.Is(err, ErrNotEmpty) || !strings.Contains(err.Error(), stream+" holds "+messages(msgs)+" now (the plan counted 0)") {
			t.Fatalf("an apply that found %d message(s) the plan did not count in %s: %v", msgs, stream, err)
		}
		info, err := mustStream(ctx, t, js, stream).Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs != msgs || info.Config.Storage != storage || info.Config.Sealed ||
			!cmp.Equal(info.Config.Subjects, []string{"mesh.seat." + seat + ".accept.>"}) {
			t.Errorf("%s is not as it was: %d messages, %s, sealed %v, subjects %v",
				stream, info.State.Msgs, info.Config.Storage, info.Config.Sealed, info.Config.Subjects)
		}
	}

	// SEAT_MAILER is remade by hand in memory: storage cannot be updated in place, so the
	// plan replaces it.
	if err := js.DeleteStream(ctx, "SEAT_MAILER"); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "SEAT_MAILER", Subjects: []string{"mesh.seat.mailer.accept.>"}, Retention: jetstream.WorkQueuePolicy,
		Storage: jetstream.MemoryStorage, Metadata: map[string]string{render.OwnerKey: render.OwnerValue},
	}); err != nil {
		t.Fatal(err)
	}
	asItWas("SEAT_MAILER", "mailer", jetstream.MemoryStorage, 2, late("mesh.seat.mailer.accept.send", 2))
	// It takes messages again: the failed replacement did not leave it deaf.
	if _, err := shop.Publish(ctx, "mesh.seat.mailer.accept.send", []byte("after")); err != nil {
		t.Fatalf("the stream whose replacement failed takes no messages: %v", err)
	}
	// The next plan counts them and refuses; with leave to lose them, it is done.
	if _, _, err := f.apply(ctx, s, RunOptions{}); !errors.Is(err, ErrBlocked) {
		t.Fatalf("the next apply, with work at stake: %v", err)
	}
	if _, _, err := f.apply(ctx, s, RunOptions{AllowDataLoss: true}); err != nil {
		t.Fatalf("with --allow-data-loss: %v", err)
	}
	f.mustConverge(ctx, s)

	// The seat spare goes from the mesh, and its queue with it.
	f.write(quickMesh)
	asItWas("SEAT_SPARE", "spare", jetstream.FileStorage, 1, late("mesh.seat.spare.accept.job", 1))
	if _, _, err := f.apply(ctx, s, RunOptions{}); !errors.Is(err, ErrBlocked) {
		t.Fatalf("the next apply, with work at stake: %v", err)
	}
	if _, _, err := f.apply(ctx, s, RunOptions{AllowDataLoss: true}); err != nil {
		t.Fatalf("with --allow-data-loss: %v", err)
	}
	f.mustConverge(ctx, s)
}

// A rename's old queue stops handing out work before the reload that takes the holder's grants
// away; when that reload is refused, the queue hands work out again, since the holder keeps the
// seat under its old name.
func TestARefusedReloadLetsTheOldQueueDeliverAgain(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, quickMesh)
	s := f.connect(ctx)
	f.mustApply(ctx, s)
	js := f.js(s)
	paused := func() bool {
		t.Helper()
		info, err := host.ConsumerInfo(ctx, js, "SEAT_MAILER", "SEAT_MAILER_worker")
		if err != nil {
			t.Fatal(err)
		}
		return info.Paused
	}
	f.write(strings.Replace(quickMesh, "  - name: mailer\n", "  - name: postbox\n    formerly: [mailer]\n", 1))
	p, err := s.Plan(ctx, f.mesh(), plan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pausedAtReload := false
	accounts := s.Accounts
	accounts.Verify = func(context.Context, bool) error {
		pausedAtReload = paused()
		return errors.New("refused for the test")
	}
	if _, err := Apply(ctx, p, s.API, accounts, nil); err == nil {
		t.Fatal("an apply whose reload was refused succeeded")
	}
	if !pausedAtReload {
		t.Error("the old queue's worker was still handing out work when the reload came")
	}
	if paused() {
		t.Error("after the refused reload the old queue's worker is still paused: the holder gets no work")
	}
	if _, err := mustStream(ctx, t, js, "SEAT_MAILER").Info(ctx); err != nil {
		t.Errorf("the old queue went although the reload was refused: %v", err)
	}
}

// Work queued under a seat's old name moves to the new queue, readdressed, even when a move
// cut short left the old queue sealed; the plan does not ask for leave to lose it.
func TestQueuedWorkMovesToTheRenamedSeat(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, quickMesh)
	s := f.connect(ctx)
	pw := f.mint(ctx, "alpha.shop")
	f.mustApply(ctx, s)
	js := f.js(s)
	shop, err := jetstream.New(dialAs(ctx, t, s, "alpha.shop", pw).Conn)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := shop.Publish(ctx, "mesh.seat.mailer.accept.send", []byte{byte('0' + i)}); err != nil {
			t.Fatal(err)
		}
	}
	old := mustStream(ctx, t, js, "SEAT_MAILER").CachedInfo().Config
	old.Sealed = true
	if _, err := js.UpdateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	f.write(strings.Replace(quickMesh, "  - name: mailer\n", "  - name: postbox\n    formerly: [mailer]\n", 1))
	if _, _, err := f.apply(ctx, s, RunOptions{}); err != nil {
		t.Fatalf("renaming a seat with queued work: %v", err)
	}
	if _, err := js.Stream(ctx, "SEAT_MAILER"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("the old queue is still there: %v", err)
	}
	st := mustStream(ctx, t, js, "SEAT_POSTBOX")
	var got []string
	for seq := uint64(1); seq <= 3; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("message %d of the new queue: %v", seq, err)
		}
		got = append(got, m.Subject+" "+string(m.Data))
	}
	want := []string{"mesh.seat.postbox.accept.send 0", "mesh.seat.postbox.accept.send 1", "mesh.seat.postbox.accept.send 2"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the new queue holds (-want +got):\n%s", diff)
	}
	if info, _ := st.Info(ctx); info.State.Msgs != 3 {
		t.Errorf("the new queue holds %d messages, want the 3 moved", info.State.Msgs)
	}
	f.mustConverge(ctx, s)
}

// Work the holder has not acknowledged within the worker's ack wait when its seat is renamed is
// moved to the new queue and handed out again, as the server would hand it out again itself:
// the holder's late acknowledgement in the old queue is refused at once, so it knows. This is
// the one way a rename hands work out twice (TestASeatRenamedWhileWorkFlowsLosesNothing tells
// it apart by the refusal).
func TestWorkUnacknowledgedPastItsAckWaitComesAgainAfterARename(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	mesh := func(i int) string {
		return strings.Replace(renameMesh(i), "    accepts: [send]\n", "    accepts: [send]\n    consumer: { ack_wait: 2s }\n", 1)
	}
	f := newFixture(t, mesh(0))
	s := f.connect(ctx)
	pw := f.mint(ctx, "alpha.shop", "beta.postman")
	f.mustApply(ctx, s)
	join := func(user string) *host.Host {
		h, err := host.Join(ctx, host.Membership{Address: s.Target.Address(), User: user, Password: pw[user]})
		if err != nil {
			t.Fatalf("%s cannot join: %v", user, err)
		}
		t.Cleanup(h.Close)
		return h
	}
	// take binds seat as a new holder and returns its first delivery, unacknowledged.
	take := func(seat string) (*host.Host, jetstream.Msg) {
		h := join("beta.postman")
		got := make(chan jetstream.Msg, 1)
		cc, err := h.Work(ctx, seat, func(m jetstream.Msg) {
			select {
			case got <- m:
			default:
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cc.Stop)
		select {
		case m := <-got:
			return h, m
		case <-ctx.Done():
			t.Fatalf("no work from %s: %v", seat, ctx.Err())
			return nil, nil
		}
	}
	shop := join("alpha.shop")
	if _, err := shop.JetStream().Publish(ctx, render.AcceptSubject("desk0", "send"), []byte("7")); err != nil {
		t.Fatal(err)
	}
	old, first := take("desk0")
	f.write(mesh(1))
	if _, _, err := f.apply(ctx, s, RunOptions{}); err != nil {
		t.Fatalf("renaming desk0 to desk1 while the holder keeps its work past the ack wait: %v", err)
	}
	if err := old.Ack(ctx, first); err == nil || ctx.Err() != nil {
		t.Fatalf("the holder's acknowledgement in the old queue after the rename: %v, want a refusal", err)
	}
	now, again := take("desk1")
	if err := now.Ack(ctx, again); err != nil {
		t.Fatal(err)
	}
	d1, d2 := deliveryOf(first, 0), deliveryOf(again, 0)
	d1.acked, d1.ack = true, errors.New("refused")
	d2.acked = true
	if string(again.Data()) != "7" || !d2.moved() || d2.numDelivered != 1 || !allRedeliveries([]*delivery{&d1, &d2}) {
		t.Errorf("the work again from the new queue: %q, %s", again.Data(), &d2)
	}
}
