package host_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/host/hosttest"
	"github.com/meshbus/meshctl/jsapi"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/replica"
	"github.com/meshbus/meshctl/state"
)

// job is one thing a principal of the matrix mesh exists to do, done end to end against a live
// bus as that principal (as), with counterparts joined as themselves. It returns nil when the
// job is done; the principal's own *busclient.PermissionError (in the chain) when the server refused
// it something; an error wrapping errHelper when a counterpart failed.
type job struct {
	user string
	name string
	do   func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error
}

// The matrix mesh's names, spelled once.
const (
	telegramSender = "telegram-sender"
	buildMachine   = "mesh-build-machine"
	ctl            = render.ControllerUser
)

var (
	orderPlaced = render.ModuleEvent("shop", "order.placed")
	upgraded    = render.ModuleEvent("mesh-catalog", "upgraded")
	catchingUp  = render.ModuleEvent("mesh-catalog", "catching-up")
	delivered   = render.SeatEvent(telegramSender, "delivered")
	failed      = render.SeatEvent(telegramSender, "failed")
	built       = render.SeatEvent(buildMachine, "built")
	sendWork    = render.AcceptSubject(telegramSender, "send")
	buildWork   = render.AcceptSubject(buildMachine, "build")
	status      = render.ModuleTool("telegram", "status")
	queueTool   = render.SeatTool(telegramSender, "queue")
)

// jobs lists every job of every principal of the matrix mesh.
func jobs() []job {
	var js []job
	add := func(user, name string, do func(context.Context, *hosttest.Mesh, *host.Host) error) {
		js = append(js, job{user: user, name: name, do: do})
	}

	// The controller.
	add(ctl, "read the streams and consumers it created, and plan nothing", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		api, err := jsapi.New(as.Conn().Conn)
		if err != nil {
			return err
		}
		var live plan.Live
		if err := as.Check(ctx, func(ctx context.Context) (err error) {
			live, err = reconcile.ReadLive(ctx, api, b.AccountsFile(), b.Desired.Holding)
			return err
		}); err != nil {
			return err
		}
		for _, c := range plan.Compute(b.Target(), live, plan.Options{}).Changes {
			// The accounts config is whatever the test installed; the streams are the job.
			if c.Kind != plan.KindAccounts {
				return fmt.Errorf("a converged bus plans %s %s", c.Action, c.ID())
			}
		}
		return nil
	})
	add(ctl, "take a node's report and ack it after a reload", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		return consume(ctx, b, as, as.ControllerInbox, nil, func(ctx context.Context) ([][]byte, error) {
			node, err := b.Join(render.NodeUser("one"))
			if err != nil {
				return nil, helper("node.one", err)
			}
			tok := token("report")
			_, err = node.Report(ctx, "one", tok)
			return [][]byte{tok}, helper("node.one", err)
		})
	})
	add(ctl, "answer an enrolment at the address its payload carries", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		ident, err := b.Join(render.EnrolUser("one"))
		if err != nil {
			return helper("enrol.one", err)
		}
		return enrolment(ctx, "one", ident, as, asHelper("enrol.one"), mine)
	})
	add(ctl, "hear a heartbeat live; nothing is persisted", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		node, err := b.Join(render.NodeUser("one"))
		if err != nil {
			return helper("node.one", err)
		}
		return heartbeat(ctx, b, "one", node, as, asHelper("node.one"), mine)
	})
	add(ctl, "declare to a node", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		return emit(ctx, as, render.StreamNodes, render.DeclareSubject("one"), render.DeclareSubject("two"))
	})
	add(ctl, "take exactly the events it follows and ack them after a reload", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		return consume(ctx, b, as, as.ControllerEvents, []string{catchingUp, upgraded, built}, func(ctx context.Context) ([][]byte, error) {
			return counterparts(ctx, b,
				published{"one.telegram", delivered, nil}, // followed by others only
				published{"one.mesh-catalog", catchingUp, token("catching-up")},
				published{"one.mesh-catalog", upgraded, token("upgraded")},
				published{"two.builder", built, token("built")})
		})
	})
	add(ctl, "hear the events it follows live", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		return hear(ctx, b, as, map[string]string{catchingUp: "one.mesh-catalog", upgraded: "one.mesh-catalog", built: "two.builder"})
	})
	add(ctl, "send work to a seat", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		return emit(ctx, as, render.SeatStreamName(buildMachine), buildWork)
	})
	add(ctl, "call a module's tool", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		return call(ctx, b, as, status, "one.telegram")
	})
	add(ctl, "keep the store on the bus, and read it back", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		return as.Check(ctx, func(ctx context.Context) error {
			kv, err := replica.Open(ctx, as.JetStream(), b.Model.Bus.Replicas)
			if err != nil {
				return err
			}
			row := state.Record{Key: "credential.two.shop", Value: token("hash")}
			if err := kv.Write(ctx, []state.Record{row, {Key: "revocation.two.shop"}}); err != nil {
				return err
			}
			got, err := kv.ReadAll(ctx)
			if err != nil {
				return err
			}
			if !slices.ContainsFunc(got, func(r state.Record) bool { return r.Key == row.Key && bytes.Equal(r.Value, row.Value) }) {
				return fmt.Errorf("the store's bucket reads back %d records, not the one written", len(got))
			}
			return nil
		})
	})
	add(ctl, "hold the lead and the apply lock on the bus", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		return as.Check(ctx, func(ctx context.Context) error {
			ls, err := replica.OpenLeases(ctx, as.JetStream(), b.Model.Bus.Replicas)
			if err != nil {
				return err
			}
			l, err := ls.Acquire(ctx, replica.LockKey, replica.Me("matrix", "copy", "apply"))
			if err != nil {
				return err
			}
			defer l.Release(ctx)
			if _, _, ok, err := ls.Read(ctx, replica.LockKey); err != nil || !ok {
				return fmt.Errorf("the apply lock reads back as not held (%v)", err)
			}
			return nil
		})
	})

	// Each node, and its enrolment identity.
	for _, n := range []string{"one", "two"} {
		user := render.NodeUser(n)
		add(user, "take its declaration and ack it after a reload", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
			bind := func(ctx context.Context, h jetstream.MessageHandler) (jetstream.ConsumeContext, error) {
				return as.Declarations(ctx, n, h)
			}
			return consume(ctx, b, as, bind, []string{render.DeclareSubject(n)}, func(ctx context.Context) ([][]byte, error) {
				return counterparts(ctx, b, published{ctl, render.DeclareSubject(n), token("declaration")})
			})
		})
		add(user, "hear its declaration live", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
			return hear(ctx, b, as, map[string]string{render.DeclareSubject(n): ctl})
		})
		add(user, "report to the controller, who takes it", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
			c, err := b.Join(ctl)
			if err != nil {
				return helper(ctl, err)
			}
			d := newDeliveries()
			cc, err := c.ControllerInbox(ctx, d.handle)
			if err != nil {
				return helper(ctl, err)
			}
			defer stop(c, cc)
			tok := token("report")
			if ack, err := as.Report(ctx, n, tok); err != nil {
				return err
			} else if ack.Stream != render.StreamControl {
				return fmt.Errorf("the report went to %s, not CONTROL", ack.Stream)
			}
			m, err := d.await(ctx, tok, nil)
			if err != nil {
				return helper(ctl, err)
			}
			return helper(ctl, c.Ack(ctx, m))
		})
		add(user, "heartbeat: heard by the controller, nothing persisted", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
			c, err := b.Join(ctl)
			if err != nil {
				return helper(ctl, err)
			}
			return heartbeat(ctx, b, n, as, c, mine, asHelper(ctl))
		})
		add(render.EnrolUser(n), "ask to enrol and hear the answer", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
			c, err := b.Join(ctl)
			if err != nil {
				return helper(ctl, err)
			}
			return enrolment(ctx, n, as, c, mine, asHelper(ctl))
		})
	}

	// telegram on one: holds telegram-sender, serves status.
	add("one.telegram", "take the seat's work in its queue group: nak, then ack and term after a reload", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		return work(ctx, b, as)
	})
	add("one.telegram", "hear the seat's work live", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		return hear(ctx, b, as, map[string]string{sendWork: "two.shop"})
	})
	add("one.telegram", "report the seat's events", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		return emit(ctx, as, render.StreamEvents, delivered, failed)
	})
	add("one.telegram", "serve its tool", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		return serve(ctx, b, as, status, "two.shop")
	})
	add("one.telegram", "serve the seat's tool", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		return serve(ctx, b, as, queueTool, "one.mesh-catalog")
	})

	// shop on two: emits, sends work, calls a tool, follows a seat event.
	shop := model.Instance{Node: "two", Module: "shop"}
	add("two.shop", "emit its event", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		return emit(ctx, as, render.StreamEvents, orderPlaced)
	})
	add("two.shop", "send work to a seat", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		return emit(ctx, as, render.SeatStreamName(telegramSender), sendWork)
	})
	add("two.shop", "call a module's tool", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		return call(ctx, b, as, status, "one.telegram")
	})
	add("two.shop", "take exactly the events it follows and ack them after a reload", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		return consume(ctx, b, as, events(as, shop), []string{delivered}, func(ctx context.Context) ([][]byte, error) {
			return counterparts(ctx, b,
				published{"one.telegram", failed, nil},
				published{"one.telegram", delivered, token("delivered")})
		})
	})
	add("two.shop", "hear the events it follows live", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		return hear(ctx, b, as, map[string]string{delivered: "one.telegram"})
	})

	// audit on two: follows a module's event and a seat's.
	audit := model.Instance{Node: "two", Module: "audit"}
	add("two.audit", "take exactly the events it follows and ack them after a reload", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		return consume(ctx, b, as, events(as, audit), []string{orderPlaced, failed}, func(ctx context.Context) ([][]byte, error) {
			return counterparts(ctx, b,
				published{"one.mesh-catalog", upgraded, nil},
				published{"one.telegram", delivered, nil},
				published{"two.shop", orderPlaced, token("order")},
				published{"one.telegram", failed, token("failed")})
		})
	})
	add("two.audit", "hear the events it follows live", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		return hear(ctx, b, as, map[string]string{orderPlaced: "two.shop", failed: "one.telegram"})
	})

	// mesh-catalog on one: emits, calls a seat's tool.
	add("one.mesh-catalog", "emit its events", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		return emit(ctx, as, render.StreamEvents, catchingUp, upgraded)
	})
	add("one.mesh-catalog", "call a seat's tool", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		return call(ctx, b, as, queueTool, "one.telegram")
	})

	// builder on two: holds mesh-build-machine.
	add("two.builder", "take the seat's work in its queue group and ack it after a reload", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		bind := func(ctx context.Context, h jetstream.MessageHandler) (jetstream.ConsumeContext, error) {
			return as.Work(ctx, buildMachine, h)
		}
		return consume(ctx, b, as, bind, []string{buildWork}, func(ctx context.Context) ([][]byte, error) {
			return counterparts(ctx, b, published{ctl, buildWork, token("build")})
		})
	})
	add("two.builder", "hear the seat's work live", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		return hear(ctx, b, as, map[string]string{buildWork: ctl})
	})
	add("two.builder", "report the seat's event", func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
		return emit(ctx, as, render.StreamEvents, built)
	})
	return append(append(js, loopJobs()...), observerJobs()...)
}

// mine passes the principal's own errors on as they are; asHelper marks a counterpart's.
func mine(err error) error { return err }

func asHelper(who string) func(error) error {
	return func(err error) error { return helper(who, err) }
}

func events(as *host.Host, inst model.Instance) func(context.Context, jetstream.MessageHandler) (jetstream.ConsumeContext, error) {
	return func(ctx context.Context, h jetstream.MessageHandler) (jetstream.ConsumeContext, error) {
		return as.Events(ctx, inst, h)
	}
}

// published is a message a counterpart publishes into a stream; a nil data is a message the
// consumer under test must not be handed (it sets none to look for).
type published struct {
	user, subject string
	data          []byte
}

// counterparts publishes each message as its user, in order, and returns the data the consumer
// under test must receive.
func counterparts(ctx context.Context, b *hosttest.Mesh, msgs ...published) ([][]byte, error) {
	var want [][]byte
	for _, p := range msgs {
		data := p.data
		if data == nil {
			data = token("not-followed")
		} else {
			want = append(want, data)
		}
		h, err := b.Join(p.user)
		if err == nil {
			_, err = h.Publish(ctx, p.subject, data)
		}
		if err != nil {
			return nil, helper(p.user, err)
		}
	}
	return want, nil
}

// consume is every consumer job: bind as the principal, have counterparts publish, take each
// wanted delivery (each delivery's subject one of only, when only is set: the consumer carries
// exactly the principal's filters), then reload the bus and ack them. The reload is what makes
// the explicit $JS.ACK grant necessary: it resets allow_responses, which would otherwise let a
// principal that serves tools ack its deliveries without one.
func consume(ctx context.Context, b *hosttest.Mesh, as *host.Host,
	bind func(context.Context, jetstream.MessageHandler) (jetstream.ConsumeContext, error),
	only []string, publish func(context.Context) ([][]byte, error)) error {
	d := newDeliveries()
	cc, err := bind(ctx, d.handle)
	if err != nil {
		return err
	}
	defer stop(as, cc)
	want, err := publish(ctx)
	if err != nil {
		return err
	}
	var stray []string
	seen := func(m jetstream.Msg) {
		if only != nil && !slices.Contains(only, m.Subject()) {
			stray = append(stray, m.Subject())
		}
	}
	var got []jetstream.Msg
	for _, data := range want {
		m, err := d.await(ctx, data, seen)
		if err != nil {
			return err
		}
		got = append(got, m)
	}
	if len(stray) > 0 {
		return fmt.Errorf("delivered %v, which it does not follow", stray)
	}
	if err := b.Reload(ctx); err != nil {
		return err
	}
	for _, m := range got {
		if err := as.Ack(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

// hear subscribes as the principal to each subject on core NATS, has the subject's publisher
// publish into its stream, and hears each.
func hear(ctx context.Context, b *hosttest.Mesh, as *host.Host, publishers map[string]string) error {
	heard := newMessages()
	subjects := make([]string, 0, len(publishers))
	for s := range publishers {
		subjects = append(subjects, s)
	}
	slices.Sort(subjects)
	for _, s := range subjects {
		sub, err := as.Subscribe(ctx, s, heard.handle)
		if err != nil {
			return err
		}
		defer unsubscribe(as, sub)
	}
	if err := b.WaitRouted(ctx, as); err != nil {
		return err
	}
	for _, s := range subjects {
		data := token("live")
		h, err := b.Join(publishers[s])
		if err == nil {
			_, err = h.Publish(ctx, s, data)
		}
		if err != nil {
			return helper(publishers[s], err)
		}
		if err := heard.await(ctx, s, data); err != nil {
			return err
		}
	}
	return nil
}

// emit publishes on each subject as the principal and checks the stream that kept it.
func emit(ctx context.Context, as *host.Host, stream string, subjects ...string) error {
	for _, s := range subjects {
		ack, err := as.Publish(ctx, s, token("emit"))
		if err != nil {
			return err
		}
		if ack.Stream != stream {
			return fmt.Errorf("%s was kept by %s, not %s", s, ack.Stream, stream)
		}
	}
	return nil
}

// call has server answer subject and calls it as the principal.
func call(ctx context.Context, b *hosttest.Mesh, as *host.Host, subject, server string) error {
	srv, err := b.Join(server)
	if err != nil {
		return helper(server, err)
	}
	answer := token("answer")
	sub, err := srv.Subscribe(ctx, subject, func(m *nats.Msg) { _ = m.Respond(answer) })
	if err != nil {
		return helper(server, err)
	}
	defer unsubscribe(srv, sub)
	if err := b.WaitRouted(ctx, srv); err != nil {
		return helper(server, err)
	}
	reply, err := as.Request(ctx, subject, []byte("?"))
	if err != nil {
		return err
	}
	if !bytes.Equal(reply.Data, answer) {
		return fmt.Errorf("%s answered %q", subject, reply.Data)
	}
	return nil
}

// serve answers subject as the principal while caller calls it. The answer is the principal's
// publish to the caller's inbox, allowed by allow_responses alone, so the call runs under the
// principal's Check: a refused answer is reported on the principal's connection.
func serve(ctx context.Context, b *hosttest.Mesh, as *host.Host, subject, caller string) error {
	answer := token("answer")
	sub, err := as.Subscribe(ctx, subject, func(m *nats.Msg) { _ = m.Respond(answer) })
	if err != nil {
		return err
	}
	defer unsubscribe(as, sub)
	if err := b.WaitRouted(ctx, as); err != nil {
		return err
	}
	c, err := b.Join(caller)
	if err != nil {
		return helper(caller, err)
	}
	return as.Check(ctx, func(ctx context.Context) error {
		reply, err := c.Request(ctx, subject, []byte("?"))
		if err != nil {
			return helper(caller, err)
		}
		if !bytes.Equal(reply.Data, answer) {
			return fmt.Errorf("%s answered %q", subject, reply.Data)
		}
		return nil
	})
}

// controlLastSeq is the sequence of the last message CONTROL took, read as the controller: unlike
// how many it holds, it does not fall when an earlier job's ack, applied meanwhile by the
// stream's replicas, takes a message out.
func controlLastSeq(ctx context.Context, c *host.Host) (uint64, error) {
	var n uint64
	err := c.Check(ctx, func(ctx context.Context) error {
		s, err := c.JetStream().Stream(ctx, render.StreamControl)
		if err != nil {
			return err
		}
		n = s.CachedInfo().State.LastSeq
		return nil
	})
	return n, err
}

// heartbeat has node's host heartbeat and the controller hear it on its core subscription to
// mesh.control.>, with CONTROL taking no message meanwhile.
func heartbeat(ctx context.Context, b *hosttest.Mesh, node string, nodeHost, c *host.Host, nodeErr, ctlErr func(error) error) error {
	before, err := controlLastSeq(ctx, c)
	if err != nil {
		return ctlErr(err)
	}
	heard := newMessages()
	sub, err := c.Subscribe(ctx, "mesh.control.>", heard.handle)
	if err != nil {
		return ctlErr(err)
	}
	defer unsubscribe(c, sub)
	if err := b.WaitRouted(ctx, c); err != nil {
		return ctlErr(err)
	}
	beat := token("alive")
	if err := nodeHost.Heartbeat(ctx, node, beat); err != nil {
		return nodeErr(err)
	}
	if err := heard.await(ctx, render.HeartbeatSubject(node), beat); err != nil {
		return ctlErr(err)
	}
	after, err := controlLastSeq(ctx, c)
	if err != nil {
		return ctlErr(err)
	}
	if after != before {
		return fmt.Errorf("CONTROL's last message was %d before the heartbeat and %d after: a heartbeat was persisted", before, after)
	}
	return nil
}

// enrolment has ident ask to enrol node while the controller c takes CONTROL's deliveries and
// answers every enrolment request of node — those of earlier, abandoned attempts too, whose
// askers no longer listen — until ident hears its answer.
func enrolment(ctx context.Context, node string, ident, c *host.Host, identErr, ctlErr func(error) error) error {
	d := newDeliveries()
	cc, err := c.ControllerInbox(ctx, d.handle)
	if err != nil {
		return ctlErr(err)
	}
	defer stop(c, cc)
	answer := token("welcome")
	type result struct {
		msg *nats.Msg
		err error
	}
	asked := make(chan result, 1)
	askCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		m, err := ident.Enrol(askCtx, node, nil)
		asked <- result{m, err}
	}()
	for {
		select {
		case r := <-asked:
			if r.err != nil {
				return identErr(r.err)
			}
			if !bytes.Equal(r.msg.Data, answer) {
				return fmt.Errorf("the enrolment answer was %q", r.msg.Data)
			}
			return nil
		case m := <-d.ch:
			if m.Subject() != render.EnrolSubject(node) {
				continue // a report: another job's to take
			}
			if err := c.AnswerEnrolment(ctx, m, answer); err != nil {
				cancel()
				<-asked
				return ctlErr(err)
			}
		case <-ctx.Done():
			<-asked
			return ctx.Err()
		}
	}
}

// work is the holder's whole protocol on telegram-sender's queue: shop sends three pieces of
// work; the holder naks one and takes it again, then, after a reload, acks two and terms the
// third; every one leaves the work queue.
func work(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
	d := newDeliveries()
	cc, err := as.Work(ctx, telegramSender, d.handle)
	if err != nil {
		return err
	}
	defer stop(as, cc)
	want, err := counterparts(ctx, b,
		published{"two.shop", sendWork, token("ack")},
		published{"two.shop", sendWork, token("nak")},
		published{"two.shop", sendWork, token("term")})
	if err != nil {
		return err
	}
	var got []jetstream.Msg
	for _, data := range want {
		m, err := d.await(ctx, data, nil)
		if err != nil {
			return err
		}
		got = append(got, m)
	}
	if err := as.Nak(ctx, got[1]); err != nil {
		return err
	}
	again, err := d.await(ctx, want[1], nil)
	if err != nil {
		return fmt.Errorf("naked work was not delivered again: %w", err)
	}
	if meta, err := again.Metadata(); err != nil || meta.NumDelivered < 2 {
		return fmt.Errorf("naked work came back as a first delivery (%+v, %v)", meta, err)
	}
	got[1] = again
	if err := b.Reload(ctx); err != nil {
		return err
	}
	if err := as.Ack(ctx, got[0]); err != nil {
		return err
	}
	if err := as.Ack(ctx, got[1]); err != nil {
		return err
	}
	if err := as.Term(ctx, got[2]); err != nil {
		return err
	}
	c, err := b.Join(ctl)
	if err == nil {
		err = leftQueue(ctx, c, render.SeatStreamName(telegramSender), got...)
	}
	return helper(ctl, err)
}

// leftQueue waits until each message is gone from its work queue, asking as the controller: an
// ack or a term is applied by the server after the client has sent it, so there is nothing to
// block on but the stream itself.
func leftQueue(ctx context.Context, c *host.Host, stream string, msgs ...jetstream.Msg) error {
	s, err := c.JetStream().Stream(ctx, stream)
	if err != nil {
		return err
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for _, m := range msgs {
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		for {
			_, err := s.GetMsg(ctx, meta.Sequence.Stream)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				return err
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return fmt.Errorf("work %d is still in %s: %w", meta.Sequence.Stream, stream, ctx.Err())
			}
		}
	}
	return nil
}
