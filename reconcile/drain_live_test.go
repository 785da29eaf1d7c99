package reconcile

import (
	"context"
	"errors"
	"fmt"
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
// as it may. Every publish the bus acknowledged must reach the holder exactly once. Deleting the
// old queue as planned, without looking at it again, deletes with it the work published between
// the plan and the deletion (tens of messages in ten renames), and a holder that loses its grants
// on the old queue with work in hand cannot acknowledge it.
func TestASeatRenamedWhileWorkFlowsLosesNothing(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
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
	seat := func(i int) string { return "desk" + strconv.Itoa(i) }

	var mu sync.Mutex
	acked := map[int]bool{}      // the bus acknowledged the publish
	delivered := map[int]int{}   // how often the holder was given it
	var holding atomic.Int64     // the highest seat index the holder has bound
	var refusedAcks atomic.Int64 // acks the bus would not take
	var moved atomic.Int64       // deliveries moved from a renamed seat's old queue

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
		handle := func(m jetstream.Msg) {
			n, err := strconv.Atoi(string(m.Data()))
			if err != nil {
				t.Errorf("a delivery that is not the test's: %q", m.Data())
				return
			}
			mu.Lock()
			delivered[n]++
			mu.Unlock()
			if id := m.Headers().Get(jetstream.MsgIDHeader); strings.HasPrefix(id, "meshctl.move.") {
				moved.Add(1)
			}
			if err := m.DoubleAck(holder); err != nil && holder.Err() == nil {
				refusedAcks.Add(1)
			}
		}
		for next := 0; next <= renames && holder.Err() == nil; next++ {
			h := join("beta.postman")
			backoff.Retry(holder, backoff.Backoff{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond}, func() bool {
				cc, err := h.Work(holder, seat(next), handle)
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
	// that is refused.
	var sent atomic.Int64
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

	started := time.Now()
	blocked := 0
	for i := 1; i <= renames; i++ {
		// Work flows under the current name, and the holder has bound its worker.
		testwait.Until(t, "the holder binding "+seat(i-1), func() bool { return holding.Load() >= int64(i-1) })
		before := sent.Load()
		testwait.Until(t, "the sender acknowledged under "+seat(i-1), func() bool { return sent.Load() >= before+25 })
		f.write(renameMesh(i))
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

	missing := func() (lost, twice []int) {
		mu.Lock()
		defer mu.Unlock()
		for n := range acked {
			if delivered[n] == 0 {
				lost = append(lost, n)
			}
		}
		for n, k := range delivered {
			if k > 1 {
				twice = append(twice, n)
			}
		}
		return lost, twice
	}
	// Whatever was acknowledged and is not delivered yet is in the last seat's queue, or
	// stranded in a binding the server took away, to be handed out again after its ack wait
	// (30 s), which testwait's limit outlasts.
	testwait.Until(t, "every acknowledged publish reaching the holder", func() error {
		if lost, _ := missing(); len(lost) > 0 {
			return fmt.Errorf("%d of %d acknowledged publishes never reached it (%v)", len(lost), sent.Load(), firstFew(lost))
		}
		return nil
	})
	stopHolder()
	holderDone.Wait()
	lost, twice := missing()
	total := sent.Load()
	t.Logf("%d renames in %s: %d publishes acknowledged (%.0f/s), %d lost, %d delivered more than once, %d delivered after a move, %d acks refused, %d blocked plans",
		renames, elapsed.Round(time.Millisecond), total, float64(total)/elapsed.Seconds(), len(lost), len(twice), moved.Load(), refusedAcks.Load(), blocked)
	if len(lost) > 0 || len(twice) > 0 {
		t.Errorf("of %d acknowledged publishes, %d never reached the holder (%v) and %d reached it more than once (%v)",
			total, len(lost), firstFew(lost), len(twice), firstFew(twice))
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
