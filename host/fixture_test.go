package host_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/model"
)

// matrixMesh is examples/seed plus the callers, followers and holder the seed leaves without a
// live job (see its header).
const matrixMesh = "testdata/mesh"

// eachKind runs test as a parallel subtest for each kind of consumer a mesh may derive.
func eachKind(t *testing.T, test func(t *testing.T, kind string)) {
	t.Parallel()
	for _, kind := range []string{model.ConsumersPull, model.ConsumersPush} {
		t.Run(kind, func(t *testing.T) { test(t, kind) })
	}
}

// token is a payload no other message of the test carries, so a job finds its own message among
// whatever earlier jobs left in a stream.
func token(what string) []byte { return []byte(what + ":" + rand.Text()) }

// errHelper marks a failure of a job's counterpart (the controller declaring for a node, a shop
// sending work to a holder): not the principal under test refused, but the job's setup broken.
var errHelper = errors.New("a counterpart failed")

// helper wraps a counterpart's error so that its permission error, if any, is not mistaken for
// the principal's own: %v, not %w, keeps it out of the chain.
func helper(who string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %s: %v", errHelper, who, err)
}

// deliveries collects what a consumer delivers.
type deliveries struct {
	ch chan jetstream.Msg
}

func newDeliveries() *deliveries { return &deliveries{ch: make(chan jetstream.Msg, 1024)} }

func (d *deliveries) handle(m jetstream.Msg) {
	select {
	case d.ch <- m:
	default: // a job that stopped reading; its messages are redelivered after the ack wait
	}
}

// await returns the delivery carrying data, skipping others (earlier jobs' leftovers, which are
// redelivered after the ack wait). Every message seen, the skipped ones too, is passed to seen.
func (d *deliveries) await(ctx context.Context, data []byte, seen func(jetstream.Msg)) (jetstream.Msg, error) {
	for {
		select {
		case m := <-d.ch:
			if seen != nil {
				seen(m)
			}
			if bytes.Equal(m.Data(), data) {
				return m, nil
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("no delivery of %q: %w", data, ctx.Err())
		}
	}
}

// messages collects what a core subscription hears.
type messages struct {
	ch chan *nats.Msg
}

func newMessages() *messages { return &messages{ch: make(chan *nats.Msg, 1024)} }

func (m *messages) handle(msg *nats.Msg) {
	select {
	case m.ch <- msg:
	default:
	}
}

func (m *messages) await(ctx context.Context, subject string, data []byte) error {
	for {
		select {
		case msg := <-m.ch:
			if msg.Subject == subject && bytes.Equal(msg.Data, data) {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("did not hear %q on %s: %w", data, subject, ctx.Err())
		}
	}
}

// stop stops taking deliveries and waits until the server knows: a queue group member the server
// still counts would be handed the next job's work and drop it.
func stop(h *host.Host, cc jetstream.ConsumeContext) {
	cc.Stop()
	_ = h.Conn().Flush()
}

func unsubscribe(h *host.Host, sub *nats.Subscription) {
	_ = sub.Unsubscribe()
	_ = h.Conn().Flush()
}

// subjectMatches reports whether a granted subject (with * and >) covers subject, every token of
// subject taken literally.
func subjectMatches(grant, subject string) bool {
	g, s := strings.Split(grant, "."), strings.Split(subject, ".")
	for i, tok := range g {
		switch {
		case tok == ">":
			return len(s) > i
		case i >= len(s):
			return false
		case tok != "*" && tok != s[i]:
			return false
		}
	}
	return len(g) == len(s)
}

func TestSubjectMatches(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		grant, subject string
		want           bool
	}{
		{"a.b", "a.b", true},
		{"a.*", "a.b", true},
		{"a.>", "a.b.c", true},
		{"a.>", "a", false},
		{"a.*", "a.b.c", false},
		{"a.b", "a.b.c", false},
		{"_INBOX.x.>", "_INBOX.x.abc.*", true},
	} {
		if got := subjectMatches(c.grant, c.subject); got != c.want {
			t.Errorf("subjectMatches(%q, %q) = %v, want %v", c.grant, c.subject, got, c.want)
		}
	}
}
