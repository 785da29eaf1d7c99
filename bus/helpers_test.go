package bus

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/internal/atomicfile"
	"github.com/meshbus/meshctl/internal/testnats"
)

// testUser is one user of a test accounts config, with the plaintext its test dials with.
type testUser struct {
	name, password string
	pub, sub       []string
}

// accountsFor renders a MESH account the way render does — JetStream enabled on the account,
// every bcrypt hash double-quoted (an unquoted `$…` is a variable reference to the parser) — so
// these tests exercise the shapes the live file has.
func accountsFor(t testing.TB, users ...testUser) []byte {
	t.Helper()
	var b strings.Builder
	b.WriteString("accounts {\n  MESH {\n    jetstream: enabled\n    users = [\n")
	for _, u := range users {
		hash, err := bcrypt.GenerateFromPassword([]byte(u.password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "      { user: %q, password: %q, permissions: {\n", u.name, hash)
		fmt.Fprintf(&b, "        publish: { allow: %s }\n", confList(u.pub))
		fmt.Fprintf(&b, "        subscribe: { allow: %s }\n", confList(u.sub))
		b.WriteString("      } }\n")
	}
	b.WriteString("    ]\n  }\n}\n")
	return []byte(b.String())
}

func confList(subjects []string) string {
	q := make([]string, len(subjects))
	for i, s := range subjects {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// dialAs dials url as u and closes the connection when the test ends.
func dialAs(t *testing.T, url string, u testUser) *busclient.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := busclient.Dial(ctx, busclient.Target{URL: url}, busclient.Credential{User: u.name, Password: u.password})
	if err != nil {
		t.Fatalf("dialling as %s: %v", u.name, err)
	}
	t.Cleanup(c.Close)
	return c
}

// stateDirOf is the StateDir an Embedded was started with.
func stateDirOf(e *Embedded) string { return filepath.Dir(filepath.Dir(e.ConfigFile())) }

// writeAccounts replaces a bus's accounts file after checking it, as apply does.
func writeAccounts(t *testing.T, path string, accounts []byte) {
	t.Helper()
	if err := CheckAccounts(accounts, filepath.Dir(path)); err != nil {
		t.Fatalf("checking the new accounts: %v", err)
	}
	if err := atomicfile.Write(path, accounts); err != nil {
		t.Fatal(err)
	}
}

// deadPID is the pid of a child that has exited and been reaped: a pid that names no process
// (until the system reuses it, which a test's lifetime does not reach).
func deadPID(t *testing.T) int {
	t.Helper()
	child := exec.Command("true")
	if err := child.Run(); err != nil {
		t.Fatal(err)
	}
	return child.Process.Pid
}

func TestMain(m *testing.M) {
	code := m.Run()
	testnats.RemoveBuiltServer()
	os.Exit(code)
}

// startTestBus starts an embedded bus for one test, as bustest.StartTestBus does for every other
// package (which this package's own tests cannot import: bustest imports bus).
func startTestBus(t *testing.T, accounts []byte) *Embedded {
	t.Helper()
	if accounts == nil {
		accounts = []byte("# No accounts: an open bus for tests that do not exercise auth.\n")
	}
	e, err := StartEmbedded(context.Background(), EmbeddedOptions{
		StateDir:        t.TempDir(),
		Listen:          "127.0.0.1:-1",
		ServerName:      "meshctl-test",
		InitialAccounts: accounts,
	})
	if err != nil {
		t.Fatalf("starting a test bus: %v", err)
	}
	t.Cleanup(e.Shutdown)
	return e
}
