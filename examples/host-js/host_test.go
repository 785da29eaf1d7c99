// Package hostjs_test runs the JavaScript host, host.mjs, with node against a live bus carrying
// the quickstart mesh, doing every job the Go host does under the grants meshctl derives.
package hostjs_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/bus"
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
	"github.com/meshbus/meshctl/state"
)

// nodeOrSkip returns the node binary, or skips the test saying what is missing: a machine
// without node, or without the pinned libraries installed, cannot run the JavaScript host.
// With MESHCTL_TEST_NODE=required (CI sets it, having installed both) a missing piece fails
// the test instead, so CI cannot pass by skipping it.
func nodeOrSkip(t *testing.T) string {
	t.Helper()
	skip := t.Skip
	if os.Getenv("MESHCTL_TEST_NODE") == "required" {
		skip = t.Fatal
	}
	node, err := exec.LookPath("node")
	if err != nil {
		skip("node is not on PATH: install node 20 or later and run `npm ci` in examples/host-js to test the JavaScript host")
	}
	for _, pkg := range []string{"@nats-io/transport-node", "@nats-io/jetstream"} {
		if _, err := os.Stat(filepath.Join("node_modules", pkg, "package.json")); err != nil {
			skip(pkg + " is not installed: run `npm ci` in examples/host-js to test the JavaScript host")
		}
	}
	return node
}

// membershipFile writes what `meshctl credentials issue user` prints to a private file.
func membershipFile(t *testing.T, b *hosttest.Mesh, user string) string {
	t.Helper()
	return writeMembership(t, b.Membership(user))
}

func writeMembership(t *testing.T, m host.Membership) string {
	t.Helper()
	user := m.User
	line, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), user+".json")
	if err := os.WriteFile(file, line, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// runHost runs host.mjs to its end and returns its exit code and stderr.
func runHost(ctx context.Context, t *testing.T, node string, args ...string) (int, string) {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, node, append([]string{"host.mjs"}, args...)...)
	cmd.Stderr = &stderr
	err := cmd.Run()
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("running node host.mjs: %v", err)
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// running is host.mjs run in the background, as a module instance's process is.
type running struct {
	cmd    *exec.Cmd
	lines  chan string // what it prints on stdout, a line each
	stderr *lockedbuf.Buffer
	exited chan error
}

// startHost runs host.mjs with args until interrupted or ctx ends.
func startHost(ctx context.Context, t *testing.T, node string, args ...string) *running {
	t.Helper()
	r := &running{cmd: exec.CommandContext(ctx, node, append([]string{"host.mjs"}, args...)...),
		lines: make(chan string, 16), stderr: &lockedbuf.Buffer{}, exited: make(chan error, 1)}
	r.cmd.Stderr = r.stderr
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		for s := bufio.NewScanner(stdout); s.Scan(); {
			r.lines <- s.Text()
		}
		close(r.lines)
		r.exited <- r.cmd.Wait()
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

// interrupt sends the host SIGINT and waits for it to leave cleanly.
func (r *running) interrupt(ctx context.Context, t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-r.exited:
		if err != nil {
			t.Fatalf("the host exited with %v; its log:\n%s", err, r.stderr.String())
		}
	case <-ctx.Done():
		t.Fatalf("the host did not leave when interrupted; its log:\n%s", r.stderr.String())
	}
}

// The README's walk-through with the JavaScript host, on the quickstart mesh: alpha.shop
// publishes an order and mail, and is refused the mailer's event by name; beta.postman follows
// the order on its own consumer, takes the mail as the mailer seat's holder in the worker's
// deliver group, reports the seat's `sent` event, which the controller hears, and leaves cleanly
// on SIGINT with nothing left unacknowledged; and it is refused, by name, a seat it does not hold.
// With pull consumers (the quickstart's) and with push consumers: the host learns which from the
// consumer's info.
func TestTheJavaScriptHostDoesTheSeedJobs(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{model.ConsumersPull, model.ConsumersPush} {
		t.Run(kind, func(t *testing.T) { javaScriptHostDoesTheSeedJobs(t, hosttest.StartConsumers, kind) })
	}
}

// The same in operator mode (bus.auth: jwt), on three servers with every stream of three
// replicas: every membership carries a user JWT granting exactly the principal's grants, and
// its seed, and names a server of its own first, so the shop, the postman and the controller
// meet across the cluster's routes; what is not a principal's job is refused by its JWT.
func TestTheJavaScriptHostDoesTheSeedJobsAsAJWTUser(t *testing.T) {
	t.Parallel()
	startJWTCluster := func(t testing.TB, dir, kind string) *hosttest.Mesh { return hosttest.StartJWTCluster(t, dir, kind, 3) }
	for _, kind := range []string{model.ConsumersPull, model.ConsumersPush} {
		t.Run(kind, func(t *testing.T) { javaScriptHostDoesTheSeedJobs(t, startJWTCluster, kind) })
	}
}

func javaScriptHostDoesTheSeedJobs(t *testing.T, start func(t testing.TB, dir, kind string) *hosttest.Mesh, kind string) {
	t.Parallel()
	node := nodeOrSkip(t)
	b := start(t, "../quickstart", kind)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	shop := membershipFile(t, b, "alpha.shop")
	postman := membershipFile(t, b, "beta.postman")

	// Bind-only: a seat the postman does not hold has a consumer it may not even ask about.
	// Before anything is published, since this run binds the postman's events consumer too.
	if code, stderr := runHost(ctx, t, node, "--membership", postman, "--seat", "other"); code != 1 ||
		!strings.Contains(stderr, `may not publish to "$JS.API.CONSUMER.INFO.SEAT_OTHER.SEAT_OTHER_worker"`) {
		t.Errorf("the postman taking a seat it does not hold: exit %d:\n%s", code, stderr)
	}

	// Publish: an event the shop emits and work it sends. Both wait in their streams until the
	// postman binds its consumers.
	for _, p := range []struct{ subject, message string }{
		{render.ModuleEvent("shop", "order.placed"), "order-17"},
		{render.AcceptSubject("mailer", "send"), "mail-17"},
	} {
		if code, stderr := runHost(ctx, t, node, "--membership", shop, "--publish", p.subject, "--message", p.message); code != 0 ||
			!strings.Contains(stderr, "published to "+p.subject) {
			t.Fatalf("publishing %s as alpha.shop: exit %d:\n%s", p.subject, code, stderr)
		}
	}
	// What is not the shop's job is refused, and the host names the subject rather than timing out.
	if code, stderr := runHost(ctx, t, node, "--membership", shop, "--publish", render.SeatEvent("mailer", "sent")); code != 1 ||
		!strings.Contains(stderr, `user "alpha.shop" may not publish to "mesh.seat.mailer.event.sent"`) {
		t.Errorf("the shop reporting the mailer's event: exit %d:\n%s", code, stderr)
	}

	// Follow and take the seat's work.
	h := startHost(ctx, t, node, "--membership", postman, "--follow", "--seat", "mailer", "--emit", "sent")
	h.waitPrinted(ctx, t, "event mesh.mod.shop.event.order.placed order-17", "work mesh.seat.mailer.accept.send mail-17")

	// The seat's event reached the controller, which follows it.
	b.WaitControllerHears(ctx, t, render.SeatEvent("mailer", "sent"), "mail-17", h.stderr.String)

	h.interrupt(ctx, t)
	for _, line := range []string{"joined ", "following its events on consumer beta_postman", "holding seat mailer", "leaving"} {
		if !strings.Contains(h.stderr.String(), line) {
			t.Errorf("the host's log does not say %q:\n%s", line, h.stderr.String())
		}
	}
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
}

// The seat's worker is given a 2 s ack wait on the server, not the 30 s meshctl derives: the
// JavaScript host reads it from the worker's info and says so, and a piece of work that takes
// three times as long is delivered once — kept in progress at the worker's own pace — then
// acknowledged.
func TestTheJavaScriptHostKeepsLongWorkInProgressAtTheWorkersAckWait(t *testing.T) {
	t.Parallel()
	node := nodeOrSkip(t)
	b := hosttest.Start(t, "../quickstart")
	stream, worker := render.SeatStreamName("mailer"), render.WorkerConsumer("mailer")
	b.UpdateConsumer(t, stream, worker, func(c *jetstream.ConsumerConfig) { c.AckWait, c.MaxDeliver = 2*time.Second, 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if code, stderr := runHost(ctx, t, node, "--membership", membershipFile(t, b, "alpha.shop"), "--publish",
		render.AcceptSubject("mailer", "send"), "--message", "mail-long"); code != 0 {
		t.Fatalf("the shop sending work: exit %d:\n%s", code, stderr)
	}

	h := startHost(ctx, t, node, "--membership", membershipFile(t, b, "beta.postman"), "--seat", "mailer", "--work", "6s")
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

// A bus with a certificate no public verifier accepts, as the mesh's own: the JavaScript host
// joins it only by the membership's fingerprint, and a wrong fingerprint is refused before the
// password is sent. The login is proven by the bus refusing alpha.shop, by name, a subject that
// is not its job: an unauthenticated client would be refused the connection instead.
func TestTheJavaScriptHostPinsTheBusCertificate(t *testing.T) {
	t.Parallel()
	node := nodeOrSkip(t)
	m, err := model.Load("../quickstart")
	if err != nil {
		t.Fatal(err)
	}
	password, err := state.GeneratePassword()
	if err != nil {
		t.Fatal(err)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key, fingerprint := testnats.SelfSignedCert(t, dir)
	b, err := bus.StartEmbedded(context.Background(), bus.EmbeddedOptions{
		StateDir: dir, Listen: "127.0.0.1:0", TLSCert: cert, TLSKey: key,
		InitialAccounts: render.AccountsConfig(render.Derive(m).Principals, map[string]string{"alpha.shop": string(hash)}),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit)
	defer cancel()
	subject := render.SeatEvent("mailer", "sent")
	membership := host.Membership{Address: b.URL(), Fingerprint: strings.ToUpper(fingerprint), User: "alpha.shop", Password: password}

	code, stderr := runHost(ctx, t, node, "--membership", writeMembership(t, membership), "--publish", subject)
	if code != 1 || !strings.Contains(stderr, "joined ") || !strings.Contains(stderr, `user "alpha.shop" may not publish to "`+subject+`"`) {
		t.Errorf("with the bus's fingerprint: exit %d:\n%s", code, stderr)
	}
	// The pin holds on a nats:// address too: a pinned membership never speaks in the clear.
	plain := membership
	plain.Address = strings.Replace(b.URL(), "tls://", "nats://", 1)
	code, stderr = runHost(ctx, t, node, "--membership", writeMembership(t, plain), "--publish", subject)
	if code != 1 || !strings.Contains(stderr, `may not publish to "`+subject+`"`) {
		t.Errorf("with the fingerprint on a nats:// address: exit %d:\n%s", code, stderr)
	}

	wrong := membership
	wrong.Fingerprint = strings.Repeat("ab", 32)
	code, stderr = runHost(ctx, t, node, "--membership", writeMembership(t, wrong), "--publish", subject)
	if code != 1 || strings.Contains(stderr, "joined ") || !strings.Contains(stderr, "whose SHA-256 is "+fingerprint+", not the pinned "+wrong.Fingerprint) {
		t.Errorf("with a wrong fingerprint: exit %d:\n%s", code, stderr)
	}
	if strings.Contains(stderr, password) {
		t.Errorf("the host's log holds the password:\n%s", stderr)
	}
}

// A membership with a misspelt field, one that is not JSON, one without exactly one secret
// (a password or an nkey user seed), a user JWT without the seed of its subject, or one whose
// CA or client certificate cannot be used, is
// refused before anything is dialled, and the refusal never quotes what the file holds: it
// holds the secret.
func TestTheJavaScriptHostRefusesABadMembership(t *testing.T) {
	t.Parallel()
	node := nodeOrSkip(t)
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit)
	defer cancel()
	const secret = "hunter2-do-not-print"
	seed, other := hosttest.UserSeed(t), hosttest.UserSeed(t)
	token := hosttest.UserJWT(t, seed)
	for _, tc := range []struct{ content, want string }{
		{`{"address":"nats://127.0.0.1:1","user":"alpha.shop","pasword":"` + secret + `"}`, `unknown field(s) "pasword"`},
		{`{"address":"nats://127.0.0.1:1","user":"alpha.shop"` + secret, "not JSON"},
		{`{"address":"nats://127.0.0.1:1","user":"alpha.shop","password":""}`, "no password or seed"},
		{`{"address":"nats://127.0.0.1:1","user":"alpha.shop","password":"` + secret + `","seed":"` + seed + `"}`, "both a password and a seed"},
		{`{"address":"nats://127.0.0.1:1","user":"alpha.shop","seed":"` + seed[:len(seed)-3] + `"}`, "not an nkey user seed"},
		{`{"address":"nats://127.0.0.1:1","user":"alpha.shop","seed":"` + secret + `"}`, "not an nkey user seed"},
		{`{"address":"nats://127.0.0.1:1","user":"alpha.shop","password":"` + secret + `","servers":"nats://127.0.0.1:2"}`, "the servers are not a list"},
		{`{"address":"nats://127.0.0.1:1","user":"alpha.shop","password":"` + secret + `","ca":"not PEM"}`, "its ca holds no PEM certificate"},
		{`{"address":"nats://127.0.0.1:1","user":"alpha.shop","password":"` + secret + `","cert_file":"/etc/mesh/tls.crt"}`, "needs both cert_file and key_file"},
		{`{"address":"nats://127.0.0.1:1","user":"alpha.shop","jwt":"` + token + `"}`, "a user JWT without its seed"},
		{`{"address":"nats://127.0.0.1:1","user":"alpha.shop","jwt":"` + token + `","password":"` + secret + `"}`, "a user JWT without its seed"},
		{`{"address":"nats://127.0.0.1:1","user":"alpha.shop","jwt":"` + token + `","seed":"` + other + `"}`, "is not the user JWT's subject"},
		{`{"address":"nats://127.0.0.1:1","user":"alpha.shop","jwt":"` + secret + `","seed":"` + seed + `"}`, "not a user JWT"},
	} {
		file := filepath.Join(t.TempDir(), "m.json")
		if err := os.WriteFile(file, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		code, stderr := runHost(ctx, t, node, "--membership", file, "--publish", "x")
		if code != 1 || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, secret) || strings.Contains(stderr, seed[2:12]) ||
			strings.Contains(stderr, other[2:12]) || strings.Contains(stderr, "joined") {
			t.Errorf("membership %s: exit %d, want 1 saying %q without the password:\n%s", tc.content, code, tc.want, stderr)
		}
	}
}

// A module that holds a seat and follows nothing (the matrix mesh's telegram) has no events
// consumer and no grant to ask about one: the host takes its seat's work without asking, so the
// bus refuses it nothing.
func TestAJavaScriptHostThatOnlyHoldsASeatAsksForNoEventsConsumer(t *testing.T) {
	t.Parallel()
	node := nodeOrSkip(t)
	b := hosttest.Start(t, "../../host/testdata/mesh")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	work := render.AcceptSubject("telegram-sender", "send")
	if code, stderr := runHost(ctx, t, node, "--membership", membershipFile(t, b, "two.shop"), "--publish", work, "--message", "hello"); code != 0 {
		t.Fatalf("the shop sending work: exit %d:\n%s", code, stderr)
	}
	h := startHost(ctx, t, node, "--membership", membershipFile(t, b, "one.telegram"), "--seat", "telegram-sender")
	h.waitPrinted(ctx, t, "work "+work+" hello")
	h.interrupt(ctx, t)
	if log := h.stderr.String(); strings.Contains(log, "may not") || strings.Contains(log, "refused") || strings.Contains(log, "following its events") {
		t.Errorf("a host holding only a seat asked for an events consumer:\n%s", log)
	}
}

// An nkey principal's membership carries a seed in place of the password: the JavaScript host
// joins with it, publishes what the principal is granted, and is refused by name what it is
// not. Its log never quotes the seed.
func TestTheJavaScriptHostJoinsWithASeed(t *testing.T) {
	t.Parallel()
	node := nodeOrSkip(t)
	granted := render.ModuleEvent("shop", "order.placed")
	b := hosttest.StartNkey(t, "alpha.shop", granted)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	membership := writeMembership(t, b.Membership())
	code, stderr := runHost(ctx, t, node, "--membership", membership, "--publish", granted, "--message", "order-1")
	if code != 0 || !strings.Contains(stderr, "stream NKEYTEST keeps it") {
		t.Fatalf("publishing what alpha.shop is granted: exit %d:\n%s", code, stderr)
	}
	other := render.ModuleEvent("shop", "other")
	code, stderr = runHost(ctx, t, node, "--membership", membership, "--publish", other)
	if code != 1 || !strings.Contains(stderr, `user "alpha.shop" may not publish to "`+other+`"`) {
		t.Errorf("publishing what alpha.shop is not granted: exit %d:\n%s", code, stderr)
	}
	if strings.Contains(stderr, b.Seed[2:12]) {
		t.Errorf("the host's log quotes the seed:\n%s", stderr)
	}
}

// The JavaScript host started as the docs show, on a three-server cluster whose first server —
// the membership's address — is down: it reads the membership's servers, joins through another
// of them, says which, and does its jobs.
func TestTheJavaScriptHostJoinsAClusterWhoseFirstServerIsDown(t *testing.T) {
	t.Parallel()
	node := nodeOrSkip(t)
	b := hosttest.StartCluster(t, "../quickstart", 3)
	first := b.Cluster.Servers[0]
	first.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b.WaitServing(ctx, t)

	shop := membershipFile(t, b, "alpha.shop")
	for _, p := range []struct{ subject, message string }{
		{render.ModuleEvent("shop", "order.placed"), "order-3"},
		{render.AcceptSubject("mailer", "send"), "mail-3"},
	} {
		if code, stderr := runHost(ctx, t, node, "--membership", shop, "--publish", p.subject, "--message", p.message); code != 0 {
			t.Fatalf("publishing %s as alpha.shop: exit %d:\n%s", p.subject, code, stderr)
		}
	}
	h := startHost(ctx, t, node, "--membership", membershipFile(t, b, "beta.postman"), "--follow", "--seat", "mailer")
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

// publishOrder publishes an order as alpha.shop with a JavaScript host of its own, joining
// afresh with membership: what a host started after a change of the server's certificate does.
func publishOrder(ctx context.Context, t *testing.T, node, membership, order string) {
	t.Helper()
	if code, stderr := runHost(ctx, t, node, "--membership", membership, "--publish", render.ModuleEvent("shop", "order.placed"), "--message", order); code != 0 {
		t.Fatalf("publishing %s as alpha.shop: exit %d:\n%s", order, code, stderr)
	}
}

// The JavaScript host on a bus whose certificate a CA signs: the membership carries the CA and
// no fingerprint. The postman follows the shop's orders; the server's certificate is renewed by
// the same CA (a new leaf in place, a reload) and the server restarted: the running host
// reconnects with its membership unchanged and takes the next order, and a host started afresh
// joins with it too. A leaf from another CA is refused before the password is sent.
func TestTheJavaScriptHostVerifiesTheBusByItsCAAcrossARenewal(t *testing.T) {
	t.Parallel()
	node := nodeOrSkip(t)
	ca := testnats.NewCA(t, t.TempDir())
	serverDir := t.TempDir()
	cert, key, _ := ca.ServerCert(t, serverDir)
	b := hosttest.StartTLS(t, "../quickstart", bustest.ServerTLS{CertFile: cert, KeyFile: key}, busclient.Target{CA: ca.PEM})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	shop := membershipFile(t, b, "alpha.shop")
	postman := b.Membership("beta.postman")
	if postman.CA != ca.PEM || postman.Fingerprint != "" {
		t.Fatalf("the membership is not verified by the CA alone: fingerprint %q", postman.Fingerprint)
	}

	h := startHost(ctx, t, node, "--membership", writeMembership(t, postman), "--follow")
	publishOrder(ctx, t, node, shop, "order-1")
	h.waitPrinted(ctx, t, "event mesh.mod.shop.event.order.placed order-1")

	ca.ServerCert(t, serverDir)
	b.Server.Reload(t)
	b.Server.Restart(t)
	publishOrder(ctx, t, node, shop, "order-2")
	h.waitPrinted(ctx, t, "event mesh.mod.shop.event.order.placed order-2")
	if !strings.Contains(h.stderr.String(), "reconnected to ") {
		t.Errorf("the host's log does not say it reconnected:\n%s", h.stderr.String())
	}
	h.interrupt(ctx, t)

	testnats.NewCA(t, t.TempDir()).ServerCert(t, serverDir)
	b.Server.Restart(t)
	code, stderr := runHost(ctx, t, node, "--membership", shop, "--publish", render.ModuleEvent("shop", "order.placed"))
	if code != 1 || strings.Contains(stderr, "joined ") {
		t.Errorf("with a leaf another CA signed: exit %d:\n%s", code, stderr)
	}
}

// A server with verify: true asks every client for a certificate its CA signed: the
// JavaScript host presents the one its membership names and gets in; without it, it is
// refused.
func TestTheJavaScriptHostPresentsItsClientCertificate(t *testing.T) {
	t.Parallel()
	node := nodeOrSkip(t)
	ca := testnats.NewCA(t, t.TempDir())
	cert, key, _ := ca.ServerCert(t, t.TempDir())
	clientCert, clientKey := ca.ClientCert(t, t.TempDir())
	b := hosttest.StartTLS(t, "../quickstart", bustest.ServerTLS{CertFile: cert, KeyFile: key, CAFile: ca.File, Verify: true},
		busclient.Target{CA: ca.PEM, CertFile: clientCert, KeyFile: clientKey})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	shop := b.Membership("alpha.shop")
	publishOrder(ctx, t, node, writeMembership(t, shop), "order-1")
	shop.CertFile, shop.KeyFile = "", ""
	code, stderr := runHost(ctx, t, node, "--membership", writeMembership(t, shop), "--publish", render.ModuleEvent("shop", "order.placed"))
	if code != 1 || strings.Contains(stderr, "published") {
		t.Errorf("without its client certificate: exit %d:\n%s", code, stderr)
	}
}

// A planned rotation of a pinned bus: the membership pins the certificate served now and its
// successor, made in advance. The successor is put in place and the server restarted: the
// running JavaScript host reconnects with its membership unchanged and takes the next order.
func TestAPinnedJavaScriptHostSurvivesAPlannedRotation(t *testing.T) {
	t.Parallel()
	node := nodeOrSkip(t)
	serverDir := t.TempDir()
	cert, key, old := testnats.SelfSignedCert(t, serverDir)
	nextCert, nextKey, next := testnats.SelfSignedCert(t, t.TempDir())
	b := hosttest.StartTLS(t, "../quickstart", bustest.ServerTLS{CertFile: cert, KeyFile: key},
		busclient.Target{Fingerprint: old + " " + next})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	shop := membershipFile(t, b, "alpha.shop")

	h := startHost(ctx, t, node, "--membership", membershipFile(t, b, "beta.postman"), "--follow")
	publishOrder(ctx, t, node, shop, "order-1")
	h.waitPrinted(ctx, t, "event mesh.mod.shop.event.order.placed order-1")

	for from, to := range map[string]string{nextCert: cert, nextKey: key} {
		if err := os.Rename(from, to); err != nil {
			t.Fatal(err)
		}
	}
	b.Server.Restart(t)
	publishOrder(ctx, t, node, shop, "order-2")
	h.waitPrinted(ctx, t, "event mesh.mod.shop.event.order.placed order-2")
	h.interrupt(ctx, t)
}

// In operator mode a JavaScript host is given a new credential by writing it over its
// membership file, as the node's agent does when the controller declares one: the old one is
// revoked, which disconnects the running host, and it reconnects with the file's new
// credential and takes the next order, with no restart.
func TestTheJavaScriptHostTakesACredentialWrittenOverItsMembershipFile(t *testing.T) {
	t.Parallel()
	node := nodeOrSkip(t)
	b := hosttest.StartJWT(t, "../quickstart", "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	shop := membershipFile(t, b, "alpha.shop")
	postman := membershipFile(t, b, "beta.postman")
	h := startHost(ctx, t, node, "--membership", postman, "--follow")
	publishOrder(ctx, t, node, shop, "order-1")
	h.waitPrinted(ctx, t, "event mesh.mod.shop.event.order.placed order-1")

	old := b.Reissue(t, "beta.postman")
	line, err := json.Marshal(b.Membership("beta.postman"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(postman+".next", line, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(postman+".next", postman); err != nil {
		t.Fatal(err)
	}
	if err := b.JWT.Push(ctx, old); err != nil {
		t.Fatal(err)
	}
	publishOrder(ctx, t, node, shop, "order-2")
	h.waitPrinted(ctx, t, "event mesh.mod.shop.event.order.placed order-2")
	h.interrupt(ctx, t)
	if log := h.stderr.String(); !strings.Contains(log, "disconnected") || !strings.Contains(log, "reconnected to ") {
		t.Errorf("the host's log does not say it was disconnected and reconnected:\n%s", log)
	}
}
