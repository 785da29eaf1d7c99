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

var (
	buildOnce   sync.Once
	builtServer string
	buildErr    error
	buildDir    string
)

// TestServerEnv names the environment variable that points the tests at a nats-server binary
// other than the module's pinned release.
const TestServerEnv = "MESHCTL_TEST_NATS_SERVER"

// NATSServerBinary builds nats-server from the module's pinned version once per test process —
// the same release the embedded bus links — for tests that need a real separate server process
// (signals, pid files, a server that stops and starts). It builds with -race when the tests do,
// to reuse the packages already compiled for them. Call RemoveBuiltServer from TestMain.
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
	buildOnce.Do(func() {
		gomod, err := exec.Command(goBin, "env", "GOMOD").Output()
		if err != nil {
			buildErr = err
			return
		}
		buildDir, buildErr = os.MkdirTemp("", "meshctl-nats-server-")
		if buildErr != nil {
			return
		}
		args := []string{"build", "-o", filepath.Join(buildDir, "nats-server")}
		if raceEnabled() {
			args = append(args, "-race")
		}
		cmd := exec.Command(goBin, append(args, "github.com/nats-io/nats-server/v2")...)
		cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = errors.New(err.Error() + ": " + string(out))
			return
		}
		builtServer = filepath.Join(buildDir, "nats-server")
	})
	if buildErr != nil {
		tb.Fatalf("building nats-server: %v", buildErr)
	}
	return builtServer
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

// RemoveBuiltServer removes what NATSServerBinary built.
func RemoveBuiltServer() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// SelfSignedCert writes an ECDSA certificate for 127.0.0.1 that names nothing a public verifier
// accepts — like the mesh's own — and returns the files and its fingerprint: the lower-case
// hex SHA-256 of its DER bytes, the form busclient.Fingerprint writes and a pin compares.
// Spelt here rather than called, so that this package imports nothing of meshctl; a test
// that dials with the pin fails if the two ever differ.
func SelfSignedCert(t TB, dir string) (certFile, keyFile, fingerprint string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("writing a test certificate: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "meshctl test bus"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("writing a test certificate: %v", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatalf("writing a test certificate: %v", err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatalf("writing a test certificate: %v", err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatalf("writing a test certificate: %v", err)
	}
	sum := sha256.Sum256(der)
	return certFile, keyFile, hex.EncodeToString(sum[:])
}
