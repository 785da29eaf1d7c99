package host_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/host/hosttest"
	"github.com/meshbus/meshctl/internal/backoff"
	"github.com/meshbus/meshctl/render"
)

// The seat's worker is given, on the server, another ack wait and max_deliver than meshctl's
// defaults (2 s, 3). A holder taking its work as jobs reads both from the consumer's info; a job
// that outlasts the ack wait twice over, kept in progress with Working, is delivered once, and
// acknowledged it leaves the queue. A job naked until its last delivery knows it is the last.
func TestAJobFollowsItsConsumersAckWaitAndMaxDeliver(t *testing.T) {
	eachKind(t, jobFollowsItsConsumer)
}

func jobFollowsItsConsumer(t *testing.T, kind string) {
	t.Parallel()
	b := hosttest.StartConsumers(t, matrixMesh, kind)
	stream, worker := render.SeatStreamName(telegramSender), render.WorkerConsumer(telegramSender)
	const ackWait = 2 * time.Second
	b.UpdateConsumer(t, stream, worker, func(c *jetstream.ConsumerConfig) {
		c.AckWait, c.MaxDeliver = ackWait, 3
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	controller := b.MustJoin(t, render.ControllerUser).JetStream()
	info := func() *jetstream.ConsumerInfo {
		t.Helper()
		i, err := host.ConsumerInfo(ctx, controller, stream, worker)
		if err != nil {
			t.Fatal(err)
		}
		return i
	}
	poll := func(what string, done func() (bool, error)) {
		t.Helper()
		var err error
		if !backoff.Retry(ctx, backoff.Backoff{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond}, func() bool {
			var ok bool
			ok, err = done()
			return ok || err != nil
		}) {
			t.Fatalf("%s: %v", what, ctx.Err())
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	holder := b.Dial(t, "one.telegram")
	jobs := make(chan host.Job, 8)
	release := make(chan struct{})
	cc, r, err := holder.WorkJobs(ctx, telegramSender, func(j host.Job) {
		jobs <- j
		if string(j.Data()) != "long" {
			return // the test settles it
		}
		stop := holder.Working(j)
		<-release
		if err := stop(); err != nil {
			t.Error(err)
		}
		if err := holder.Ack(ctx, j); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	if r.AckWait != ackWait || r.MaxDeliver != 3 {
		t.Errorf("the holder read %+v from the worker's info, want ack wait %s and max_deliver 3", r, ackWait)
	}

	shop := b.MustJoin(t, "two.shop")
	if _, err := shop.Publish(ctx, render.AcceptSubject(telegramSender, "send"), []byte("long")); err != nil {
		t.Fatal(err)
	}
	first := <-jobs
	delivered := time.Now()
	if first.Delivery != 1 || first.Last() || first.Wait(first.Delivery) != ackWait {
		t.Errorf("the first delivery says delivery %d, last %v, wait %s", first.Delivery, first.Last(), first.Wait(first.Delivery))
	}
	// The job lasts twice the ack wait; meanwhile the server must deliver it to nobody again.
	poll("holding the job for twice the ack wait", func() (bool, error) {
		if i := info(); i.NumRedelivered > 0 {
			return false, fmt.Errorf("the job was delivered again while in progress, %s after its delivery", time.Since(delivered))
		}
		return time.Since(delivered) > 2*ackWait, nil
	})
	close(release)
	poll("the job acknowledged", func() (bool, error) {
		i := info()
		return i.NumAckPending == 0 && i.NumPending == 0, nil
	})
	if i := info(); i.NumRedelivered > 0 || len(jobs) > 0 {
		t.Errorf("the long job was delivered again: %d redelivered, %d more deliveries", i.NumRedelivered, len(jobs))
	}

	// Naked each time, the job comes back until its last delivery, which says so.
	if _, err := shop.Publish(ctx, render.AcceptSubject(telegramSender, "send"), []byte("failing")); err != nil {
		t.Fatal(err)
	}
	for n := uint64(1); n <= 3; n++ {
		var j host.Job
		select {
		case j = <-jobs:
		case <-ctx.Done():
			t.Fatalf("delivery %d of the failing job: %v", n, ctx.Err())
		}
		if j.Delivery != n || j.Last() != (n == 3) {
			t.Errorf("delivery %d says it is delivery %d, last %v", n, j.Delivery, j.Last())
		}
		if err := holder.Nak(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
}

// The wait in force for a delivery is the ack wait, or with a backoff its interval for that
// delivery, the last for every later one.
func TestRedeliveryWait(t *testing.T) {
	t.Parallel()
	plain := host.RedeliveryOf(jetstream.ConsumerConfig{AckWait: 10 * time.Second, MaxDeliver: 4})
	backoffs := host.RedeliveryOf(jetstream.ConsumerConfig{AckWait: time.Second, BackOff: []time.Duration{time.Second, 5 * time.Second}})
	unset := host.RedeliveryOf(jetstream.ConsumerConfig{})
	for _, c := range []struct {
		name string
		r    host.Redelivery
		n    uint64
		want time.Duration
		last bool
	}{
		{"the ack wait", plain, 1, 10 * time.Second, false},
		{"the ack wait, last delivery", plain, 4, 10 * time.Second, true},
		{"the first interval", backoffs, 1, time.Second, false},
		{"the second interval", backoffs, 2, 5 * time.Second, false},
		{"past the intervals, the last", backoffs, 7, 5 * time.Second, false},
		{"no delivery count", backoffs, 0, time.Second, false},
		{"the server's default", unset, 1, 30 * time.Second, false},
	} {
		if got := c.r.Wait(c.n); got != c.want || c.r.Last(c.n) != c.last {
			t.Errorf("%s: Wait(%d) = %s, Last = %v; want %s, %v", c.name, c.n, got, c.r.Last(c.n), c.want, c.last)
		}
	}
}
