package busclient

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"github.com/nats-io/nats.go"
)

// The operations a PermissionError names.
const (
	OpPublish   = "publish"
	OpSubscribe = "subscribe"
	// OpReply is a publish refused for its reply subject rather than its subject (the server's
	// "Publish with Reply of"): a reserved reply prefix, not a missing grant.
	OpReply = "reply"
)

// PermissionError is one refusal by the server: this user may not do Op on Subject.
type PermissionError struct {
	User    string
	Op      string // OpPublish, OpSubscribe or OpReply
	Subject string
	Queue   string // the queue group of a refused queue subscription, else ""
}

// Error reads as the rule that was missing, e.g. `user "x" may not publish to "subj"`.
func (e *PermissionError) Error() string {
	switch e.Op {
	case OpSubscribe:
		if e.Queue != "" {
			return fmt.Sprintf("user %q may not subscribe to %q in queue group %q", e.User, e.Subject, e.Queue)
		}
		return fmt.Sprintf("user %q may not subscribe to %q", e.User, e.Subject)
	case OpReply:
		return fmt.Sprintf("user %q may not publish with reply subject %q", e.User, e.Subject)
	default:
		return fmt.Sprintf("user %q may not %s to %q", e.User, e.Op, e.Subject)
	}
}

// Unwrap makes errors.Is(err, nats.ErrPermissionViolation) hold, as it does for the error
// nats.go reports.
func (e *PermissionError) Unwrap() error { return nats.ErrPermissionViolation }

// The server's wording (nats-server server/client.go: pubPermissionViolation,
// subPermissionViolation, replySubjectViolation, and the reload path that drops subscriptions a
// new config no longer allows, which appends `(sid "…")`). The subject is quoted with Go's %q.
var (
	quoted      = `("(?:[^"\\]|\\.)*")`
	publishRe   = regexp.MustCompile(`Permissions Violation for Publish to ` + quoted)
	subscribeRe = regexp.MustCompile(`Permissions Violation for Subscription to ` + quoted + `(?: using queue ` + quoted + `)?`)
	replyRe     = regexp.MustCompile(`Permissions Violation for Publish with Reply of ` + quoted)
)

// parseViolation turns the error nats.go hands the async error handler into a PermissionError,
// or nil when it is not a permission violation. The subject exists only in the server's message
// text, so after errors.Is picks the kind, the text has to be read.
func parseViolation(user string, err error) *PermissionError {
	if err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return nil
	}
	text := err.Error()
	// "with Reply of" first: its text also begins "Permissions Violation for Publish".
	if m := replyRe.FindStringSubmatch(text); m != nil {
		return &PermissionError{User: user, Op: OpReply, Subject: unquote(m[1])}
	}
	if m := publishRe.FindStringSubmatch(text); m != nil {
		return &PermissionError{User: user, Op: OpPublish, Subject: unquote(m[1])}
	}
	if m := subscribeRe.FindStringSubmatch(text); m != nil {
		v := &PermissionError{User: user, Op: OpSubscribe, Subject: unquote(m[1])}
		if m[2] != "" {
			v.Queue = unquote(m[2])
		}
		return v
	}
	return nil
}

func unquote(s string) string {
	if u, err := strconv.Unquote(s); err == nil {
		return u
	}
	return s
}
