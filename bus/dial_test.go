package bus

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/internal/testnats"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A principal granted only its own inbox and one service subject can make a request and hear the
// answer: the reply lands under _INBOX.<user>, which is exactly what it was granted. With the
// client's default random prefix the server would refuse the reply subscription.
func TestDialUsesTheUsersOwnInbox(t *testing.T) {
	t.Parallel()
	client := testUser{name: "one.telegram", password: "pw-client",
		pub: []string{"mesh.mod.shop.tool.status"}, sub: []string{"_INBOX.one.telegram.>"}}
	service := testUser{name: "two.shop", password: "pw-service",
		pub: []string{"_INBOX.one.telegram.>"}, sub: []string{"_INBOX.two.shop.>", "mesh.mod.shop.tool.status"}}
	e := startTestBus(t, accountsFor(t, client, service))

	svc := dialAs(t, e.URL(), service)
	if _, err := svc.Subscribe("mesh.mod.shop.tool.status", func(m *nats.Msg) { m.Respond([]byte("ok")) }); err != nil {
		t.Fatal(err)
	}
	if err := svc.Flush(); err != nil {
		t.Fatal(err)
	}

	c := dialAs(t, e.URL(), client)
	if got := c.NewInbox(); !strings.HasPrefix(got, "_INBOX.one.telegram.") {
		t.Fatalf("inbox %q is not under the user's own prefix", got)
	}
	reply, err := c.Request("mesh.mod.shop.tool.status", nil, 5*time.Second)
	if err != nil {
		t.Fatalf("request: %v (violation: %v)", err, c.LastViolation())
	}
	if string(reply.Data) != "ok" {
		t.Fatalf("reply %q, want ok", reply.Data)
	}
	if v := c.LastViolation(); v != nil {
		t.Fatalf("unexpected violation: %v", v)
	}
}

// A user in MESH can use JetStream through the account's own `jetstream: enabled`, on a server
// whose config names no system account: the server's default $SYS is enough.
func TestAMeshUserUsesJetStream(t *testing.T) {
	t.Parallel()
	controller := testUser{name: "controller", password: "pw-controller",
		pub: []string{"$JS.API.>", "mesh.control.>"}, sub: []string{"_INBOX.controller.>"}}
	e := startTestBus(t, accountsFor(t, controller))
	c := dialAs(t, e.URL(), controller)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	js, err := jetstream.New(c.Conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "CONTROL", Subjects: []string{"mesh.control.>"}}); err != nil {
		t.Fatalf("creating a stream as a MESH user: %v (violation: %v)", err, c.LastViolation())
	}
	if _, err := js.Publish(ctx, "mesh.control.one.report", []byte("r")); err != nil {
		t.Fatalf("publishing to the stream: %v", err)
	}
}

// A refused publish is reported as a *PermissionError naming the subject — waited for, not
// inferred from a timeout.
func TestAPublishDenialIsReportedWithItsSubject(t *testing.T) {
	t.Parallel()
	u := testUser{name: "two.audit", password: "pw-audit", pub: []string{"mesh.allowed"}, sub: []string{"_INBOX.two.audit.>"}}
	e := startTestBus(t, accountsFor(t, u))
	c := dialAs(t, e.URL(), u)

	if err := c.Publish("mesh.forbidden", []byte("x")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := c.WaitViolation(ctx, "mesh.forbidden")
	if err != nil {
		t.Fatal(err)
	}
	want := busclient.PermissionError{User: "two.audit", Op: busclient.OpPublish, Subject: "mesh.forbidden"}
	if *v != want {
		t.Fatalf("got %+v, want %+v", *v, want)
	}
	if got := v.Error(); got != `user "two.audit" may not publish to "mesh.forbidden"` {
		t.Fatalf("Error() = %s", got)
	}
	if !errors.Is(v, nats.ErrPermissionViolation) {
		t.Fatal("a PermissionError is not a nats.ErrPermissionViolation")
	}
	select {
	case got := <-c.Violations():
		if got != v {
			t.Fatalf("Violations delivered %v, want %v", got, v)
		}
	default:
		t.Fatal("the violation was not delivered on Violations()")
	}
	if c.LastViolation() != v {
		t.Fatalf("LastViolation = %v", c.LastViolation())
	}
}

// Refused subscriptions, plain and in a queue group, are reported with their subject; the queue
// group form ("… using queue \"q\"") still matches the subject alone.
func TestASubscribeDenialIsReportedWithItsSubject(t *testing.T) {
	t.Parallel()
	u := testUser{name: "node.one", password: "pw-node", pub: []string{"mesh.control.one.>"}, sub: []string{"_INBOX.node.one.>"}}
	e := startTestBus(t, accountsFor(t, u))
	c := dialAs(t, e.URL(), u)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	if _, err := c.SubscribeSync("mesh.node.two.declare"); err != nil {
		t.Fatal(err)
	}
	v, err := c.WaitViolation(ctx, "mesh.node.two.declare")
	if err != nil {
		t.Fatal(err)
	}
	if want := (busclient.PermissionError{User: "node.one", Op: busclient.OpSubscribe, Subject: "mesh.node.two.declare"}); *v != want {
		t.Fatalf("got %+v, want %+v", *v, want)
	}

	if _, err := c.QueueSubscribeSync("_DELIVER.SEAT_X_worker", "SEAT_X_worker"); err != nil {
		t.Fatal(err)
	}
	v, err = c.WaitViolation(ctx, "_DELIVER.SEAT_X_worker")
	if err != nil {
		t.Fatal(err)
	}
	want := busclient.PermissionError{User: "node.one", Op: busclient.OpSubscribe, Subject: "_DELIVER.SEAT_X_worker", Queue: "SEAT_X_worker"}
	if *v != want {
		t.Fatalf("got %+v, want %+v", *v, want)
	}
	if got := v.Error(); got != `user "node.one" may not subscribe to "_DELIVER.SEAT_X_worker" in queue group "SEAT_X_worker"` {
		t.Fatalf("Error() = %s", got)
	}
}

// WaitViolation gives up with the context's error, and once the connection closes it says so
// instead of waiting on a connection that can no longer be refused anything.
func TestWaitViolationEndsWithContextOrConnection(t *testing.T) {
	t.Parallel()
	e := startTestBus(t, nil)
	c := dialAs(t, e.URL(), testUser{name: "anyone", password: "unused"})

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.WaitViolation(ctx, "nothing"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error", err)
	}
	c.Close()
	if _, err := c.WaitViolation(context.Background(), "nothing"); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("got %v, want connection closed", err)
	}
	if _, open := <-c.Violations(); open {
		t.Fatal("Violations is still open after Close")
	}
}

// A wrong password fails naming the address and the user — never the password.
func TestAWrongPasswordNamesTheAddressNotThePassword(t *testing.T) {
	t.Parallel()
	u := testUser{name: "controller", password: "right-password", pub: []string{"x"}, sub: []string{"_INBOX.controller.>"}}
	e := startTestBus(t, accountsFor(t, u))

	const wrong = "Wr0ng-Pa55word-xyzzy"
	_, err := busclient.Dial(context.Background(), busclient.Target{URL: e.URL()}, busclient.Credential{User: "controller", Password: wrong})
	if err == nil {
		t.Fatal("a wrong password was accepted")
	}
	if strings.Contains(err.Error(), wrong) {
		t.Fatalf("the error echoes the password: %v", err)
	}
	if !strings.Contains(err.Error(), e.URL()) {
		t.Fatalf("the error does not name the address %s: %v", e.URL(), err)
	}
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("the cause is not wrapped: %v", err)
	}
}

// The bus is recognised by the fingerprint of its leaf certificate, whatever the certificate
// names; any other certificate is refused with both fingerprints in the error.
func TestTLSIsPinnedByFingerprint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile, fingerprint := testnats.SelfSignedCert(t, dir)
	u := testUser{name: "controller", password: "pw", pub: []string{"mesh.>"}, sub: []string{"_INBOX.controller.>"}}
	e, err := StartEmbedded(context.Background(), EmbeddedOptions{
		StateDir: dir, Listen: "127.0.0.1:0", InitialAccounts: accountsFor(t, u),
		TLSCert: certFile, TLSKey: keyFile,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	if !strings.HasPrefix(e.URL(), "tls://") {
		t.Fatalf("a TLS bus advertises %s", e.URL())
	}
	cred := busclient.Credential{User: u.name, Password: u.password}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// As operators paste it: upper case with colons.
	var pasted []string
	for i := 0; i < len(fingerprint); i += 2 {
		pasted = append(pasted, strings.ToUpper(fingerprint[i:i+2]))
	}
	for _, fp := range []string{fingerprint, strings.Join(pasted, ":")} {
		c, err := busclient.Dial(ctx, busclient.Target{URL: e.URL(), Fingerprint: fp}, cred)
		if err != nil {
			t.Fatalf("dialling with fingerprint %s: %v", fp, err)
		}
		c.Close()
	}

	wrong := strings.Repeat("ab", 32)
	_, err = busclient.Dial(ctx, busclient.Target{URL: e.URL(), Fingerprint: wrong}, cred)
	if err == nil {
		t.Fatal("a wrong fingerprint was accepted")
	}
	want := "certificate fingerprint mismatch: got " + fingerprint + ", want " + wrong
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want it to say %q", err, want)
	}
	var mismatch *busclient.FingerprintMismatchError
	if !errors.As(err, &mismatch) || mismatch.Got != fingerprint {
		t.Fatalf("the mismatch is not a *FingerprintMismatchError in the chain: %v", err)
	}

	// A plain nats:// URL with a pin still insists on TLS, so the pin cannot be skipped.
	plain := strings.Replace(e.URL(), "tls://", "nats://", 1)
	if _, err := busclient.Dial(ctx, busclient.Target{URL: plain, Fingerprint: wrong}, cred); !errors.As(err, &mismatch) {
		t.Fatalf("nats:// with a pin: got %v, want the mismatch", err)
	}
	if _, err := busclient.Dial(ctx, busclient.Target{URL: e.URL(), Fingerprint: "not-hex"}, cred); err == nil {
		t.Fatal("a malformed fingerprint was accepted")
	}
}
