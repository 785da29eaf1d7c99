package reconcile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/bus/bustest"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/internal/testwait"
)

// externalServer runs the real nats-server binary as its own process, with TLS, a pid file
// and the accounts file meshctl writes included, as an operator's server would.
type externalServer struct {
	dir, url, fingerprint, accounts, pidFile string
	srv                                      *bustest.TestServer
}

func startExternal(t *testing.T) externalServer {
	t.Helper()
	return startExternalIn(t, t.TempDir())
}

// startExternalIn is startExternal with the server's files in dir, its JetStream store in
// dir/js, which the caller may have mounted already.
func startExternalIn(t *testing.T, dir string) externalServer {
	t.Helper()
	x := bustest.StartTestServer(t, dir)
	return externalServer{dir: x.Dir, url: x.URL, fingerprint: x.Fingerprint, accounts: x.AccountsFile, pidFile: x.PIDFile, srv: x}
}

func (x externalServer) mesh(fingerprint string) string { return x.srv.MeshPinnedTo(fingerprint) }

func TestAnExternalServerIsReloadedByPIDFileOverPinnedTLS(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	x := startExternal(t)
	f := newFixture(t, x.mesh(x.fingerprint))
	s := f.connect(ctx) // bootstraps the controller into the operator's accounts file
	f.mustApply(ctx, s)
	f.mustConverge(ctx, s)

	// A credential issued afterwards works once the accounts config is reloaded by pid.
	pw := f.mint(ctx, "alpha.shop")
	f.mustApply(ctx, s)
	testwait.Until(t, "a credential issued and applied logging in to the external bus", func() error {
		c, err := busclient.Dial(ctx, busclient.Target{URL: x.url, Fingerprint: x.fingerprint}, busclient.Credential{User: "alpha.shop", Password: pw["alpha.shop"]})
		if err == nil {
			c.Close()
		}
		return err
	})
	if strings.Contains(f.log.String(), pw["alpha.shop"]) {
		t.Fatal("the password was logged")
	}
}

func TestAWrongFingerprintIsRefused(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	x := startExternal(t)
	wrong := strings.Repeat("ab", 32)
	f := newFixture(t, x.mesh(wrong))
	_, err := Connect(ctx, f.mesh(), f.store, Options{Cost: bcrypt.MinCost, Logf: f.logf})
	var mismatch *busclient.FingerprintMismatchError
	if !errors.As(err, &mismatch) || !strings.Contains(err.Error(), wrong) {
		t.Fatalf("a bus presenting another certificate was not refused by its pin: %v", err)
	}
	// The error goes into the fixture's log, which is checked at cleanup for the
	// controller's password.
	pw, rerr := os.ReadFile(filepath.Join(f.stateDi, "controller.password"))
	if rerr != nil {
		t.Fatal(rerr)
	}
	f.secrets = append(f.secrets, strings.TrimSpace(string(pw)))
	f.logf("%v", err)
}
