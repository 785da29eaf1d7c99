package host_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
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
				if err := b.WaitRouted(ctx, as); err != nil {
					return err
				}
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
		// watch's advisory listener: it subscribes to each advisory grant and hears the server
		// announce an object deleted or a stream's config changed. On a probe stream of the job's
		// own, so that the mesh's objects stay as the other jobs need them.
		advisoryJob("as watch: hear a consumer deleted behind its back", render.ConsumerDeletedAdvisories,
			func(ctx context.Context, js jetstream.JetStream, stream string) (string, error) {
				if _, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "probe"}); err != nil {
					return "", err
				}
				return "$JS.EVENT.ADVISORY.CONSUMER.DELETED." + stream + ".probe", js.DeleteConsumer(ctx, stream, "probe")
			}),
		advisoryJob("as watch: hear a stream's config changed behind its back", render.StreamUpdatedAdvisories,
			func(ctx context.Context, js jetstream.JetStream, stream string) (string, error) {
				_, err := js.UpdateStream(ctx, probeStream(stream, "changed"))
				return "$JS.EVENT.ADVISORY.STREAM.UPDATED." + stream, err
			}),
		advisoryJob("as watch: hear a stream deleted behind its back", render.StreamDeletedAdvisories,
			func(ctx context.Context, js jetstream.JetStream, stream string) (string, error) {
				return "$JS.EVENT.ADVISORY.STREAM.DELETED." + stream, js.DeleteStream(ctx, stream)
			}),
		// A message delivered max_deliver times and never acknowledged: the probe's consumer
		// delivers once, and its ack wait runs out. The probe takes a subject the controller may
		// publish on, under mesh.node. but beside NODES' declarations.
		advisoryJob("as watch: count a message past its consumer's max_deliver", render.MaxDeliveriesAdvisories,
			func(ctx context.Context, js jetstream.JetStream, stream string) (string, error) {
				cfg := probeStream(stream, "")
				cfg.Subjects = []string{"mesh.node." + strings.ToLower(stream) + ".probe"}
				if _, err := js.UpdateStream(ctx, cfg); err != nil {
					return "", err
				}
				c, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "probe", AckPolicy: jetstream.AckExplicitPolicy,
					MaxDeliver: 1, AckWait: 50 * time.Millisecond})
				if err != nil {
					return "", err
				}
				if _, err := js.Publish(ctx, cfg.Subjects[0], []byte("never acknowledged")); err != nil {
					return "", err
				}
				batch, err := c.Fetch(1, jetstream.FetchMaxWait(jobTimeout))
				if err != nil {
					return "", err
				}
				for range batch.Messages() {
				}
				return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + stream + ".probe", batch.Error()
			}),
	}
}

func probeStream(name, description string) jetstream.StreamConfig {
	return jetstream.StreamConfig{Name: name, Subjects: []string{"probe." + name}, Description: description, Storage: jetstream.MemoryStorage}
}

// advisoryJob subscribes as watch does to subject, makes a probe stream, changes it with act,
// and waits for the advisory act says the server sends.
func advisoryJob(name, subject string, act func(ctx context.Context, js jetstream.JetStream, stream string) (string, error)) job {
	return job{user: ctl, name: name, do: func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		heard := newMessages()
		sub, err := as.Subscribe(ctx, subject, heard.handle)
		if err != nil {
			return err
		}
		defer unsubscribe(as, sub)
		// The advisory comes from whichever server leads the probe stream.
		if err := b.WaitRouted(ctx, as); err != nil {
			return err
		}
		stream := "PROBE_" + rand.Text()
		js := as.JetStream()
		var want string
		if err := as.Check(ctx, func(ctx context.Context) error {
			if _, err := js.CreateStream(ctx, probeStream(stream, "")); err != nil {
				return err
			}
			want, err = act(ctx, js, stream)
			return err
		}); err != nil {
			return err
		}
		// Gone already when the job deleted it.
		defer func() { _ = js.DeleteStream(context.WithoutCancel(ctx), stream) }()
		for {
			m, err := heard.next(ctx)
			if err != nil {
				return fmt.Errorf("no advisory on %s: %w", want, err)
			}
			if m.Subject == want {
				return nil
			}
		}
	}}
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
