package reconcile

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/plan"
)

// A renamed seat's old queue is emptied into the new one and never waits on the operator's
// leave to lose data; any other deletion or replacement must find the stream empty once it
// takes no more messages, unless loss is allowed.
func TestHowAStreamIsTakenOutOfService(t *testing.T) {
	t.Parallel()
	move := &plan.Move{Seat: "postbox", Stream: "SEAT_POSTBOX", From: "mesh.seat.mailer.accept.", To: "mesh.seat.postbox.accept."}
	renamed := plan.Change{Kind: plan.KindStream, Name: "SEAT_MAILER", Action: plan.Delete, Move: move}
	deleted := plan.Change{Kind: plan.KindStream, Name: "SEAT_MAILER", Action: plan.Delete}
	replaced := plan.Change{Kind: plan.KindStream, Name: "SEAT_MAILER", Action: plan.Replace}
	moveSteps := []string{"move its subjects away", "move its messages, deleting each once moved", "seal it",
		"move what came in before the seal", "delete it"}
	quiesce := []string{"pause its consumers", "wait for their deliveries to be acknowledged"}
	checked := []string{"move its subjects away", "expect it empty", "seal it", "expect it empty", "delete it"}
	for name, tc := range map[string]struct {
		c              plan.Change
		allowLoss      bool
		quiesce, steps []string
	}{
		"a renamed seat's queue":               {c: renamed, quiesce: quiesce, steps: moveSteps},
		"a renamed seat's queue, loss allowed": {c: renamed, allowLoss: true, quiesce: quiesce, steps: moveSteps},
		"a deletion":                           {c: deleted, steps: checked},
		"a replacement":                        {c: replaced, steps: append(checked[:len(checked):len(checked)], "create it anew")},
		"a deletion, loss allowed":             {c: deleted, allowLoss: true, steps: []string{"delete it"}},
		"a replacement, loss allowed":          {c: replaced, allowLoss: true, steps: []string{"delete it", "create it anew"}},
	} {
		t.Run(name, func(t *testing.T) {
			got := sequenceFor(tc.c, tc.allowLoss)
			if diff := cmp.Diff(tc.quiesce, names(got.Quiesce)); diff != "" {
				t.Errorf("before the reload (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.steps, names(got.Steps)); diff != "" {
				t.Errorf("the change (-want +got):\n%s", diff)
			}
		})
	}
}

func names(steps []drainStep) []string {
	var out []string
	for _, s := range steps {
		out = append(out, s.String())
	}
	return out
}

// A moved message keeps what its sender said, is readdressed to the seat's new name, and
// carries an id the new queue recognises when the same message is moved twice.
func TestAMovedMessage(t *testing.T) {
	t.Parallel()
	m := plan.Move{Seat: "postbox", Stream: "SEAT_POSTBOX", From: "mesh.seat.mailer.accept.", To: "mesh.seat.postbox.accept."}
	created := time.Unix(1700000000, 5)
	hdr := nats.Header{}
	hdr.Set("Trace", "t-1")
	hdr.Set("Nats-Expected-Stream", "SEAT_MAILER")
	msg := &jetstream.RawStreamMsg{Subject: "mesh.seat.mailer.accept.send.now", Sequence: 42, Header: hdr, Data: []byte("work")}

	out, err := copyOf(m, "SEAT_MAILER", created, msg)
	if err != nil {
		t.Fatal(err)
	}
	if out.Subject != "mesh.seat.postbox.accept.send.now" || string(out.Data) != "work" || out.Header.Get("Trace") != "t-1" {
		t.Errorf("moved as %s %q %v", out.Subject, out.Data, out.Header)
	}
	if out.Header.Get("Nats-Expected-Stream") != "" {
		t.Error("the sender's expectation of the old stream travels with the copy, and the new stream would refuse it")
	}
	again, _ := copyOf(m, "SEAT_MAILER", created, msg)
	if id := out.Header.Get(jetstream.MsgIDHeader); id == "" || id != again.Header.Get(jetstream.MsgIDHeader) {
		t.Errorf("a message moved twice has ids %q and %q; the new queue would keep both", id, again.Header.Get(jetstream.MsgIDHeader))
	}
	other := *msg
	other.Sequence = 43
	if c, _ := copyOf(m, "SEAT_MAILER", created, &other); c.Header.Get(jetstream.MsgIDHeader) == out.Header.Get(jetstream.MsgIDHeader) {
		t.Error("two messages share an id: the new queue would drop the second")
	}
	if c, _ := copyOf(m, "SEAT_MAILER", created.Add(time.Hour), msg); c.Header.Get(jetstream.MsgIDHeader) == out.Header.Get(jetstream.MsgIDHeader) {
		t.Error("a queue of the same name made again reuses its predecessor's ids")
	}
	// The sender's own id is kept: had it also published the message under the new name,
	// the copy is the duplicate.
	hdr.Set(jetstream.MsgIDHeader, "order-7")
	if c, _ := copyOf(m, "SEAT_MAILER", created, msg); c.Header.Get(jetstream.MsgIDHeader) != "order-7" {
		t.Errorf("the sender's message id became %q", c.Header.Get(jetstream.MsgIDHeader))
	}

	if _, err := copyOf(m, "SEAT_MAILER", created, &jetstream.RawStreamMsg{Subject: "mesh.seat.other.accept.send", Sequence: 1}); err == nil {
		t.Error("a message outside the old name's accepts was moved")
	}
}

// Deliveries are waited for only while someone may still acknowledge them.
func TestDeliveriesOut(t *testing.T) {
	t.Parallel()
	push := func(ackPending int, bound bool) *jetstream.ConsumerInfo {
		return &jetstream.ConsumerInfo{Config: jetstream.ConsumerConfig{DeliverSubject: "_DELIVER.x"}, NumAckPending: ackPending, PushBound: bound}
	}
	pull := &jetstream.ConsumerInfo{NumAckPending: 1}
	for name, tc := range map[string]struct {
		consumers []*jetstream.ConsumerInfo
		want      bool
	}{
		"none":                            {nil, false},
		"all acknowledged":                {[]*jetstream.ConsumerInfo{push(0, true)}, false},
		"out to a bound holder":           {[]*jetstream.ConsumerInfo{push(0, true), push(2, true)}, true},
		"out to a holder no longer bound": {[]*jetstream.ConsumerInfo{push(2, false)}, false},
		"out to a puller":                 {[]*jetstream.ConsumerInfo{pull}, true},
	} {
		if got := handedOut(tc.consumers); got != tc.want {
			t.Errorf("%s: handed out %v, want %v", name, got, tc.want)
		}
	}
	if got := longestAckWait([]*jetstream.ConsumerInfo{push(0, true), {Config: jetstream.ConsumerConfig{AckWait: time.Minute}}}); got != time.Minute {
		t.Errorf("longest ack wait %s, want 1m (an unset one is the server's 30s)", got)
	}
}
