package controller

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/wire"
)

// What the controller promises about its control traffic and the store window
// (docs/design-rules.md, "The store window"), each against a running server and a real SQLite
// store.

// A report is heard, recorded in the store, and leaves the work queue.
func TestAReportIsRecordedAndLeavesTheWorkQueue(t *testing.T) {
	t.Parallel()
	f := start(t, twoNodes)
	enrolAndDeclare(t, f, "one", 1)
	f.report(f.join(render.NodeUser("one")), "one", wire.Report{Generation: 1, Applied: []string{"one.shop"}})
	f.waitEvent(0, settled(Ack))
	r := f.reports()
	if len(r) != 1 || r[0].Node != "one" || len(r[0].Applied) != 1 {
		t.Fatalf("the store holds %+v, want node one's report", r)
	}
	testwait.Until(t, "the report leaves CONTROL", func() bool { return f.controlMessages() == 0 })
}

// A report the store cannot take (its write lock held by another connection) is nak'd with a
// delay and stays in the stream; it is recorded once the store returns, and leaves then.
func TestAReportTheStoreCannotTakeIsHeldAndRecordedWhenItReturns(t *testing.T) {
	t.Parallel()
	f := start(t, twoNodes)
	enrolAndDeclare(t, f, "one", 1)
	release := f.holdWriteLock()
	f.report(f.join(render.NodeUser("one")), "one", wire.Report{Generation: 1})
	nak, next := f.waitEvent(0, settled(Nak))
	if nak.Settle.Delay != 100*time.Millisecond {
		t.Errorf("nak'd with delay %s, want the retry delay 100ms", nak.Settle.Delay)
	}
	// Held a second time: it was delivered again, so it stayed the server's.
	_, next = f.waitEvent(next, settled(Nak))
	if n := f.controlMessages(); n != 1 {
		t.Fatalf("CONTROL holds %d messages while the store is locked, want the report kept", n)
	}
	if r := f.reports(); len(r) != 0 {
		t.Fatalf("the store holds %+v while locked", r)
	}
	release()
	f.waitEvent(next, settled(Ack))
	if r := f.reports(); len(r) != 1 || r[0].Node != "one" {
		t.Fatalf("after the store returned it holds %+v, want node one's report", r)
	}
	testwait.Until(t, "the report leaves CONTROL", func() bool { return f.controlMessages() == 0 })
}

// A report about a superseded declaration (an older generation) is settled without being acted
// on: it leaves the queue and the store does not record it.
func TestAReportAboutASupersededDeclarationIsSettledNotActedOn(t *testing.T) {
	t.Parallel()
	f := start(t, twoNodes)
	// Node one was declared generation 2 (enrolled, and declared to, by the store's own methods).
	enrolAndDeclare(t, f, "one", 2)
	f.report(f.join(render.NodeUser("one")), "one", wire.Report{Generation: 1, Applied: []string{"one.shop"}})
	e, _ := f.waitEvent(0, settled(Ack))
	if !strings.Contains(e.Settle.Reason, "superseded") {
		t.Errorf("settled as %q, want superseded", e.Settle.Reason)
	}
	if r := f.reports(); len(r) != 0 {
		t.Fatalf("the store recorded a superseded report: %+v", r)
	}
	testwait.Until(t, "the superseded report leaves CONTROL", func() bool { return f.controlMessages() == 0 })
}

// A report the store never takes is let go (term) once the bound passes, and logged.
func TestAReportTheStoreNeverTakesIsLetGoAtTheBound(t *testing.T) {
	t.Parallel()
	f := start(t, twoNodes, func(c *Config) { c.Bound = 600 * time.Millisecond })
	enrolAndDeclare(t, f, "one", 1)
	f.holdWriteLock()
	f.report(f.join(render.NodeUser("one")), "one", wire.Report{Generation: 1})
	_, next := f.waitEvent(0, settled(Nak))
	e, _ := f.waitEvent(next, settled(Term))
	if !strings.Contains(e.Settle.Reason, "past the bound") {
		t.Errorf("let go as %q", e.Settle.Reason)
	}
	testwait.Until(t, "the report leaves CONTROL", func() bool { return f.controlMessages() == 0 })
	if !strings.Contains(f.logs.String(), "let a message go") {
		t.Errorf("letting the report go was not logged:\n%s", f.logs.String())
	}
}

// A heartbeat is heard and nothing is persisted: no stream keeps it, the store records nothing,
// and the last one per node is in memory.
func TestAHeartbeatIsHeardAndNothingPersisted(t *testing.T) {
	t.Parallel()
	f := start(t, twoNodes)
	h := f.join(render.NodeUser("two"))
	data, _ := json.Marshal(wire.Heartbeat{At: time.Now(), Generation: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.Heartbeat(ctx, "two", data); err != nil {
		t.Fatal(err)
	}
	f.waitEvent(0, func(e Event) bool { return e.Kind == KindHeartbeat && e.Node == "two" })
	if s, ok := f.ctrl.Heartbeats()["two"]; !ok || s.Generation != 4 {
		t.Fatalf("the controller's last heartbeats are %+v, want node two's at generation 4", f.ctrl.Heartbeats())
	}
	js, _ := jetstream.New(f.ctrl.probe(t, f.bus.URL()).Conn)
	if name, err := js.StreamNameBySubject(ctx, render.HeartbeatSubject("two")); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("a stream keeps heartbeats: %q, %v", name, err)
	}
	for _, s := range []string{render.StreamControl, render.StreamEvents, render.StreamNodes} {
		if n := f.streamInfo(s).State.Msgs; n != 0 {
			t.Errorf("stream %s holds %d messages after a heartbeat", s, n)
		}
	}
	if r := f.reports(); len(r) != 0 {
		t.Errorf("the store recorded %+v after a heartbeat", r)
	}
}

// The enrolment answer goes to the address the request carries in its payload — under the
// enrolling node's own inbox — and is the node's membership sealed to the key it sent. The reply
// subject of the delivery is the server's, and the controller never answers there.
func TestTheEnrolmentAnswerGoesToTheAddressInThePayload(t *testing.T) {
	t.Parallel()
	f := start(t, twoNodes)
	f.ctrl.Mesh(f.mesh)
	ident := f.join(render.EnrolUser("one"))
	pub, priv, err := wire.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	// A listener on the identity's inbox beside the payload's address: an answer anywhere else
	// under it would be heard here.
	stray := make(chan *nats.Msg, 4)
	sub, err := ident.Conn().ChanSubscribe(render.Inbox(render.EnrolUser("one"))+".>", stray)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	msg, err := ident.Enrol(ctx, "one", pub)
	if err != nil {
		t.Fatalf("%v; the controller logged:\n%s", err, f.logs.String())
	}
	var a wire.EnrolAnswer
	if err := json.Unmarshal(msg.Data, &a); err != nil || a.Refused != "" {
		t.Fatalf("the answer is %+v (%v), want a membership", a, err)
	}
	opened, err := wire.Open(pub, priv, a.Membership)
	if err != nil {
		t.Fatal(err)
	}
	m, err := host.ReadMembership(strings.NewReader(string(opened)))
	if err != nil || m.User != render.NodeUser("one") {
		t.Fatalf("the sealed membership is %v (%v), want node.one's", m, err)
	}
	// Every answer heard under the identity's inbox went to the payload's address (the stream's
	// acknowledgement of the request comes to the inbox too, and is not an answer).
	for len(stray) > 0 {
		s := <-stray
		var other wire.EnrolAnswer
		if json.Unmarshal(s.Data, &other) != nil || other.Node == "" {
			continue
		}
		if s.Subject != msg.Subject {
			t.Errorf("an answer went to %s, not the address the payload carried (%s)", s.Subject, msg.Subject)
		}
	}
	// The node joins with what it was sent, once the controller made it live.
	f.waitEvent(0, func(e Event) bool { return e.Kind == KindEnrol && e.Settle.Verb == Ack })
	node := f.joinAs(m)
	if err := node.Heartbeat(ctx, "one", []byte("{}")); err != nil {
		t.Fatalf("node.one cannot use its membership: %v", err)
	}
	f.noPassword(m.Password)
}
