package controller

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/meshbus/meshctl/internal/printable"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/wire"
)

// alphaBeta is the mesh the attacks run on: node alpha, whose identities attack, runs a module,
// so that a rotation has a credential to declare again.
const alphaBeta = `nodes:
  - name: alpha
  - name: beta
modules:
  - name: shop
    on: [alpha]
    emits: [order.placed]
`

// stock joins the bus as user with nats.go alone, as an attacker holding the credential would:
// none of meshctl's own client code between it and the server.
func (f *fixture) stock(user string) *nats.Conn {
	f.t.Helper()
	nc, err := nats.Connect(f.bus.URL(), nats.UserInfo(user, f.passwords[user]), nats.CustomInboxPrefix(render.Inbox(user)),
		// Quiet: an identity locked out by an enrolment is refused on its next reconnect.
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		f.t.Fatalf("joining as %s: %v", user, err)
	}
	f.t.Cleanup(nc.Close)
	return nc
}

// overlongReply is a valid-looking answer address of n characters under node's enrolment inbox.
func overlongReply(node string, n int) string {
	prefix := render.Inbox(render.EnrolUser(node)) + "."
	var b strings.Builder
	b.WriteString(prefix)
	for b.Len() < n {
		b.WriteString("abcdefgh.")
	}
	return strings.TrimSuffix(b.String()[:n], ".") + "x"
}

// publishAll publishes each message on core NATS without waiting for any, then waits for the
// server to have them all.
func publishAll(t *testing.T, nc *nats.Conn, msgs []*nats.Msg) {
	t.Helper()
	for _, m := range msgs {
		if err := nc.PublishMsg(m); err != nil {
			t.Fatalf("publishing to %s: %v", m.Subject, err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// Issue 22, item 1: an enrolment request whose answer address is longer than the server's
// control line would have the controller's answer close its own connection, for good. It is
// let go unanswered, nothing is enrolled, and the controller goes on enrolling.
func TestAnOverlongAnswerAddressIsLetGoUnanswered(t *testing.T) {
	t.Parallel()
	f := start(t, alphaBeta)
	f.ctrl.Mesh(f.mesh)
	pub, _, err := wire.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	attack, _ := json.Marshal(wire.EnrolRequest{Reply: overlongReply("alpha", 4100), Key: pub})
	publishAll(t, f.stock(render.EnrolUser("alpha")), []*nats.Msg{{Subject: render.EnrolSubject("alpha"), Data: attack}})
	e, _ := f.waitEvent(0, func(e Event) bool { return e.Kind == KindEnrol })
	if e.Settle.Verb != Term || !strings.Contains(e.Settle.Reason, "above the bound") {
		t.Errorf("the request with a 4,100-character answer address was settled %+v, want let go for its size", e.Settle)
	}
	if got, err := f.store.Enrolments(context.Background()); err != nil || len(got) != 0 {
		t.Fatalf("enrolments after the attack: %+v (%v), want none", got, err)
	}
	// Still on the bus: both nodes enrol, alpha with the credential the attack did not use up.
	f.enrolled("beta")
	f.enrolled("alpha")
}

// Issue 22, item 5: a report of a generation never declared to its node — above the last
// declared, or the largest generation there is — is let go and logged, not held as though the
// store were down, and not recorded as the node's reported generation.
func TestAReportOfAGenerationNeverDeclaredIsLetGo(t *testing.T) {
	t.Parallel()
	f := start(t, twoNodes)
	enrolAndDeclare(t, f, "one", 2)
	node := f.join(render.NodeUser("one"))
	from := 0
	for _, g := range []uint64{math.MaxUint64, 3, 0} {
		f.report(node, "one", wire.Report{Generation: g})
		var e Event
		e, from = f.waitEvent(from, func(e Event) bool { return e.Kind == KindReport })
		if e.Settle.Verb != Term || !strings.Contains(e.Settle.Reason, "never declared") {
			t.Errorf("a report of generation %d was settled %+v, want let go as never declared", g, e.Settle)
		}
	}
	if r := f.reports(); len(r) != 0 {
		t.Fatalf("the store recorded %+v", r)
	}
	f.report(node, "one", wire.Report{Generation: 2})
	if e, _ := f.waitEvent(from, func(e Event) bool { return e.Kind == KindReport }); e.Settle.Verb != Ack {
		t.Fatalf("the report of the generation declared was settled %+v", e.Settle)
	}
	if r := f.reports(); len(r) != 1 || r[0].Generation != 2 {
		t.Fatalf("the store recorded %+v, want generation 2", r)
	}
	if n := strings.Count(f.logs.String(), "let a message go"); n != 3 {
		t.Errorf("%d messages let go in the log, want the 3 reports each logged once:\n%s", n, f.logs.String())
	}
}

// conn is the controller's connection of the moment, for a test to take away.
func (c *Controller) connection(t *testing.T) *nats.Conn {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		t.Fatal("the controller is not on the bus")
	}
	return c.conn.Conn
}

// The controller survives losing its connection, both ways it can be lost: closed for good on
// its side (as nats.go does after an -ERR such as "maximum control line exceeded", which no
// reconnect setting changes) and cut by the server (a slow consumer, a kick). It joins again,
// binds CONTROL and the heartbeats anew, and takes what the nodes file; its health says so.
func TestTheControllerJoinsAgainWhenItsConnectionIsLost(t *testing.T) {
	t.Parallel()
	f := start(t, twoNodes)
	enrolAndDeclare(t, f, "one", 9)
	node := f.join(render.NodeUser("one"))
	if h := f.ctrl.Health(); !h.Joined || !h.Connected || !h.LastTaken.IsZero() {
		t.Fatalf("health at the start: %+v", h)
	}
	from := 0
	for i, lose := range []func(){
		func() { f.ctrl.connection(t).Close() },
		func() {
			cid, err := f.ctrl.connection(t).GetClientID()
			if err != nil {
				t.Fatal(err)
			}
			if err := f.bus.Server().DisconnectClientByID(cid); err != nil {
				t.Fatal(err)
			}
		},
	} {
		lostCID, err := f.ctrl.connection(t).GetClientID()
		if err != nil {
			t.Fatal(err)
		}
		lose()
		// Filed once the server let the lost connection go: a report filed while it still
		// counts that connection's pull request as waiting is delivered there, and comes back
		// only after its ack wait (a busy machine takes a moment to see a socket closed).
		testwait.Until(t, "the server letting the lost connection go", func() bool {
			cz, err := f.bus.Server().Connz(&server.ConnzOptions{CID: lostCID})
			return err == nil && len(cz.Conns) == 0
		})
		g := uint64(8 + i)
		// Filed until taken: a report is kept by CONTROL whoever listens, but the heartbeat
		// below is heard only by a controller subscribed at the time.
		f.report(node, "one", wire.Report{Generation: g})
		var e Event
		e, from = f.waitEvent(from, func(e Event) bool { return e.Kind == KindReport })
		if e.Settle.Verb != Ack {
			t.Fatalf("after losing its connection (%d), the report was settled %+v", i, e.Settle)
		}
		testwait.Until(t, "a heartbeat heard", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = node.Heartbeat(ctx, "one", mustJSON(wire.Heartbeat{Generation: g}))
			return f.ctrl.Heartbeats()["one"].Generation == g
		})
		if h := f.ctrl.Health(); !h.Connected || h.LastTaken.IsZero() {
			t.Errorf("health after joining again (%d): %+v", i, h)
		}
	}
	if !strings.Contains(f.logs.String(), "off the bus; joining again") {
		t.Errorf("the loss is not logged:\n%s", f.logs.String())
	}
}

// Issue 22's "must show": after item 1's message and 10,000 hostile control messages, from the
// identities that may publish them, a legitimate enrolment and a rotation still complete in
// moments. The durations are logged, not asserted: the waits are failsafes.
func TestHostileControlTrafficLeavesEnrolmentAndRotationQuick(t *testing.T) {
	t.Parallel()
	f := start(t, alphaBeta, func(c *Config) { c.CredentialPoll = 50 * time.Millisecond })
	f.ctrl.Mesh(f.mesh)
	pub, _, err := wire.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	key := b64(pub)
	enrolAs, nodeAs := f.stock(render.EnrolUser("alpha")), f.stock(render.NodeUser("alpha"))
	inbox := render.Inbox(render.EnrolUser("alpha")) + "."
	enrol := func(payload string) *nats.Msg {
		return &nats.Msg{Subject: render.EnrolSubject("alpha"), Data: []byte(payload)}
	}
	// Every well-formed request is left out: it would enrol alpha, as it should.
	malformed := []*nats.Msg{
		enrol(`{"reply":"` + overlongReply("alpha", 4100) + `","key":"` + key + `"}`),
		enrol(`{"reply":"` + overlongReply("alpha", wire.MaxEnrolReplyLen+1) + `","key":"` + key + `"}`),
		enrol(`{"reply":"` + inbox + `*","key":"` + key + `"}`),
		enrol(`{"reply":"` + inbox + `>","key":"` + key + `"}`),
		enrol(`{"reply":"` + inbox + `a b","key":"` + key + `"}`),
		enrol(`{"reply":"` + inbox + `a\u001b[2K\u0007","key":"` + key + `"}`),
		enrol(`{"reply":"` + inbox + `a..b","key":"` + key + `"}`),
		enrol(`{"reply":"_INBOX.enrol.beta.x","key":"` + key + `"}`),
		enrol(`{"reply":"mesh.node.alpha.declare","key":"` + key + `"}`),
		enrol(`{"reply":"` + inbox + `x","key":"AAAA"}`),
		enrol(`{"reply":"` + inbox + `x","key":"` + b64(make([]byte, wire.KeySize+1)) + `"}`),
		enrol(`{"reply":"` + inbox + `x","key":"not base64!"}`),
		enrol(`{"reply":"` + inbox + `x"}`),
		enrol(`{"reply":`),
		enrol("\x00\xff\xfe"),
		enrol(`[1,2,3]`),
	}
	report := func(payload string) *nats.Msg {
		return &nats.Msg{Subject: render.ReportSubject("alpha"), Data: []byte(payload)}
	}
	heartbeat := func(payload string) *nats.Msg {
		return &nats.Msg{Subject: render.HeartbeatSubject("alpha"), Data: []byte(payload)}
	}
	forged := []*nats.Msg{
		report(`{"generation":18446744073709551615}`),
		report(`{"generation":1}`), // nothing was declared to alpha yet
		report(`{"generation":0,"applied":["alpha.shop"]}`),
		report(`{"generation":-1}`),
		report(`{"generation":1,"applied":["beta.shop"]}`),
		report(`{"generation":1,"failed":{"alpha.shop":"` + strings.Repeat("x", MaxReasonLen+1) + `"}}`),
		report(`not json`),
		heartbeat(`not json`),
		heartbeat(`{"generation":1,"x":"` + strings.Repeat("x", MaxHeartbeatSize) + `"}`),
	}
	// Up to the server's limit: max_payload less room for the subject and headers.
	huge := strings.Repeat("x", maxServerPayload-1024)
	var asEnrol, asNode []*nats.Msg
	for i := 0; len(asEnrol)+len(asNode) < 10000; i++ {
		switch {
		case i%1000 == 0:
			asEnrol = append(asEnrol, enrol(`{"reply":"`+inbox+`x","key":"`+key+`","pad":"`+huge+`"}`))
			asNode = append(asNode, report(`{"generation":1,"pad":"`+huge+`"}`))
		case i%2 == 0:
			asEnrol = append(asEnrol, malformed[i%len(malformed)])
		default:
			asNode = append(asNode, forged[i%len(forged)])
		}
	}
	// Anything the controller sends under alpha's enrolment inbox is heard here.
	answers := make(chan *nats.Msg, 64)
	if _, err := enrolAs.ChanSubscribe(inbox+">", answers); err != nil {
		t.Fatal(err)
	}

	began := time.Now()
	publishAll(t, enrolAs, append(malformed[:1:1], asEnrol...)) // item 1's message first
	publishAll(t, nodeAs, asNode)
	t.Logf("published 1+%d hostile messages in %s", len(asEnrol)+len(asNode), time.Since(began).Round(time.Millisecond))

	began = time.Now()
	pub, priv, nm, request := f.enrolled("alpha")
	t.Logf("a legitimate enrolment, queued behind them, completed in %s", time.Since(began).Round(time.Millisecond))
	if h := f.ctrl.Health(); !h.Connected {
		t.Fatalf("the controller is off the bus: %+v", h)
	}
	node := f.joinAs(nm)
	d1 := takeDeclaration(t, node, "alpha", 0)
	_, before := f.instance(d1, "alpha.shop", pub, priv)

	began = time.Now()
	ctx := context.Background()
	if _, err := f.store.Revoke(ctx, "alpha.shop"); err != nil {
		t.Fatal(err)
	}
	if err := f.sync(ctx); err != nil {
		t.Fatal(err)
	}
	d2 := takeDeclaration(t, node, "alpha", d1.Generation)
	_, after := f.instance(d2, "alpha.shop", pub, priv)
	t.Logf("a rotation (a revoked credential declared again) completed in %s", time.Since(began).Round(time.Millisecond))
	if after.Password == before.Password {
		t.Fatal("declared again with the revoked password")
	}
	f.joinAs(after)

	// Nothing hostile was answered, enrolled, recorded or held as a store failure.
	var legit wire.EnrolRequest
	_ = json.Unmarshal(request, &legit)
	for len(answers) > 0 {
		// The stream's acknowledgements of the requests come to the inbox too, and are not
		// answers.
		var a wire.EnrolAnswer
		if m := <-answers; m.Subject != legit.Reply && json.Unmarshal(m.Data, &a) == nil && a.Node != "" {
			t.Errorf("the controller answered at %s", printable.Quote(m.Subject))
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var enrolled, let int
	for _, e := range f.events {
		switch {
		case e.Settle.Verb == Nak:
			t.Errorf("%s was held: %s", e.Subject, e.Settle.Reason)
		case e.Kind == KindEnrol && e.Settle.Verb == Ack:
			enrolled++
		case e.Settle.Verb == Term:
			let++
		}
	}
	if enrolled != 1 {
		t.Errorf("%d enrolment requests were taken, want the legitimate one alone", enrolled)
	}
	t.Logf("%d hostile messages were let go (CONTROL keeps %d per subject while they wait, and drops heartbeats the loop has no room for)", let, render.ControlPerSubject)
}
