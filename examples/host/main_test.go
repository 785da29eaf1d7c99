package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/bus/bustest"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/host/hosttest"
	"github.com/meshbus/meshctl/internal/backoff"
	"github.com/meshbus/meshctl/internal/lockedbuf"
	"github.com/meshbus/meshctl/internal/testnats"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// The README's walk-through, on the quickstart mesh: beta.postman follows shop's orders and holds
// the mailer seat. It prints and acks the order shop placed, takes the mail shop sent, reports
// the seat's `sent` event, which the controller follows, and leaves cleanly when interrupted,
// with nothing left unacknowledged.
func TestTheHostFollowsEventsAndTakesWork(t *testing.T) {
	t.Parallel()
	theHostFollowsEventsAndTakesWork(t, hosttest.Start(t, "../quickstart"))
}

// The same in operator mode (bus.auth: jwt): the memberships carry a user JWT and its seed,
// with pull consumers (the quickstart's) and with push consumers.
func TestTheHostFollowsEventsAndTakesWorkAsAJWTUser(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{model.ConsumersPull, model.ConsumersPush} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			theHostFollowsEventsAndTakesWork(t, hosttest.StartJWT(t, "../quickstart", kind))
		})
	}
}

func theHostFollowsEventsAndTakesWork(t *testing.T, b *hosttest.Mesh) {
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit)
	defer cancel()

	// What the operator does: issue the membership to a file.
	file := writeMembership(t, b.Membership("beta.postman"))

	// The shop places an order and sends mail, with the same program. Both wait in their
	// streams until the postman binds its consumers.
	shopFile := writeMembership(t, b.Membership("alpha.shop"))
	for subject, message := range map[string]string{
		render.ModuleEvent("shop", "order.placed"): "order-17",
		render.AcceptSubject("mailer", "send"):     "mail-17",
	} {
		if code, log := publish(ctx, shopFile, subject, message); code != 0 {
			t.Fatalf("publishing %s as alpha.shop: exit %d: %s", subject, code, log)
		}
	}
	// And is refused what is not its job, by name.
	if code, log := publish(ctx, shopFile, render.SeatEvent("mailer", "sent"), ""); code != 1 ||
		!strings.Contains(log, `may not publish to "mesh.seat.mailer.event.sent"`) {
		t.Errorf("the shop reporting the mailer's event: exit %d: %s", code, log)
	}

	h := startHost(ctx, t, "-membership", file, "-follow", "-seat", "mailer", "-emit", "sent")
	h.waitPrinted(ctx, t, "event mesh.mod.shop.event.order.placed order-17", "work mesh.seat.mailer.accept.send mail-17")

	// The seat's event reached the controller, which follows it.
	b.WaitControllerHears(ctx, t, render.SeatEvent("mailer", "sent"), "mail-17", h.stderr.String)

	h.interrupt(ctx, t)
	controller := b.MustJoin(t, render.ControllerUser)
	for _, c := range []struct{ stream, consumer string }{
		{render.StreamEvents, "beta_postman"},
		{render.SeatStreamName("mailer"), render.WorkerConsumer("mailer")},
	} {
		info, err := host.ConsumerInfo(ctx, controller.JetStream(), c.stream, c.consumer)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending != 0 || info.NumPending != 0 {
			t.Errorf("%s/%s: %d unacknowledged, %d pending after the host left", c.stream, c.consumer, info.NumAckPending, info.NumPending)
		}
	}
	if log := h.stderr.String(); !strings.Contains(log, "joined") || !strings.Contains(log, "holding seat mailer") {
		t.Errorf("the host's log does not say it joined and holds the seat:\n%s", log)
	}
}

// The seat's worker is given a 2 s ack wait on the server, not the 30 s meshctl derives: the
// host reads it from the worker's info and says so, and a piece of work that takes three times
// as long is delivered once — kept in progress at the worker's own pace — then acknowledged.
func TestTheHostKeepsLongWorkInProgressAtTheWorkersAckWait(t *testing.T) {
	t.Parallel()
	b := hosttest.Start(t, "../quickstart")
	stream, worker := render.SeatStreamName("mailer"), render.WorkerConsumer("mailer")
	b.UpdateConsumer(t, stream, worker, func(c *jetstream.ConsumerConfig) { c.AckWait, c.MaxDeliver = 2*time.Second, 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if code, log := publish(ctx, writeMembership(t, b.Membership("alpha.shop")), render.AcceptSubject("mailer", "send"), "mail-long"); code != 0 {
		t.Fatalf("the shop sending work: exit %d: %s", code, log)
	}

	h := startHost(ctx, t, "-membership", writeMembership(t, b.Membership("beta.postman")), "-seat", "mailer", "-work", "6s")
	h.waitPrinted(ctx, t, "work mesh.seat.mailer.accept.send mail-long")
	controller := b.MustJoin(t, render.ControllerUser).JetStream()
	var info *jetstream.ConsumerInfo
	var err error
	if !backoff.Retry(ctx, backoff.Backoff{Min: 10 * time.Millisecond, Max: 200 * time.Millisecond}, func() bool {
		info, err = host.ConsumerInfo(ctx, controller, stream, worker)
		return err != nil || info.NumRedelivered > 0 || info.NumAckPending == 0 && info.NumPending == 0
	}) {
		t.Fatalf("the work was not acknowledged; the host's log:\n%s", h.stderr.String())
	}
	if err != nil {
		t.Fatal(err)
	}
	if info.NumRedelivered > 0 {
		t.Errorf("the work was delivered again while the host worked on it; its log:\n%s", h.stderr.String())
	}
	h.interrupt(ctx, t)
	for l := range h.lines {
		t.Errorf("the host printed, after the work: %s", l)
	}
	if log := h.stderr.String(); !strings.Contains(log, "holding seat mailer: ack wait 2s, at most 3 deliveries") {
		t.Errorf("the host's log does not say the worker's ack wait and max_deliver:\n%s", log)
	}
}

// Without a membership the host says what to do rather than dial.
func TestTheHostWantsAMembership(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	if code := run(context.Background(), nil, strings.NewReader(""), io.Discard, &stderr); code != 1 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(stderr.String(), "meshctl credentials issue") {
		t.Errorf("the error does not say how to get a membership: %s", stderr.String())
	}
	stderr.Reset()
	in := `{"address": "nats://127.0.0.1:1", "fingerprint": "", "user": "node.one", "password": "p"}`
	if code := run(context.Background(), nil, strings.NewReader(in), io.Discard, &stderr); code != 1 || !strings.Contains(stderr.String(), "not a module instance") {
		t.Errorf("a node's membership: exit %d, %s", code, stderr.String())
	}
}

// running is the host run in the background, as a module instance's process is.
type running struct {
	lines  chan string // what it prints on stdout, a line each
	stderr *lockedbuf.Buffer
	stop   context.CancelFunc // Ctrl-C
	code   chan int
}

// startHost runs the host with args until interrupt is called or ctx ends.
func startHost(ctx context.Context, t *testing.T, args ...string) *running {
	t.Helper()
	interrupt, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	stdoutR, stdoutW := io.Pipe()
	r := &running{lines: make(chan string, 16), stderr: &lockedbuf.Buffer{}, stop: stop, code: make(chan int, 1)}
	go func() {
		defer stdoutW.Close()
		r.code <- run(interrupt, args, nil, stdoutW, r.stderr)
	}()
	go func() {
		defer close(r.lines)
		for s := bufio.NewScanner(stdoutR); s.Scan(); {
			r.lines <- s.Text()
		}
	}()
	return r
}

// waitPrinted waits until the host has printed every one of want, in any order.
func (r *running) waitPrinted(ctx context.Context, t *testing.T, want ...string) {
	t.Helper()
	seen := map[string]bool{}
	for len(seen) < len(want) {
		select {
		case l, ok := <-r.lines:
			if !ok {
				t.Fatalf("the host exited having printed only %v of %q; its log:\n%s", seen, want, r.stderr.String())
			}
			if slices.Contains(want, l) {
				seen[l] = true
			}
		case <-ctx.Done():
			t.Fatalf("the host printed only %v of %q; its log:\n%s", seen, want, r.stderr.String())
		}
	}
}

// interrupt stops the host as Ctrl-C does and waits for it to leave cleanly.
func (r *running) interrupt(ctx context.Context, t *testing.T) {
	t.Helper()
	r.stop()
	select {
	case c := <-r.code:
		if c != 0 {
			t.Fatalf("the host exited %d; its log:\n%s", c, r.stderr.String())
		}
	case <-ctx.Done():
		t.Fatalf("the host did not leave when interrupted; its log:\n%s", r.stderr.String())
	}
}

// writeMembership writes m to a private file, as an operator keeps the one issued.
func writeMembership(t *testing.T, m host.Membership) string {
	t.Helper()
	line, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), m.User+".json")
	if err := os.WriteFile(file, line, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// publish runs the host once with -publish, as the module instance of membership, and returns
// its exit code and log.
func publish(ctx context.Context, membership, subject, message string) (int, string) {
	var stderr bytes.Buffer
	code := run(ctx, []string{"-membership", membership, "-publish", subject, "-message", message}, nil, io.Discard, &stderr)
	return code, stderr.String()
}

// A module that holds a seat and follows nothing (the matrix mesh's telegram) has no events
// consumer and no grant to ask about one: the host takes its seat's work without asking, so the
// bus refuses it nothing.
func TestAHostThatOnlyHoldsASeatAsksForNoEventsConsumer(t *testing.T) {
	t.Parallel()
	b := hosttest.Start(t, "../../host/testdata/mesh")
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit)
	defer cancel()
	work := render.AcceptSubject("telegram-sender", "send")
	if code, log := publish(ctx, writeMembership(t, b.Membership("two.shop")), work, "hello"); code != 0 {
		t.Fatalf("the shop sending work: exit %d: %s", code, log)
	}
	h := startHost(ctx, t, "-membership", writeMembership(t, b.Membership("one.telegram")), "-seat", "telegram-sender")
	h.waitPrinted(ctx, t, "work "+work+" hello")
	h.interrupt(ctx, t)
	log := h.stderr.String()
	if strings.Contains(log, "may not") || strings.Contains(log, "following its events") {
		t.Errorf("a host holding only a seat asked for an events consumer:\n%s", log)
	}
}

// An nkey principal's membership carries a seed in place of the password: the host joins with
// it, publishes what the principal is granted, and is refused by name what it is not.
func TestTheHostJoinsWithASeed(t *testing.T) {
	t.Parallel()
	granted := render.ModuleEvent("shop", "order.placed")
	b := hosttest.StartNkey(t, "alpha.shop", granted)
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit)
	defer cancel()
	membership := writeMembership(t, b.Membership())
	if code, log := publish(ctx, membership, granted, "order-1"); code != 0 || !strings.Contains(log, "stream NKEYTEST keeps it") {
		t.Fatalf("publishing what alpha.shop is granted: exit %d: %s", code, log)
	}
	other := render.ModuleEvent("shop", "other")
	code, log := publish(ctx, membership, other, "")
	if code != 1 || !strings.Contains(log, `user "alpha.shop" may not publish to "`+other+`"`) {
		t.Errorf("publishing what alpha.shop is not granted: exit %d: %s", code, log)
	}
	if strings.Contains(log, b.Seed[2:12]) {
		t.Errorf("the host's log quotes the seed:\n%s", log)
	}
}

// A host started as the docs show, on a three-server cluster whose first server — the
// membership's address — is down: it joins through another server of the membership's list,
// says which, and does its jobs.
func TestTheHostJoinsAClusterWhoseFirstServerIsDown(t *testing.T) {
	t.Parallel()
	b := hosttest.StartCluster(t, "../quickstart", 3)
	first := b.Cluster.Servers[0]
	first.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b.WaitServing(ctx, t)

	shop := writeMembership(t, b.Membership("alpha.shop"))
	for subject, message := range map[string]string{
		render.ModuleEvent("shop", "order.placed"): "order-3",
		render.AcceptSubject("mailer", "send"):     "mail-3",
	} {
		if code, log := publish(ctx, shop, subject, message); code != 0 {
			t.Fatalf("publishing %s as alpha.shop: exit %d: %s", subject, code, log)
		}
	}
	h := startHost(ctx, t, "-membership", writeMembership(t, b.Membership("beta.postman")), "-follow", "-seat", "mailer")
	h.waitPrinted(ctx, t, "event mesh.mod.shop.event.order.placed order-3", "work mesh.seat.mailer.accept.send mail-3")
	h.interrupt(ctx, t)
	log := h.stderr.String()
	joined := false
	for _, srv := range b.Cluster.Servers[1:] {
		joined = joined || strings.Contains(log, "joined "+srv.URL+" as beta.postman")
	}
	if !joined || strings.Contains(log, first.URL) {
		t.Errorf("the host's log does not name the running server it joined (%s is down):\n%s", first.URL, log)
	}
}

// The host on a bus as production runs it: the server's certificate signed by a CA, which the
// membership carries, and every client asked for a certificate of that CA, which the
// membership names. The postman follows the shop's orders; the server's certificate is renewed
// by the CA (a new leaf in place, a reload) and the server restarted: the running host
// reconnects with its membership unchanged and takes the next order.
func TestTheHostJoinsABusVerifiedByItsCAAcrossARenewal(t *testing.T) {
	t.Parallel()
	ca := testnats.NewCA(t, t.TempDir())
	serverDir := t.TempDir()
	cert, key, _ := ca.ServerCert(t, serverDir)
	clientCert, clientKey := ca.ClientCert(t, t.TempDir())
	b := hosttest.StartTLS(t, "../quickstart", bustest.ServerTLS{CertFile: cert, KeyFile: key, CAFile: ca.File, Verify: true},
		busclient.Target{CA: ca.PEM, CertFile: clientCert, KeyFile: clientKey})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	shop := writeMembership(t, b.Membership("alpha.shop"))
	order := func(o string) {
		t.Helper()
		if code, log := publish(ctx, shop, render.ModuleEvent("shop", "order.placed"), o); code != 0 {
			t.Fatalf("publishing %s as alpha.shop: exit %d: %s", o, code, log)
		}
	}

	h := startHost(ctx, t, "-membership", writeMembership(t, b.Membership("beta.postman")), "-follow")
	order("order-1")
	h.waitPrinted(ctx, t, "event mesh.mod.shop.event.order.placed order-1")
	ca.ServerCert(t, serverDir)
	b.Server.Reload(t)
	b.Server.Restart(t)
	order("order-2")
	h.waitPrinted(ctx, t, "event mesh.mod.shop.event.order.placed order-2")
	h.interrupt(ctx, t)
	if log := h.stderr.String(); !strings.Contains(log, "reconnected to ") {
		t.Errorf("the host's log does not say it reconnected:\n%s", log)
	}
}

// In operator mode a host is given a new credential by writing it over its membership file, as
// the node's agent does when the controller declares one: the old one is revoked, which
// disconnects the running host, and it reconnects with the file's new credential and takes the
// next order, with no restart.
func TestTheHostTakesACredentialWrittenOverItsMembershipFile(t *testing.T) {
	t.Parallel()
	b := hosttest.StartJWT(t, "../quickstart", "")
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit)
	defer cancel()
	shop := writeMembership(t, b.Membership("alpha.shop"))
	order := func(o string) {
		t.Helper()
		if code, log := publish(ctx, shop, render.ModuleEvent("shop", "order.placed"), o); code != 0 {
			t.Fatalf("publishing %s as alpha.shop: exit %d: %s", o, code, log)
		}
	}
	file := writeMembership(t, b.Membership("beta.postman"))
	h := startHost(ctx, t, "-membership", file, "-follow")
	order("order-1")
	h.waitPrinted(ctx, t, "event mesh.mod.shop.event.order.placed order-1")

	old := b.Reissue(t, "beta.postman")
	line, err := json.Marshal(b.Membership("beta.postman"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file+".next", line, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file+".next", file); err != nil {
		t.Fatal(err)
	}
	if err := b.JWT.Push(ctx, old); err != nil {
		t.Fatal(err)
	}
	order("order-2")
	h.waitPrinted(ctx, t, "event mesh.mod.shop.event.order.placed order-2")
	h.interrupt(ctx, t)
	if log := h.stderr.String(); !strings.Contains(log, "disconnected") || !strings.Contains(log, "reconnected to ") {
		t.Errorf("the host's log does not say it was disconnected and reconnected:\n%s", log)
	}
}
