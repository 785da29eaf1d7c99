package host

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Redelivery is what a consumer's info says of how the server delivers a message again when it
// is not acknowledged: after the ack wait, or after the backoff's interval for that delivery
// when the consumer has a backoff, and at most MaxDeliver times in all. The description may set
// each (meshctl's consumers wait 30 s and deliver without limit unless it does), so a host reads
// them from the info rather than assuming them: work kept from redelivery by in-progress
// acknowledgements must send them within the wait in force, and the last delivery of a message
// is the last chance to handle it.
type Redelivery struct {
	AckWait time.Duration
	Backoff []time.Duration
	// MaxDeliver is how many times a message is delivered at most; 0 or less: no limit. A
	// message delivered that many times and not acknowledged is a dead letter: the server
	// delivers it no more, and `meshctl watch` counts it.
	MaxDeliver int
}

// defaultAckWait is the server's ack wait for a consumer whose config sets none.
const defaultAckWait = 30 * time.Second

// RedeliveryOf reads a consumer's config, as its info gives it.
func RedeliveryOf(c jetstream.ConsumerConfig) Redelivery {
	r := Redelivery{AckWait: c.AckWait, Backoff: c.BackOff, MaxDeliver: c.MaxDeliver}
	if r.AckWait <= 0 {
		r.AckWait = defaultAckWait
	}
	return r
}

// Wait is how long the server waits, after delivery n of a message (from 1) or the last
// in-progress acknowledgement of it, before it delivers the message again: the backoff's n-th
// interval when the consumer has a backoff (its last for every later delivery), else the ack
// wait.
func (r Redelivery) Wait(n uint64) time.Duration {
	if len(r.Backoff) == 0 {
		return r.AckWait
	}
	i := min(max(n, 1)-1, uint64(len(r.Backoff)-1))
	return r.Backoff[i]
}

// Last reports whether delivery n of a message is its last one: not acknowledged now, it is a
// dead letter.
func (r Redelivery) Last(n uint64) bool { return r.MaxDeliver > 0 && n >= uint64(r.MaxDeliver) }

// Job is a message taken from a consumer with what its consumer's info says of redelivery, and
// which delivery of the message it is.
type Job struct {
	jetstream.Msg
	Redelivery
	// Delivery is which delivery of the message this is, from 1 (NumDelivered in its metadata);
	// 0 when the message carries no metadata.
	Delivery uint64
}

func jobOf(m jetstream.Msg, r Redelivery) Job {
	j := Job{Msg: m, Redelivery: r}
	if md, err := m.Metadata(); err == nil {
		j.Delivery = md.NumDelivered
	}
	return j
}

// Last reports whether this is the message's last delivery: not acknowledged now, it is a dead
// letter, delivered no more.
func (j Job) Last() bool { return j.Redelivery.Last(j.Delivery) }

// progressShare is the share of the wait in force after which Working says again that a job is
// in progress: three chances before the wait runs out, so that one late or lost is not a
// redelivery.
const progressShare = 3

// Working tells the server, until stop is called, that j is still being worked on: an
// in-progress acknowledgement every third of the wait in force for this delivery (Redelivery.Wait),
// so that work longer than the ack wait is not delivered again meanwhile — to this host, or to
// the seat's other holder. Call stop before acknowledging j. stop returns the first in-progress
// acknowledgement that failed (a refusal names its subject), after which none is sent: the job
// will be delivered again once the wait runs out.
func (h *Host) Working(j Job) (stop func() error) {
	every := j.Wait(j.Delivery) / progressShare
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				done <- nil
				return
			case <-t.C:
			}
			if err := h.Check(ctx, func(context.Context) error { return j.InProgress() }); err != nil {
				done <- fmt.Errorf("saying %s is in progress as %q: %w", j.Subject(), h.user, err)
				return
			}
		}
	}()
	var once sync.Once
	var err error
	return func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
}
