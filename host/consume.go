package host

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// Consume binds the push consumer stream/consumer and takes its deliveries with handle, in the
// consumer's deliver group when it has one. Binding asks the server about the consumer
// ($JS.API.CONSUMER.INFO.<stream>.<consumer>, the one API call a host is granted) and then
// subscribes its deliver subject; a refusal of either is a *bus.PermissionError in the error
// chain, naming the subject.
//
// handle runs on the connection's delivery goroutine, one message at a time. Stop the returned
// context to stop taking deliveries; messages received and not acknowledged are redelivered
// after the consumer's ack wait.
func (h *Host) Consume(ctx context.Context, stream, consumer string, handle jetstream.MessageHandler) (jetstream.ConsumeContext, error) {
	var cc jetstream.ConsumeContext
	err := h.Check(ctx, func(ctx context.Context) error {
		// PushConsumer, not Stream(...).Consumer: the stream handle asks STREAM.INFO first,
		// which no host is granted.
		pc, err := h.js.PushConsumer(ctx, stream, consumer)
		if err != nil {
			return err
		}
		cc, err = pc.Consume(handle)
		return err
	})
	if err != nil {
		if cc != nil {
			cc.Stop()
		}
		return nil, fmt.Errorf("taking deliveries of consumer %s on stream %s as %q: %w", consumer, stream, h.user, err)
	}
	return cc, nil
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

// Work takes a seat's work, as its holder, from the seat's worker consumer in the worker's queue
// group: the seat is authority, the queue group is delivery, so the day two holders are allowed
// no work is done twice.
func (h *Host) Work(ctx context.Context, seat string, handle jetstream.MessageHandler) (jetstream.ConsumeContext, error) {
	return h.Consume(ctx, render.SeatStreamName(seat), render.WorkerConsumer(seat), handle)
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
// reply subject too, but a reload forgets which replies were owed (NATS-FACTS.md).
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
