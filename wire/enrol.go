package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/meshbus/meshctl/internal/printable"
	"github.com/meshbus/meshctl/render"
)

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
		return "", fmt.Errorf("%w: subject %s", ErrNotEnrolment, printable.Quote(subject))
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
			ErrNotEnrolment, subject, len(req.Reply), MaxEnrolReplyLen, printable.Quote(req.Reply))
	}
	under, ok := strings.CutPrefix(req.Reply, prefix)
	if !ok || slices.ContainsFunc(strings.Split(under, "."), func(tok string) bool { return !replyToken(tok) }) {
		return "", fmt.Errorf("%w: %s asks for its answer at %s, not an address under %s", ErrNotEnrolment, subject, printable.Quote(req.Reply), prefix)
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
