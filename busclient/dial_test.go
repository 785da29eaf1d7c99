package busclient

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/meshbus/meshctl/internal/testnats"
)

// A URL carrying a password is refused before anything is dialled, naming the address without
// the userinfo; Address strips it even from URLs that do not parse.
func TestAURLWithAPasswordIsRefusedWithoutEchoingIt(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-Pa55"
	for _, tc := range []struct{ url, address string }{
		{"nats://controller:" + secret + "@127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"tls://controller:" + secret + "@bus.example:4443", "tls://bus.example:4443"},
		{"nats://controller:" + secret + "@127.0.0.1:bad%", "nats://…"},
		{"nats://u:" + secret + " x@host:4222/", "nats://…"},
		{"nats://admin:p@" + secret + "@127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{`nats://admin:"` + secret + "@127.0.0.1:4222", "nats://…"},
		// A '/' ends the authority: the parser then fails on the port, the rest of the
		// password in hand.
		{"nats://admin:" + secret[:4] + "/" + secret[4:] + "@127.0.0.1:4222", "nats://…"},
	} {
		tgt := Target{URL: tc.url}
		if got := tgt.Address(); got != tc.address {
			t.Errorf("Address(%q) = %q, want %q", tc.url, got, tc.address)
		}
		_, err := Dial(context.Background(), tgt, Credential{User: "controller", Password: "other"})
		if err == nil {
			t.Fatalf("%s was accepted", tc.address)
		}
		if strings.Contains(err.Error(), secret) {
			t.Fatalf("the error echoes the password: %v", err)
		}
		if !strings.Contains(err.Error(), tc.address) {
			t.Errorf("the error does not name %s: %v", tc.address, err)
		}
	}
}

// The server's wordings, including the one a reload uses when it drops a subscription the new
// config no longer allows.
func TestParseViolation(t *testing.T) {
	t.Parallel()
	wrap := func(s string) error { return errors.Join(nats.ErrPermissionViolation, errors.New(s)) }
	for _, tc := range []struct {
		msg  string
		want *PermissionError
	}{
		{`Permissions Violation for Publish to "a.b"`, &PermissionError{User: "u", Op: OpPublish, Subject: "a.b"}},
		{`Permissions Violation for Subscription to "a.>"`, &PermissionError{User: "u", Op: OpSubscribe, Subject: "a.>"}},
		{`Permissions Violation for Subscription to "a.*" using queue "q"`, &PermissionError{User: "u", Op: OpSubscribe, Subject: "a.*", Queue: "q"}},
		{`Permissions Violation for Subscription to "a" using queue "q" (sid "7")`, &PermissionError{User: "u", Op: OpSubscribe, Subject: "a", Queue: "q"}},
		{`Permissions Violation for Subscription to "a" (sid "7")`, &PermissionError{User: "u", Op: OpSubscribe, Subject: "a"}},
		{`Permissions Violation for Publish with Reply of "_R_.x"`, &PermissionError{User: "u", Op: OpReply, Subject: "_R_.x"}},
	} {
		got := parseViolation("u", wrap(tc.msg))
		if got == nil || *got != *tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.msg, got, tc.want)
		}
	}
	if got := parseViolation("u", nats.ErrMaxSubscriptionsExceeded); got != nil {
		t.Errorf("not a violation, parsed as %+v", got)
	}
}

// A Credential printed by mistake shows the user, not the password.
func TestACredentialDoesNotPrintItsPassword(t *testing.T) {
	t.Parallel()
	c := Credential{User: "controller", Password: "hunter2-secret"}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		if got := fmt.Sprintf(verb, c); strings.Contains(got, "hunter2") {
			t.Errorf("%s prints the password: %s", verb, got)
		}
	}
}

// A cluster's Target dials every server and pins every fingerprint its servers present.
func TestAClusterTargetListsEveryServerAndPin(t *testing.T) {
	a, b := strings.Repeat("ab", 32), strings.Repeat("CD", 32)
	c := Cluster([]Target{{URL: "tls://10.0.0.1:4222", Fingerprint: a}, {URL: "tls://10.0.0.2:4222", Fingerprint: b}, {URL: "tls://10.0.0.3:4222", Fingerprint: a}})
	if got := c.urls(); got != "tls://10.0.0.1:4222,tls://10.0.0.2:4222,tls://10.0.0.3:4222" {
		t.Fatalf("urls %q", got)
	}
	pins, err := c.pins()
	if err != nil || len(pins) != 2 || pins[0] != a || pins[1] != strings.ToLower(b) {
		t.Fatalf("pins %v, %v", pins, err)
	}
	if len(c.servers()) != 3 {
		t.Fatalf("servers %v", c.servers())
	}
}

// A cluster's Target is verified by every server's CA, each once, and presents the client
// certificate its servers name.
func TestAClusterTargetCarriesEveryServersCA(t *testing.T) {
	t.Parallel()
	a, b := testnats.NewCA(t, t.TempDir()), testnats.NewCA(t, t.TempDir())
	c := Cluster([]Target{
		{URL: "tls://10.0.0.1:4222", CA: a.PEM, CertFile: "c.pem", KeyFile: "k.pem"},
		{URL: "tls://10.0.0.2:4222", CA: b.PEM, CertFile: "c.pem", KeyFile: "k.pem"},
		{URL: "tls://10.0.0.3:4222", CA: a.PEM, CertFile: "c.pem", KeyFile: "k.pem"},
	})
	pool, err := c.roots()
	if err != nil {
		t.Fatal(err)
	}
	want := x509.NewCertPool()
	for _, ca := range []*testnats.CA{a, b} {
		want.AppendCertsFromPEM([]byte(ca.PEM))
	}
	if !pool.Equal(want) {
		t.Fatalf("the cluster's CA %q is not both servers' CAs", c.CA)
	}
	if strings.Count(c.CA, "BEGIN CERTIFICATE") != 2 || c.CertFile != "c.pem" || c.KeyFile != "k.pem" {
		t.Fatalf("cluster target %+v", c)
	}
}

// What cannot verify anything, or present anything, is refused before anything is dialled:
// a CA with no certificate in it, and a client certificate without its key.
func TestATargetThatCannotBeVerifiedIsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		t    Target
		want error
	}{
		{"a CA that is no PEM", Target{URL: "tls://127.0.0.1:1", CA: "not a certificate"}, ErrNoCACertificate},
		{"a certificate without its key", Target{URL: "tls://127.0.0.1:1", CertFile: "c.pem"}, nil},
		{"a key without its certificate", Target{URL: "tls://127.0.0.1:1", KeyFile: "k.pem"}, nil},
	} {
		_, err := Dial(context.Background(), tc.t, Credential{User: "u", Password: "p"})
		if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s: dialled the server: %v", tc.name, err)
		}
	}
}

// A user JWT that cannot be presented is refused before anything is dialled, and the refusal
// quotes no secret: one with a password, one without a seed, one with a seed that is not a
// user's, and a Refresh that cannot read the credential.
func TestAUserJWTThatCannotBePresentedIsRefused(t *testing.T) {
	t.Parallel()
	const password, seed = "hunter2-secret", "SUnot-a-seed-hunter2"
	target := Target{URL: "nats://127.0.0.1:1"}
	unreadable := errors.New("the membership file is gone")
	for _, tc := range []struct {
		name string
		c    Credential
		want error
	}{
		{"a JWT with a password", Credential{User: "u", JWT: "x.y.z", Password: password}, nil},
		{"a JWT without its seed", Credential{User: "u", JWT: "x.y.z"}, nil},
		{"a seed that is not a user's", Credential{User: "u", JWT: "x.y.z", Seed: seed}, ErrNotUserSeed},
		{"a Refresh that fails", Credential{User: "u", Refresh: func() (string, string, error) { return "", "", unreadable }}, unreadable},
	} {
		_, err := Dial(context.Background(), target, tc.c)
		if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s: dialled the server: %v", tc.name, err)
		}
		if err != nil && (strings.Contains(err.Error(), password) || strings.Contains(err.Error(), "hunter2")) {
			t.Errorf("%s: the error quotes a secret: %v", tc.name, err)
		}
	}
}
