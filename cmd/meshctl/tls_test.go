package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshbus/meshctl/bus/bustest"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/testnats"
)

// The server as production runs it: its certificate signed by a CA (bus.ca_file) and every
// client asked for a certificate of that CA (verify: true). meshctl applies through it with its
// own client certificate, and `credentials issue` prints a membership that carries the CA's
// text and names the client certificate's files, with no fingerprint: the host joins with it,
// and joins again, with the membership unchanged, once the server's certificate is renewed.
// Where the CA file cannot be read, nothing is minted.
func TestIssueOnACAVerifiedBusPrintsTheCA(t *testing.T) {
	t.Parallel()
	serverDir := t.TempDir()
	ca := testnats.NewCA(t, t.TempDir())
	cert, key, _ := ca.ServerCert(t, serverDir)
	clientCert, clientKey := ca.ClientCert(t, t.TempDir())
	srv := bustest.StartTestServerTLS(t, serverDir, bustest.ServerTLS{CertFile: cert, KeyFile: key, CAFile: ca.File, Verify: true})
	description := func(caFile string) string {
		return fmt.Sprintf(`bus:
  url: %s
  ca_file: %s
  cert_file: %s
  key_file: %s
  accounts_file: %s
  reload: { pid_file: %s }
nodes:
  - name: alpha
modules:
  - name: shop
    on: [alpha]
    emits: [order.placed]
`, srv.URL, caFile, clientCert, clientKey, srv.AccountsFile, srv.PIDFile)
	}
	dir := writeMesh(t, map[string]string{"mesh.yaml": description(ca.File)})
	state := t.TempDir()
	if code, out, errOut := meshctl(t, "apply", "-f", dir, "--state", state, "--bcrypt-cost", "4"); code != exitOK {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut := meshctl(t, "credentials", "issue", "alpha.shop", "-f", dir, "--state", state, "--bcrypt-cost", "4")
	if code != exitOK {
		t.Fatalf("issuing alpha.shop: exit %d\n%s%s", code, out, errOut)
	}
	m, err := host.ReadMembership(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if m.CA != ca.PEM || m.Fingerprint != "" || m.CertFile != clientCert || m.KeyFile != clientKey {
		t.Fatalf("the membership carries ca %q, fingerprint %q, cert_file %q, key_file %q", m.CA, m.Fingerprint, m.CertFile, m.KeyFile)
	}

	joins := func(when string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		h, err := host.Join(ctx, m)
		if err != nil {
			t.Fatalf("alpha.shop cannot join %s: %v", when, err)
		}
		h.Close()
	}
	joins("with the membership issued")
	ca.ServerCert(t, serverDir)
	srv.Restart(t)
	joins("once the server's certificate is renewed")
	if code, out, errOut := meshctl(t, "diff", "-f", dir, "--state", state); code != exitOK {
		t.Fatalf("diff once the server's certificate is renewed: exit %d\n%s%s", code, out, errOut)
	}

	missing := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(filepath.Join(dir, "mesh.yaml"), []byte(description(missing)), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = meshctl(t, "credentials", "issue", "alpha.shop", "-f", dir, "--state", state, "--bcrypt-cost", "4")
	if code == exitOK || out != "" || !strings.Contains(errOut, missing) {
		t.Fatalf("issuing with a CA file that is not there: exit %d\n%s%s", code, out, errOut)
	}
	// Had the refused issue minted a password, the next apply would make it live and lock
	// the membership issued before out.
	if err := os.WriteFile(filepath.Join(dir, "mesh.yaml"), []byte(description(ca.File)), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := meshctl(t, "apply", "-f", dir, "--state", state, "--bcrypt-cost", "4"); code != exitOK {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	joins("after an issue refused for its CA file, and an apply")
}
