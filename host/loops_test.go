package host_test

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/host/hosttest"
	"github.com/meshbus/meshctl/render"
)

// loopJobs are the controller loop's own ways of doing its jobs (package controller), which
// differ from the host package's: it takes CONTROL's deliveries on a plain subscription to its
// deliver subject, feeding a channel, and settles each with an ack, a nak with a delay or a term;
// and it hears every node's heartbeat on one subscription. The agent's loop uses the host
// package's own calls (Declarations, Report, Heartbeat, Ack), which the node's jobs cover.
func loopJobs() []job {
	return []job{
		{user: ctl, name: "as the controller loop: take CONTROL on its deliver subject, hold one report with a delayed nak, then ack it, and term another",
			do: func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
				node, err := b.Join(render.NodeUser("one"))
				if err != nil {
					return helper("node.one", err)
				}
				got := newMessages()
				sub, err := as.Subscribe(ctx, render.DeliverSubject(ctl), got.handle)
				if err != nil {
					return err
				}
				defer unsubscribe(as, sub)
				held, dropped := token("held"), token("dropped")
				for _, tok := range [][]byte{held, dropped} {
					if _, err := node.Report(ctx, "one", tok); err != nil {
						return helper("node.one", err)
					}
				}
				heldDeliveries, acked, termed := 0, false, false
				for !acked || !termed {
					m, err := got.next(ctx)
					if err != nil {
						return err
					}
					switch {
					case bytes.Equal(m.Data, held) && heldDeliveries == 0:
						heldDeliveries++
						err = as.Check(ctx, func(context.Context) error { return m.NakWithDelay(50 * time.Millisecond) })
					case bytes.Equal(m.Data, held):
						err = as.Check(ctx, func(context.Context) error { return m.AckSync() })
						acked = true
					case bytes.Equal(m.Data, dropped):
						err = as.Check(ctx, func(context.Context) error { return m.Term() })
						termed = true
					default: // an earlier job's leftover: not this job's to settle
					}
					if err != nil {
						return err
					}
				}
				return nil
			}},
		{user: ctl, name: "as the controller loop: hear every node's heartbeat on one subscription",
			do: func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
				heard := newMessages()
				sub, err := as.Subscribe(ctx, render.HeartbeatSubject("*"), heard.handle)
				if err != nil {
					return err
				}
				defer unsubscribe(as, sub)
				for _, n := range []string{"one", "two"} {
					node, err := b.Join(render.NodeUser(n))
					if err != nil {
						return helper(render.NodeUser(n), err)
					}
					beat := token("alive")
					if err := node.Heartbeat(ctx, n, beat); err != nil {
						return helper(render.NodeUser(n), err)
					}
					if err := heard.await(ctx, render.HeartbeatSubject(n), beat); err != nil {
						return err
					}
				}
				return nil
			}},
	}
}

// next is the next message heard.
func (m *messages) next(ctx context.Context) (*nats.Msg, error) {
	select {
	case msg := <-m.ch:
		return msg, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("no delivery: %w", ctx.Err())
	}
}
