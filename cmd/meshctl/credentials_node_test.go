package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/state"
)

const twoNodesMesh = `
bus:
  listen: "127.0.0.1:-1"
nodes:
  - name: alpha
  - name: beta
`

// `credentials issue node.alpha` on an enrolled node refuses, exit 2, and changes nothing
// (issue 22, item 8): it used to mint a new password over the one the controller sealed to the
// node's agent, which was then locked out with nothing said. It points to re-enrolment, the one
// way an enrolled node's credential is replaced. rotate, which is issue for a node's
// credential, refuses the same. A node never enrolled is issued its credential as before.
func TestIssuingAnEnrolledNodesCredentialRefusesAndPointsToReEnrolment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, st := writeMesh(t, map[string]string{"mesh.yaml": twoNodesMesh}), filepath.Join(t.TempDir(), "state")
	common := []string{"-f", dir, "--state", st, "--bcrypt-cost", "4"}
	if code, _, errOut := meshctl(t, append([]string{"credentials", "issue", "enrol.alpha"}, common...)...); code != exitOK {
		t.Fatalf("issue enrol.alpha: exit %d\n%s", code, errOut)
	}
	// The controller enrols alpha as it does when the agent asks: the node's password is the
	// one sealed to the agent.
	store, err := state.Open(st)
	if err != nil {
		t.Fatal(err)
	}
	agentPassword, err := store.EnrolNode(ctx, state.NodeEnrolment{Node: "alpha", EnrolPrincipal: "enrol.alpha",
		NodePrincipal: "node.alpha", PublicKey: make([]byte, 32)}, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	before, err := store.Hashes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	store.Close()
	accountsPath := filepath.Join(st, "bus", "accounts.conf")
	accounts, err := os.ReadFile(accountsPath)
	if err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(t.TempDir(), "node.json")
	for _, args := range [][]string{
		{"credentials", "issue", "node.alpha"},
		{"credentials", "issue", "node.alpha", "-o", out},
		{"credentials", "rotate", "node.alpha"},
	} {
		code, stdout, stderr := meshctl(t, append(args, common...)...)
		if code != exitError || stdout != "" {
			t.Errorf("%s on an enrolled node: exit %d, stdout %q, want exit %d and nothing printed\n%s", strings.Join(args, " "), code, stdout, exitError, stderr)
		}
		t.Logf("%s: %s", strings.Join(args, " "), stderr)
		if !strings.Contains(stderr, "meshctl credentials issue enrol.alpha") || !strings.Contains(stderr, "enrols again") {
			t.Errorf("%s does not point to re-enrolment:\n%s", strings.Join(args, " "), stderr)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("the refused issue -o left %s: %v", out, err)
	}

	store, err = state.Open(st)
	if err != nil {
		t.Fatal(err)
	}
	after, err := store.Hashes(ctx)
	store.Close()
	if err != nil {
		t.Fatal(err)
	}
	if after["node.alpha"] != before["node.alpha"] {
		t.Error("the refused issue replaced node.alpha's hash in the store")
	}
	if bcrypt.CompareHashAndPassword([]byte(after["node.alpha"]), []byte(agentPassword)) != nil {
		t.Error("the agent's password no longer opens node.alpha")
	}
	if now, err := os.ReadFile(accountsPath); err != nil || !bytes.Equal(now, accounts) {
		t.Errorf("the refused issue rewrote the accounts config (%v)", err)
	}

	// beta never enrolled: its node credential is issued as before.
	code, stdout, stderr := meshctl(t, append([]string{"credentials", "issue", "node.beta"}, common...)...)
	if code != exitOK || !strings.Contains(stdout, `"user":"node.beta"`) || !strings.Contains(stdout, `"password":"`) {
		t.Errorf("issue node.beta, never enrolled: exit %d, stdout %q\n%s", code, stdout, stderr)
	}
}
