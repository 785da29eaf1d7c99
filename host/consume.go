package host

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// Consume binds the consumer stream/consumer and takes its messages with handle, whichever kind
// the mesh derives (bus.consumers). Binding asks the server about the consumer
// ($JS.API.CONSUMER.INFO.<stream>.<consumer>, the one API call a host is granted), whose answer
// says the kind: a push consumer has a deliver subject, which Consume subscribes, in the
// consumer's deliver group when it has one; a pull consumer is asked for messages on
// $JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>, answered on the host's inbox. So a host needs
// to be told nothing about the mode, and a mesh that changes it needs no new membership. A
// refusal of the binding, the subscription or the first pull request is a *busclient.PermissionError
// in the error chain, naming the subject.
//
// handle runs on the library's delivery goroutine, one message at a time. Stop the returned
// context to stop taking messages; messages received and not acknowledged are redelivered after
// the consumer's ack wait. A host whose work may outlast the ack wait takes Jobs instead
// (ConsumeJobs), which carry it.
func (h *Host) Consume(ctx context.Context, stream, consumer string, handle jetstream.MessageHandler) (jetstream.ConsumeContext, error) {
	cc, _, err := h.ConsumeJobs(ctx, stream, consumer, func(j Job) { handle(j.Msg) })
	return cc, err
}

// ConsumeJobs is Consume handing each message as a Job: with its consumer's Redelivery, as the
// info the binding asked for says it, and which delivery of the message it is. It returns that
// Redelivery too. A consumer changed while the host runs is read again when it binds again.
func (h *Host) ConsumeJobs(ctx context.Context, stream, consumer string, handle func(Job)) (jetstream.ConsumeContext, Redelivery, error) {
	var cc jetstream.ConsumeContext
	var r Redelivery
	err := h.Check(ctx, func(ctx context.Context) error {
		b, err := lookUp(ctx, h.js, stream, consumer)
		if err != nil {
			return err
		}
		r = RedeliveryOf(b.info.Config)
		cc, err = b.start(func(m jetstream.Msg) { handle(jobOf(m, r)) })
		return err
	})
	if err != nil {
		if cc != nil {
			cc.Stop()
		}
		return nil, Redelivery{}, fmt.Errorf("taking messages of consumer %s on stream %s as %q: %w", consumer, stream, h.user, err)
	}
	return cc, r, nil
}

// Bind binds the existing consumer stream/consumer over js and takes its messages with handle,
// pushed or pulled as the consumer's info says (see Host.Consume, which also reports a refusal
// as the error), and says which kind it bound: model.ConsumersPull or model.ConsumersPush. It
// asks the server nothing but CONSUMER.INFO before it starts taking.
func Bind(ctx context.Context, js jetstream.JetStream, stream, consumer string, handle jetstream.MessageHandler) (jetstream.ConsumeContext, string, error) {
	b, err := lookUp(ctx, js, stream, consumer)
	if err != nil {
		return nil, "", err
	}
	cc, err := b.start(handle)
	return cc, b.kind, err
}

// ConsumerInfo is what the server says of the consumer stream/consumer, whichever kind it is,
// asking CONSUMER.INFO only.
func ConsumerInfo(ctx context.Context, js jetstream.JetStream, stream, consumer string) (*jetstream.ConsumerInfo, error) {
	b, err := lookUp(ctx, js, stream, consumer)
	if err != nil {
		return nil, err
	}
	return b.info, nil
}

// found is a consumer looked up for binding: what the server said of it, its kind, and how to
// start taking its messages.
type found struct {
	info  *jetstream.ConsumerInfo
	kind  string
	start func(jetstream.MessageHandler) (jetstream.ConsumeContext, error)
}

// lookUp asks the server about the consumer stream/consumer, as what it is. Consumer and
// PushConsumer, not Stream(...).Consumer: the stream handle asks STREAM.INFO first, which no
// host is granted. Each asks CONSUMER.INFO and refuses the other kind, so a push consumer costs
// a second INFO.
func lookUp(ctx context.Context, js jetstream.JetStream, stream, consumer string) (found, error) {
	c, err := js.Consumer(ctx, stream, consumer)
	if errors.Is(err, jetstream.ErrNotPullConsumer) {
		pc, err := js.PushConsumer(ctx, stream, consumer)
		if err != nil {
			return found{}, err
		}
		return found{info: pc.CachedInfo(), kind: model.ConsumersPush, start: func(handle jetstream.MessageHandler) (jetstream.ConsumeContext, error) {
			return pc.Consume(handle)
		}}, nil
	}
	if err != nil {
		return found{}, err
	}
	return found{info: c.CachedInfo(), kind: model.ConsumersPull, start: func(handle jetstream.MessageHandler) (jetstream.ConsumeContext, error) {
		return c.Consume(handle)
	}}, nil
}

// Declarations takes node's declarations from its consumer on NODES: what the controller
// declares the node should run, the latest per node.
func (h *Host) Declarations(ctx context.Context, node string, handle jetstream.MessageHandler) (jetstream.ConsumeContext, error) {
	return h.Consume(ctx, render.StreamNodes, node, handle)
}

// Events takes the events a module instance follows from its consumer on EVENTS,
// `<node>_<module>`, which carries every followed event as a filter. A module that follows
// nothing has no consumer, and no grant to ask about one.
func (h *Host) Events(ctx context.Context, inst model.Instance, handle jetstream.MessageHandler) (jetstream.ConsumeContext, error) {
	return h.Consume(ctx, render.StreamEvents, render.InstanceConsumer(inst), handle)
}

// Work takes a seat's work, as its holder, from the seat's worker consumer: in the worker's queue
// group when it pushes, as one of its pullers when it is pulled. The seat is authority, the
// queue group or the shared durable is delivery, so the day two holders are allowed no work is
// done twice.
func (h *Host) Work(ctx context.Context, seat string, handle jetstream.MessageHandler) (jetstream.ConsumeContext, error) {
	return h.Consume(ctx, render.SeatStreamName(seat), render.WorkerConsumer(seat), handle)
}

// WorkJobs is Work handing each piece of work as a Job, for work that may outlast the worker's
// ack wait (Host.Working) or must know its last delivery (Job.Last).
func (h *Host) WorkJobs(ctx context.Context, seat string, handle func(Job)) (jetstream.ConsumeContext, Redelivery, error) {
	return h.ConsumeJobs(ctx, render.SeatStreamName(seat), render.WorkerConsumer(seat), handle)
}

// ControllerInbox takes, as the controller, nodes' reports and enrolment requests from its
// consumer on CONTROL.
func (h *Host) ControllerInbox(ctx context.Context, handle jetstream.MessageHandler) (jetstream.ConsumeContext, error) {
	return h.Consume(ctx, render.StreamControl, render.ControllerUser, handle)
}

// ControllerEvents takes, as the controller, the events it follows from its consumer on EVENTS.
func (h *Host) ControllerEvents(ctx context.Context, handle jetstream.MessageHandler) (jetstream.ConsumeContext, error) {
	return h.Consume(ctx, render.StreamEvents, render.ControllerUser, handle)
}

// Ack acknowledges msg and waits for the server to confirm it took the acknowledgement. A refused
// ack is an error naming the ack subject, not a redelivery thirty seconds later that looks like
// the work was lost.
//
// It works across a reload of the bus because the principal is granted its consumer's
// `$JS.ACK.<stream>.<consumer>.>` outright: allow_responses would let it answer a delivery's
// reply subject too, but a reload forgets which replies were owed (docs/nats-behaviour.md).
func (h *Host) Ack(ctx context.Context, msg jetstream.Msg) error {
	if err := h.Check(ctx, msg.DoubleAck); err != nil {
		return fmt.Errorf("acknowledging %s as %q: %w", msg.Subject(), h.user, err)
	}
	return nil
}

// Nak asks for msg to be delivered again, at once.
func (h *Host) Nak(ctx context.Context, msg jetstream.Msg) error {
	if err := h.Check(ctx, func(context.Context) error { return msg.Nak() }); err != nil {
		return fmt.Errorf("asking again for %s as %q: %w", msg.Subject(), h.user, err)
	}
	return nil
}

// Term gives msg up: it is never delivered again, and on a work queue it leaves the stream.
func (h *Host) Term(ctx context.Context, msg jetstream.Msg) error {
	if err := h.Check(ctx, func(context.Context) error { return msg.Term() }); err != nil {
		return fmt.Errorf("giving up %s as %q: %w", msg.Subject(), h.user, err)
	}
	return nil
}
