package host

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/wire"
)

// InstanceOf is the module instance a user names, `<node>.<module>`; ok is false for the
// controller, a node (`node.<n>`) and an enrolment identity (`enrol.<n>`). Node and module names
// hold no dot, and `node` and `enrol` are reserved node names, so the split is unambiguous.
func InstanceOf(user string) (inst model.Instance, ok bool) {
	node, module, found := strings.Cut(user, ".")
	if !found || node == "" || module == "" || strings.Contains(module, ".") || node == "node" || node == "enrol" {
		return model.Instance{}, false
	}
	return model.Instance{Node: node, Module: module}, true
}

// Publish puts data on subject into the stream that keeps it and returns the stream's
// acknowledgement. It needs only the grant to publish on subject and the host's own inbox, where
// the acknowledgement comes back.
func (h *Host) Publish(ctx context.Context, subject string, data []byte) (*jetstream.PubAck, error) {
	var ack *jetstream.PubAck
	err := h.Check(ctx, func(ctx context.Context) (err error) {
		ack, err = h.js.Publish(ctx, subject, data)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("publishing to %s as %q: %w", subject, h.user, err)
	}
	return ack, nil
}

// Send publishes data on subject on core NATS, without a stream: a heartbeat, an answer. It
// returns once the server has taken it or refused it.
func (h *Host) Send(ctx context.Context, subject string, data []byte) error {
	if err := h.Check(ctx, func(context.Context) error { return h.conn.Publish(subject, data) }); err != nil {
		return fmt.Errorf("sending to %s as %q: %w", subject, h.user, err)
	}
	return nil
}

// Request calls a tool: it sends data to subject and returns the answer, which comes back to the
// host's own inbox.
func (h *Host) Request(ctx context.Context, subject string, data []byte) (*nats.Msg, error) {
	var reply *nats.Msg
	err := h.Check(ctx, func(ctx context.Context) (err error) {
		reply, err = h.conn.RequestWithContext(ctx, subject, data)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("calling %s as %q: %w", subject, h.user, err)
	}
	return reply, nil
}

// Subscribe hears subject live on core NATS: a followed event or a declaration as it is
// published, a tool's requests. A refused subscription is an error naming the subject, and is
// removed.
func (h *Host) Subscribe(ctx context.Context, subject string, handle nats.MsgHandler) (*nats.Subscription, error) {
	return h.subscribe(ctx, subject, "", handle)
}

// QueueSubscribe is Subscribe in a queue group.
func (h *Host) QueueSubscribe(ctx context.Context, subject, queue string, handle nats.MsgHandler) (*nats.Subscription, error) {
	return h.subscribe(ctx, subject, queue, handle)
}

func (h *Host) subscribe(ctx context.Context, subject, queue string, handle nats.MsgHandler) (*nats.Subscription, error) {
	var sub *nats.Subscription
	err := h.Check(ctx, func(context.Context) (err error) {
		if queue == "" {
			sub, err = h.conn.Subscribe(subject, handle)
		} else {
			sub, err = h.conn.QueueSubscribe(subject, queue, handle)
		}
		return err
	})
	if err != nil {
		if sub != nil {
			_ = sub.Unsubscribe()
		}
		return nil, fmt.Errorf("subscribing to %s as %q: %w", subject, h.user, err)
	}
	return sub, nil
}

// Report files a node's report with the controller: persisted in CONTROL until the controller
// takes it.
func (h *Host) Report(ctx context.Context, node string, data []byte) (*jetstream.PubAck, error) {
	return h.Publish(ctx, render.ReportSubject(node), data)
}

// Heartbeat says the node is alive: core NATS, heard by the controller live, nothing persisted.
func (h *Host) Heartbeat(ctx context.Context, node string, data []byte) error {
	return h.Send(ctx, render.HeartbeatSubject(node), data)
}

// Enrol asks, as node's enrolment identity, to enrol with its public key, and returns the
// controller's answer. It listens on a fresh address under its own inbox before it asks, so the
// answer cannot arrive before anyone hears it, and waits until ctx ends.
func (h *Host) Enrol(ctx context.Context, node string, key []byte) (*nats.Msg, error) {
	inbox := h.conn.NewInbox()
	answers := make(chan *nats.Msg, 1)
	sub, err := h.Subscribe(ctx, inbox, func(m *nats.Msg) {
		select {
		case answers <- m:
		default:
		}
	})
	if err != nil {
		return nil, fmt.Errorf("enrolling %s: %w", node, err)
	}
	defer sub.Unsubscribe()
	req, _ := json.Marshal(wire.EnrolRequest{Reply: inbox, Key: key})
	if _, err := h.Publish(ctx, render.EnrolSubject(node), req); err != nil {
		return nil, fmt.Errorf("enrolling %s: %w", node, err)
	}
	select {
	case m := <-answers:
		return m, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("enrolling %s as %q: no answer from the controller: %w", node, h.user, ctx.Err())
	}
}

// AnswerEnrolment answers, as the controller, an enrolment request taken from CONTROL: it sends
// answer to the address the request carries and then acknowledges the request, so a request
// whose answer could not be sent is delivered again.
func (h *Host) AnswerEnrolment(ctx context.Context, request jetstream.Msg, answer []byte) error {
	reply, err := wire.EnrolReply(request.Subject(), request.Data())
	if err != nil {
		return err
	}
	if err := h.Send(ctx, reply, answer); err != nil {
		return fmt.Errorf("answering an enrolment: %w", err)
	}
	return h.Ack(ctx, request)
}
