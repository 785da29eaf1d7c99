package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
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

// EnrolRequest is the payload of an enrolment request. The request is kept in CONTROL, a work
// queue, and reaches the controller through its consumer, which carries no reply subject of the
// requester's; so the request says in its payload where the answer goes: an address under the
// enrolment identity's own inbox, the only thing it may hear.
type EnrolRequest struct {
	Reply string `json:"reply"`
	// Key is the public key the node's membership is to be sealed to: the answer travels over a
	// bus the controller and the enrolling node share with everyone, and only the node can open it.
	Key []byte `json:"key,omitempty"`
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
	req, _ := json.Marshal(EnrolRequest{Reply: inbox, Key: key})
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

// ErrNotEnrolment is returned (wrapped) for a message that is not a well-formed enrolment
// request of the node its subject names.
var ErrNotEnrolment = errors.New("not an enrolment request")

// MaxEnrolReplyLen bounds an enrolment request's answer address, in bytes. The controller
// publishes there, and the server closes for good a connection that sends a protocol line
// longer than its max_control_line (4,096 bytes by default): "PUB", the address and the size
// on one line. An inbox as nats.go makes it is `_INBOX.enrol.<node>.` and 22 characters, under
// 70 bytes for the longest node name the model allows; 256 leaves room for another library's
// spelling of an inbox (a request token after it) and stays far below the line.
const MaxEnrolReplyLen = 256

// MaxEnrolRequestSize bounds an enrolment request's payload, in bytes: an address of
// MaxEnrolReplyLen and a key of 44 base64 characters, in JSON, take a few hundred. It is checked
// before the payload is read, so a request of the server's megabyte costs nothing to refuse.
const MaxEnrolRequestSize = 1024

// EnrolReply is where an enrolment request asks its answer to go. The address must lie under
// the inbox of the enrolment identity of the node the request's subject names: the controller
// may publish anywhere under `_INBOX.enrol.>`, and a request must not steer it to another node's
// enrolment, or anywhere else. It must also be an address the controller can publish to without
// losing its connection: at most MaxEnrolReplyLen bytes, every token a subject token (see
// replyToken), so neither a wildcard nor an overlong line reaches the server.
func EnrolReply(subject string, payload []byte) (string, error) {
	rest, ok := strings.CutPrefix(subject, "mesh.control.")
	node, what, _ := strings.Cut(rest, ".")
	if !ok || node == "" || what != "enrol" {
		return "", fmt.Errorf("%w: subject %s", ErrNotEnrolment, model.Quote(subject))
	}
	if len(payload) > MaxEnrolRequestSize {
		return "", fmt.Errorf("%w: %s carries %d bytes, above the bound of %d", ErrNotEnrolment, subject, len(payload), MaxEnrolRequestSize)
	}
	var req EnrolRequest
	if err := json.Unmarshal(payload, &req); err != nil {
		return "", fmt.Errorf("%w: %s carries no JSON enrolment request: %v", ErrNotEnrolment, subject, err)
	}
	prefix := render.Inbox(render.EnrolUser(node)) + "."
	if len(req.Reply) > MaxEnrolReplyLen {
		return "", fmt.Errorf("%w: %s asks for its answer at an address of %d characters, above the bound of %d: %s",
			ErrNotEnrolment, subject, len(req.Reply), MaxEnrolReplyLen, model.Quote(req.Reply))
	}
	under, ok := strings.CutPrefix(req.Reply, prefix)
	if !ok || slices.ContainsFunc(strings.Split(under, "."), func(tok string) bool { return !replyToken(tok) }) {
		return "", fmt.Errorf("%w: %s asks for its answer at %s, not an address under %s", ErrNotEnrolment, subject, model.Quote(req.Reply), prefix)
	}
	return req.Reply, nil
}

// replyToken reports whether tok may be a token of an answer address: not empty, and printable
// ASCII other than the wildcards `*` and `>`. A space or a control byte would end the
// protocol line early or forge another; an inbox any library makes is letters and digits.
func replyToken(tok string) bool {
	if tok == "" {
		return false
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c <= ' ' || c >= 0x7f || c == '*' || c == '>' {
			return false
		}
	}
	return true
}

// AnswerEnrolment answers, as the controller, an enrolment request taken from CONTROL: it sends
// answer to the address the request carries and then acknowledges the request, so a request
// whose answer could not be sent is delivered again.
func (h *Host) AnswerEnrolment(ctx context.Context, request jetstream.Msg, answer []byte) error {
	reply, err := EnrolReply(request.Subject(), request.Data())
	if err != nil {
		return err
	}
	if err := h.Send(ctx, reply, answer); err != nil {
		return fmt.Errorf("answering an enrolment: %w", err)
	}
	return h.Ack(ctx, request)
}
