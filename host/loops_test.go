package host_test

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/host/hosttest"
	"github.com/meshbus/meshctl/render"
)

// loopJobs are the controller loop's own ways of doing its jobs (package controller), which
// differ from the host package's: it binds CONTROL with host.Bind on its own connection, feeding
// a channel, and settles each delivery with an ack, a nak with a delay or a term; and it hears
// every node's heartbeat on one subscription. The agent's loop uses the host package's own calls
// (Declarations, Report, Heartbeat, Ack), which the node's jobs cover.
func loopJobs() []job {
	return []job{
		{user: ctl, name: "as the controller loop: take CONTROL, hold one report with a delayed nak, then ack it, and term another",
			do: func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
				node, err := b.Join(render.NodeUser("one"))
				if err != nil {
					return helper("node.one", err)
				}
				got := newDeliveries()
				var cc jetstream.ConsumeContext
				if err := as.Check(ctx, func(ctx context.Context) (err error) {
					cc, _, err = host.Bind(ctx, as.JetStream(), render.StreamControl, ctl, got.handle)
					return err
				}); err != nil {
					return err
				}
				defer stop(as, cc)
				held, dropped := token("held"), token("dropped")
				for _, tok := range [][]byte{held, dropped} {
					if _, err := node.Report(ctx, "one", tok); err != nil {
						return helper("node.one", err)
					}
				}
				heldDeliveries, acked, termed := 0, false, false
				for !acked || !termed {
					var m jetstream.Msg
					select {
					case m = <-got.ch:
					case <-ctx.Done():
						return fmt.Errorf("no delivery: %w", ctx.Err())
					}
					switch {
					case bytes.Equal(m.Data(), held) && heldDeliveries == 0:
						heldDeliveries++
						err = as.Check(ctx, func(context.Context) error { return m.NakWithDelay(50 * time.Millisecond) })
					case bytes.Equal(m.Data(), held):
						err = as.Check(ctx, m.DoubleAck)
						acked = true
					case bytes.Equal(m.Data(), dropped):
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
