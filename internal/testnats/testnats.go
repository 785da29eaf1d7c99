package testnats

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"
)

// TB is the part of testing.TB the test servers need: an interface, so the benchmark driver,
// which runs outside a test, can start them too.
type TB interface {
	Helper()
	TempDir() string
	Cleanup(func())
	Fatalf(format string, args ...any)
	Skip(args ...any)
}

// The nats-server NATSServerBinary built, under buildMu: built at the first call after the
// process starts or after RemoveBuiltServer.
var (
	buildMu     sync.Mutex
	builtServer string
	buildDir    string
)

// TestServerEnv names the environment variable that points the tests at a nats-server binary
// other than the module's pinned release.
const TestServerEnv = "MESHCTL_TEST_NATS_SERVER"

// NATSServerBinary builds nats-server from the module's pinned version once per test process —
// the same release the embedded bus links — for tests that need a real separate server process
// (signals, pid files, a server that stops and starts). It builds with -race when the tests do,
// to reuse the packages already compiled for them. Call RemoveBuiltServer from TestMain; a
// call after it builds again.
//
// MESHCTL_TEST_NATS_SERVER, when set, names a nats-server binary to use instead: the release
// matrix (`make test-compat`) runs the external-server tests against each supported release.
func NATSServerBinary(tb TB) string {
	tb.Helper()
	if bin := os.Getenv(TestServerEnv); bin != "" {
		return bin
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		tb.Skip("the go command is not on PATH, so nats-server cannot be built")
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if builtServer == "" {
		bin, err := buildServer(goBin)
		if err != nil {
			tb.Fatalf("building nats-server: %v", err)
		}
		builtServer = bin
	}
	return builtServer
}

// buildServer builds the module's nats-server into a directory of its own, kept in buildDir.
func buildServer(goBin string) (string, error) {
	gomod, err := exec.Command(goBin, "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	if buildDir, err = os.MkdirTemp("", "meshctl-nats-server-"); err != nil {
		return "", err
	}
	bin := filepath.Join(buildDir, "nats-server")
	args := []string{"build", "-o", bin}
	if raceEnabled() {
		args = append(args, "-race")
	}
	cmd := exec.Command(goBin, append(args, "github.com/nats-io/nats-server/v2")...)
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(buildDir)
		buildDir = ""
		return "", errors.New(err.Error() + ": " + string(out))
	}
	return bin, nil
}

func raceEnabled() bool {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range info.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// RemoveBuiltServer removes what NATSServerBinary built; the next call builds again.
func RemoveBuiltServer() {
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	builtServer, buildDir = "", ""
}

// SelfSignedCert writes an ECDSA certificate for 127.0.0.1 that names nothing a public verifier
// accepts — like the mesh's own — and returns the files and its fingerprint: the lower-case
// hex SHA-256 of its DER bytes, the form busclient.Fingerprint writes and a pin compares.
// Spelt here rather than called, so that this package imports nothing of meshctl; a test
// that dials with the pin fails if the two ever differ.
func SelfSignedCert(t TB, dir string) (certFile, keyFile, fingerprint string) {
	t.Helper()
	key := newKey(t)
	tmpl := leafTemplate(x509.ExtKeyUsageServerAuth)
	tmpl.Subject = pkix.Name{CommonName: "meshctl test bus"}
	tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	return writeCert(t, dir, "cert.pem", "key.pem", tmpl, tmpl, key, key)
}

// CA is a certificate authority a test makes, signing servers' and clients' certificates as
// an operator's own CA (cert-manager's issuer, say) does: a server's certificate renewed by it
// is a new leaf with a new fingerprint, and a client that verifies by the CA still accepts it.
type CA struct {
	// File is the CA's certificate, PEM, as a server's ca_file and a description's
	// bus.ca_file name it; PEM is its text, as a membership's "ca" carries it.
	File, PEM string

	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA makes a CA and writes its certificate to dir/ca.pem.
func NewCA(t TB, dir string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: "meshctl test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("making a test CA: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("making a test CA: %v", err)
	}
	ca := &CA{File: filepath.Join(dir, "ca.pem"), PEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), cert: cert, key: key}
	if err := os.WriteFile(ca.File, []byte(ca.PEM), 0o600); err != nil {
		t.Fatalf("making a test CA: %v", err)
	}
	return ca
}

// ServerCert writes a server certificate the CA signed for 127.0.0.1 and localhost, with a
// key of its own, to dir/cert.pem and dir/key.pem — replacing the ones there, as a renewal in
// place does — and returns the files and the new leaf's fingerprint.
func (ca *CA) ServerCert(t TB, dir string) (certFile, keyFile, fingerprint string) {
	t.Helper()
	tmpl := leafTemplate(x509.ExtKeyUsageServerAuth)
	tmpl.Subject = pkix.Name{CommonName: "localhost"}
	tmpl.DNSNames = []string{"localhost"}
	tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	return writeCert(t, dir, "cert.pem", "key.pem", tmpl, ca.cert, newKey(t), ca.key)
}

// ClientCert writes a client certificate the CA signed, for a server that asks for one
// (verify: true), to dir/client.pem and dir/client-key.pem.
func (ca *CA) ClientCert(t TB, dir string) (certFile, keyFile string) {
	t.Helper()
	tmpl := leafTemplate(x509.ExtKeyUsageClientAuth)
	tmpl.Subject = pkix.Name{CommonName: "meshctl test host"}
	certFile, keyFile, _ = writeCert(t, dir, "client.pem", "client-key.pem", tmpl, ca.cert, newKey(t), ca.key)
	return certFile, keyFile
}

func newKey(t TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("making a test key: %v", err)
	}
	return key
}

// serial is a random serial number: two leaves of one CA must not share one.
func serial(t TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatalf("making a test certificate: %v", err)
	}
	return n
}

func leafTemplate(usage x509.ExtKeyUsage) *x509.Certificate {
	return &x509.Certificate{
		NotBefore:   time.Now().Add(-time.Hour),
		NotAfter:    time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
}

// writeCert signs tmpl (for key) with parent's parentKey and writes the certificate and the
// key, PEM, each to a file of dir renamed into place, so that a server reloading meanwhile
// reads the old file or the new one, never half of one.
func writeCert(t TB, dir, certName, keyName string, tmpl, parent *x509.Certificate, key, parentKey *ecdsa.PrivateKey) (certFile, keyFile, fingerprint string) {
	t.Helper()
	if tmpl.SerialNumber == nil {
		tmpl.SerialNumber = serial(t)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatalf("writing a test certificate: %v", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatalf("writing a test certificate: %v", err)
	}
	certFile, keyFile = filepath.Join(dir, certName), filepath.Join(dir, keyName)
	for _, f := range []struct {
		path  string
		block *pem.Block
	}{{keyFile, &pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}}, {certFile, &pem.Block{Type: "CERTIFICATE", Bytes: der}}} {
		next := f.path + ".next"
		if err := os.WriteFile(next, pem.EncodeToMemory(f.block), 0o600); err != nil {
			t.Fatalf("writing a test certificate: %v", err)
		}
		if err := os.Rename(next, f.path); err != nil {
			t.Fatalf("writing a test certificate: %v", err)
		}
	}
	sum := sha256.Sum256(der)
	return certFile, keyFile, hex.EncodeToString(sum[:])
}
