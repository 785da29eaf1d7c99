package reconcile

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/bus/bustest"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/internal/testnats"
)

// caMesh is a description of one node and one module on the server x, verified by the CA in
// caFile and presenting the client certificate in certFile and keyFile where they are given.
func caMesh(x *bustest.TestServer, caFile, certFile, keyFile string) string {
	tlsKeys := fmt.Sprintf("  ca_file: %s\n", caFile)
	if certFile != "" {
		tlsKeys += fmt.Sprintf("  cert_file: %s\n  key_file: %s\n", certFile, keyFile)
	}
	return fmt.Sprintf(`bus:
  url: %s
%s  accounts_file: %s
  reload: { pid_file: %s }
nodes:
  - name: alpha
modules:
  - name: shop
    on: [alpha]
    emits: [order.placed]
`, x.URL, tlsKeys, x.AccountsFile, x.PIDFile)
}

// meshctl's own connections verify an external server as a host does: by the CA that signs
// its certificate (bus.ca_file) and its name, presenting meshctl's client certificate
// (bus.cert_file, bus.key_file) to a server that asks for one. The description needs no change
// when the server's certificate is renewed by the CA; a leaf from another CA is refused, and so
// is meshctl without its client certificate.
func TestMeshctlVerifiesAnExternalServerByItsCA(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	dir := t.TempDir()
	ca := testnats.NewCA(t, t.TempDir())
	cert, key, _ := ca.ServerCert(t, dir)
	clientCert, clientKey := ca.ClientCert(t, t.TempDir())
	x := bustest.StartTestServerTLS(t, dir, bustest.ServerTLS{CertFile: cert, KeyFile: key, CAFile: ca.File, Verify: true})

	f := newFixture(t, caMesh(x, ca.File, clientCert, clientKey))
	s := f.connect(ctx) // bootstraps the controller into the operator's accounts file
	if s.Target.CA == "" || s.Target.CertFile != clientCert || s.Target.Fingerprint != "" {
		t.Fatalf("the session's target %+v is not verified by the CA alone with the client certificate", s.Target)
	}
	f.mustApply(ctx, s)
	f.mustConverge(ctx, s)
	s.Close()

	// The server's certificate renewed by the CA: the same description reaches it.
	ca.ServerCert(t, dir)
	x.Restart(t)
	s = f.connect(ctx)
	f.mustConverge(ctx, s)
	s.Close()

	f.write(caMesh(x, ca.File, "", ""))
	_, err := Connect(ctx, f.mesh(), f.store, Options{Cost: bcrypt.MinCost, Logf: f.logf})
	// With TLS 1.3 the server checks the client's certificate after the client's half of the
	// handshake: its refusal reads as its alert, or as the connection it closed.
	var alert *net.OpError
	var ownCheck x509.UnknownAuthorityError
	if err == nil || errors.Is(err, nats.ErrAuthorization) || errors.As(err, &ownCheck) ||
		!(errors.As(err, &alert) && alert.Op == "remote error" || strings.Contains(err.Error(), "tls")) {
		t.Fatalf("meshctl without its client certificate, on a server with verify: true: got %v, want the server's refusal in the TLS handshake", err)
	}

	f.write(caMesh(x, ca.File, clientCert, clientKey))
	testnats.NewCA(t, t.TempDir()).ServerCert(t, dir)
	x.Restart(t)
	_, err = Connect(ctx, f.mesh(), f.store, Options{Cost: bcrypt.MinCost, Logf: f.logf})
	var unknown x509.UnknownAuthorityError
	var verification *tls.CertificateVerificationError
	if !errors.As(err, &verification) || !errors.As(err, &unknown) {
		t.Fatalf("a server whose leaf another CA signed: got %v, want a certificate verification error (unknown authority)", err)
	}
	f.ownSecrets()
}

// A ca_file that is not there, or holds no certificate, is refused before anything is dialled,
// naming the file: every membership would carry its text.
func TestACAFileThatHoldsNoCertificateIsRefused(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	x := bustest.StartTestServer(t, t.TempDir())
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file string
		want error
	}{
		{filepath.Join(t.TempDir(), "missing.pem"), os.ErrNotExist},
		{notPEM, busclient.ErrNoCACertificate},
	} {
		f := newFixture(t, caMesh(x, tc.file, "", ""))
		_, err := Connect(ctx, f.mesh(), f.store, Options{Cost: bcrypt.MinCost, Logf: f.logf})
		if !errors.Is(err, tc.want) {
			t.Errorf("ca_file %s: got %v, want %v", tc.file, err, tc.want)
		}
	}
}
