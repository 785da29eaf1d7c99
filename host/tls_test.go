package host_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/meshbus/meshctl/bus/bustest"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/host/hosttest"
	"github.com/meshbus/meshctl/internal/backoff"
	"github.com/meshbus/meshctl/internal/testnats"
	"github.com/meshbus/meshctl/render"
)

// The bus as production runs it: servers whose certificates a CA signs and renews (cert-manager,
// say), each renewal a new leaf with a new fingerprint. These tests run the real nats-server
// with certificates the test's own CA makes.

const quickstart = "../examples/quickstart"

// reconnecting joins as m's principal, reconnecting for ever as a host does, and says on the
// channel each time the connection is made again.
func reconnecting(ctx context.Context, t *testing.T, m host.Membership) (*host.Host, <-chan struct{}) {
	t.Helper()
	again := make(chan struct{}, 8)
	h, err := host.Join(ctx, m, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.ReconnectHandler(func(*nats.Conn) {
			select {
			case again <- struct{}{}:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("joining as %s: %v", m.User, err)
	}
	t.Cleanup(h.Close)
	return h, again
}

// mustPublish publishes an order as alpha.shop, proving the connection carries its login.
func mustPublish(ctx context.Context, t *testing.T, h *host.Host, order string) {
	t.Helper()
	if _, err := h.Publish(ctx, render.ModuleEvent("shop", "order.placed"), []byte(order)); err != nil {
		t.Fatalf("publishing %s as %s: %v", order, h.User(), err)
	}
}

// waitReconnected waits for the host's connection to be made again after its server restarted.
func waitReconnected(ctx context.Context, t *testing.T, again <-chan struct{}, h *host.Host) {
	t.Helper()
	select {
	case <-again:
	case <-ctx.Done():
		t.Fatalf("%s did not reconnect after the server restarted (last error: %v)", h.User(), h.Conn().LastError())
	}
}

// A membership carrying the CA, and no fingerprint, joins a bus whose certificate the CA signed
// for the server's name. When the certificate is renewed by the same CA — a new leaf written
// over the server's files and reloaded — the host, its membership unchanged, reconnects when
// the server restarts and carries on; a new host joins with the same membership. A leaf from
// another CA is refused, as a certificate verification error, before the password is sent; and a
// pin beside the CA must hold too.
func TestAHostVerifiesTheBusByItsCAAcrossARenewal(t *testing.T) {
	t.Parallel()
	ca := testnats.NewCA(t, t.TempDir())
	serverDir := t.TempDir()
	cert, key, first := ca.ServerCert(t, serverDir)
	b := hosttest.StartTLS(t, quickstart, bustest.ServerTLS{CertFile: cert, KeyFile: key}, busclient.Target{CA: ca.PEM})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	m := b.Membership("alpha.shop")
	if m.Fingerprint != "" || m.CA != ca.PEM {
		t.Fatalf("the membership pins %q and carries CA %q; want the CA alone", m.Fingerprint, m.CA)
	}
	h, again := reconnecting(ctx, t, m)
	mustPublish(ctx, t, h, "order-1")

	// The renewal: a new leaf of the same CA in place of the old, and a reload, after which a
	// new connection is served the new leaf (proved by pinning it alone).
	_, _, renewed := ca.ServerCert(t, serverDir)
	if renewed == first {
		t.Fatal("the renewed certificate is the first one")
	}
	b.Server.Reload(t)
	pinned := busclient.Target{URL: m.Address, Fingerprint: renewed, CA: ca.PEM}
	cred := busclient.Credential{User: m.User, Password: m.Password}
	var err error
	if !backoff.Retry(ctx, backoff.Backoff{Min: 20 * time.Millisecond, Max: time.Second}, func() bool {
		var c *busclient.Conn
		if c, err = busclient.DialAlone(ctx, pinned, cred); err == nil {
			c.Close()
		}
		return err == nil
	}) {
		t.Fatalf("the reloaded server does not serve the renewed certificate: %v", err)
	}

	// The host made its connection under the old leaf; a restart makes it reconnect.
	b.Server.Restart(t)
	waitReconnected(ctx, t, again, h)
	mustPublish(ctx, t, h, "order-2")
	fresh, err := host.Join(ctx, m)
	if err != nil {
		t.Fatalf("a host with the unchanged membership cannot join the renewed server: %v", err)
	}
	fresh.Close()
	// A pin beside the CA must hold as well: pinned to the first leaf, the renewed one is refused.
	pinnedToFirst := m
	pinnedToFirst.Fingerprint = first
	_, err = host.Join(ctx, pinnedToFirst)
	var mismatch *busclient.FingerprintMismatchError
	if !errors.As(err, &mismatch) || mismatch.Got != renewed {
		t.Fatalf("the CA and a pin of the first leaf, on the renewed server: got %v, want a fingerprint mismatch naming %s", err, renewed)
	}

	// Another CA's leaf in place of this CA's: refused by the chain, not by a login.
	testnats.NewCA(t, t.TempDir()).ServerCert(t, serverDir)
	b.Server.Restart(t)
	_, err = host.Join(ctx, m)
	var unknown x509.UnknownAuthorityError
	var verification *tls.CertificateVerificationError
	if !errors.As(err, &verification) || !errors.As(err, &unknown) {
		t.Fatalf("a leaf another CA signed: got %v, want a certificate verification error (unknown authority)", err)
	}
}

// A server with verify: true asks every client for a certificate its CA signed: a membership
// naming the host's client certificate and key joins; the same membership without them is
// refused in the handshake, and so is one whose certificate another CA signed.
func TestAHostPresentsItsClientCertificateWhereTheServerAsksForOne(t *testing.T) {
	t.Parallel()
	ca := testnats.NewCA(t, t.TempDir())
	cert, key, _ := ca.ServerCert(t, t.TempDir())
	clientCert, clientKey := ca.ClientCert(t, t.TempDir())
	b := hosttest.StartTLS(t, quickstart, bustest.ServerTLS{CertFile: cert, KeyFile: key, CAFile: ca.File, Verify: true},
		busclient.Target{CA: ca.PEM, CertFile: clientCert, KeyFile: clientKey})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	m := b.Membership("alpha.shop")
	if m.CertFile != clientCert || m.KeyFile != clientKey {
		t.Fatalf("the membership names %q and %q, not the client certificate", m.CertFile, m.KeyFile)
	}
	h, err := host.Join(ctx, m)
	if err != nil {
		t.Fatalf("joining with the client certificate: %v", err)
	}
	mustPublish(ctx, t, h, "order-1")
	h.Close()

	without := m
	without.CertFile, without.KeyFile = "", ""
	refusedInTheHandshake(ctx, t, without, "without a client certificate")
	strangerCert, strangerKey := testnats.NewCA(t, t.TempDir()).ClientCert(t, t.TempDir())
	stranger := m
	stranger.CertFile, stranger.KeyFile = strangerCert, strangerKey
	refusedInTheHandshake(ctx, t, stranger, "with a client certificate another CA signed")

	missing := m
	missing.CertFile = filepath.Join(t.TempDir(), "gone.pem")
	if _, err := host.Join(ctx, missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a membership naming a client certificate that is not there: got %v, want the file named as missing", err)
	}
}

// A planned rotation of a pinned bus: the membership pins the certificate served now and its
// successor, made in advance. The successor is put in place and the server restarted; the
// host reconnects with its membership unchanged, while one pinned to the old certificate
// alone is refused by name.
func TestAPinnedHostSurvivesAPlannedRotation(t *testing.T) {
	t.Parallel()
	serverDir := t.TempDir()
	cert, key, old := testnats.SelfSignedCert(t, serverDir)
	staged := t.TempDir()
	nextCert, nextKey, next := testnats.SelfSignedCert(t, staged)
	b := hosttest.StartTLS(t, quickstart, bustest.ServerTLS{CertFile: cert, KeyFile: key},
		busclient.Target{Fingerprint: old + " " + next})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	m := b.Membership("alpha.shop")
	h, again := reconnecting(ctx, t, m)
	mustPublish(ctx, t, h, "order-1")

	for from, to := range map[string]string{nextCert: cert, nextKey: key} {
		if err := os.Rename(from, to); err != nil {
			t.Fatal(err)
		}
	}
	b.Server.Restart(t)
	waitReconnected(ctx, t, again, h)
	mustPublish(ctx, t, h, "order-2")

	oldOnly := m
	oldOnly.Fingerprint = old
	_, err := host.Join(ctx, oldOnly)
	var mismatch *busclient.FingerprintMismatchError
	if !errors.As(err, &mismatch) || mismatch.Got != next {
		t.Fatalf("a membership pinned to the old certificate alone: got %v, want a fingerprint mismatch naming %s", err, next)
	}
}

// refusedInTheHandshake asserts that m cannot join, refused by the server in the TLS handshake
// rather than by a login or by the host's own verification of the server: what verify: true
// refuses. With TLS 1.3 the client's half of the handshake ends before the server has checked
// its certificate, so the refusal reads as the server's alert ("remote error") or, when the
// client writes first, as the connection the server closed.
func refusedInTheHandshake(ctx context.Context, t *testing.T, m host.Membership, what string) {
	t.Helper()
	h, err := host.Join(ctx, m)
	if err == nil {
		h.Close()
		t.Fatalf("a host %s joined a server that asks for a certificate its CA signed", what)
	}
	if !refusedByTheServersHandshake(err) {
		t.Fatalf("a host %s: got %v, want the server's refusal in the TLS handshake", what, err)
	}
}

// refusedByTheServersHandshake reports whether err is a server's refusal in the TLS handshake:
// neither a login refused nor a certificate the client itself could not verify.
func refusedByTheServersHandshake(err error) bool {
	var alert *net.OpError
	if errors.As(err, &alert) && alert.Op == "remote error" {
		return true
	}
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var name x509.HostnameError
	var verify *tls.CertificateVerificationError
	return err != nil && !errors.Is(err, nats.ErrAuthorization) && !errors.As(err, &unknown) &&
		!errors.As(err, &invalid) && !errors.As(err, &name) && !errors.As(err, &verify) &&
		strings.Contains(err.Error(), "tls")
}
