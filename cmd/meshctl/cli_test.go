package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/state"
)

const cliMesh = `
bus:
  listen: "127.0.0.1:-1"
nodes:
  - name: alpha
seats:
  - name: mailer
    accepts: [send]
modules:
  - name: shop
    on: [alpha]
    sends: [mailer/send]
  - name: postman
    on: [alpha]
    claims: [mailer]
`

func cliFixture(t *testing.T) (dir, stateDir string) {
	t.Helper()
	return writeMesh(t, map[string]string{"mesh.yaml": cliMesh}), filepath.Join(t.TempDir(), "state")
}

func TestDiffApplyDiffExitCodes(t *testing.T) {
	t.Parallel()
	dir, st := cliFixture(t)
	common := []string{"-f", dir, "--state", st}
	if code, out, errOut := meshctl(t, append([]string{"diff"}, common...)...); code != exitChanges || !strings.Contains(out, "+ stream SEAT_MAILER") {
		t.Fatalf("diff before apply: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := meshctl(t, append([]string{"apply", "--bcrypt-cost", "4"}, common...)...); code != exitOK {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ := meshctl(t, append([]string{"diff", "-o", "json"}, common...)...)
	var doc struct {
		Schema string `json:"schema"`
		InSync bool   `json:"in_sync"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &doc) != nil || !doc.InSync || doc.Schema != "meshctl.plan/v1" {
		t.Fatalf("diff after apply: exit %d\n%s", code, out)
	}
	if code, _, errOut := meshctl(t, append([]string{"apply"}, common...)...); code != exitOK || !strings.Contains(errOut, "already in sync") {
		t.Fatalf("a second apply: exit %d\n%s", code, errOut)
	}
	if code, _, _ := meshctl(t, "diff", "-f", filepath.Join(dir, "nope"), "--state", st); code != exitError {
		t.Fatalf("diff of a missing directory: exit %d", code)
	}
}

// The password `credentials issue` prints verifies against the hash in the accounts config
// the bus loads, and appears nowhere else: not on stderr, not in the state directory but
// the controller's own file.
func TestCredentialsIssueMembershipLogsIn(t *testing.T) {
	t.Parallel()
	dir, st := cliFixture(t)
	common := []string{"-f", dir, "--state", st, "--bcrypt-cost", "4"}
	code, out, errOut := meshctl(t, append([]string{"credentials", "issue", "alpha.shop"}, common...)...)
	if code != exitOK || strings.Count(out, "\n") != 1 {
		t.Fatalf("issue: exit %d\n%s\n%s", code, out, errOut)
	}
	var mem struct{ Address, Fingerprint, User, Password string }
	if err := json.Unmarshal([]byte(out), &mem); err != nil || mem.User != "alpha.shop" || mem.Password == "" || strings.Contains(mem.Address, "@") {
		t.Fatalf("membership %q: %v", out, err)
	}
	if strings.Contains(errOut, mem.Password) {
		t.Fatal("the password is on stderr")
	}
	if code, out, _ := meshctl(t, append([]string{"credentials", "issue", "alpha.shopp"}, common...)...); code != exitError || out != "" {
		t.Fatalf("issuing for an unknown principal: exit %d", code)
	}
	if _, _, errOut := meshctl(t, append([]string{"credentials", "issue", "alpha.shopp"}, common...)...); !strings.Contains(errOut, `did you mean "alpha.shop"`) {
		t.Fatalf("no suggestion: %s", errOut)
	}

	// The accounts config the embedded bus will load carries the hash the password opens.
	accounts, err := os.ReadFile(filepath.Join(st, "bus", "accounts.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.CheckAccounts(accounts, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	hashOK := false
	for _, line := range strings.Split(string(accounts), "\n") {
		if strings.Contains(line, `user: "alpha.shop"`) {
			hash := strings.Split(strings.SplitN(line, `password: "`, 2)[1], `"`)[0]
			hashOK = bcrypt.CompareHashAndPassword([]byte(hash), []byte(mem.Password)) == nil
		}
	}
	if !hashOK {
		t.Fatal("the issued password does not open alpha.shop's entry in the accounts config")
	}

	// Apply, bring the bus up as a watch would, and log in with the membership.
	if code, _, errOut := meshctl(t, append([]string{"apply"}, common...)...); code != exitOK {
		t.Fatalf("apply: %s", errOut)
	}
	ctx := context.Background()
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	store, err := state.Open(st)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	sess, err := reconcile.Connect(ctx, m, store, reconcile.Options{Cost: 4, OwnEmbedded: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	c, err := busclient.Dial(ctx, busclient.Target{URL: sess.Embedded.URL()}, busclient.Credential{User: mem.User, Password: mem.Password})
	if err != nil {
		t.Fatalf("the issued membership cannot log in: %v", err)
	}
	c.Close()

	// The plaintext is nowhere in the state directory.
	err = filepath.Walk(st, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err == nil && bytes.Contains(data, []byte(mem.Password)) {
			t.Errorf("%s holds the issued password", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Revoked, it no longer logs in as soon as revoke returns: the bus is served by this test
	// process, and revoke has it reloaded through its control socket, as it would a `meshctl
	// watch`'s, and succeeds only once the bus is seen serving the new file.
	if code, _, errOut := meshctl(t, append([]string{"credentials", "revoke", "alpha.shop"}, common...)...); code != exitOK {
		t.Fatalf("revoke: %s", errOut)
	}
	if c, err := busclient.Dial(ctx, busclient.Target{URL: sess.Embedded.URL()}, busclient.Credential{User: mem.User, Password: mem.Password}); err == nil {
		c.Close()
		t.Fatal("a revoked credential still logs in")
	}
}

func TestHelpTeaches(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"validate", "render", "diff", "apply", "credentials", "graph"} {
		code, out, _ := meshctl(t, cmd, "--help")
		if code != exitOK || !strings.Contains(out, "Usage: meshctl "+cmd) && !strings.Contains(out, "meshctl "+cmd) || !strings.Contains(out, "Example") {
			t.Errorf("meshctl %s --help: exit %d\n%s", cmd, code, out)
		}
	}
	if code, _, errOut := meshctl(t, "aply"); code != exitError || !strings.Contains(errOut, "apply") {
		t.Errorf("a mistyped command: exit %d %s", code, errOut)
	}
}
