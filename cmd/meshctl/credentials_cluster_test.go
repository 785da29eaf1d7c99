package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshbus/meshctl/bus/bustest"
	"github.com/meshbus/meshctl/busclient"
)

// A credential issued while one server of three is down works through the other two: issue
// says which servers serve it and which do not yet, rather than that it cannot log in.
func TestIssueWithAServerDownNamesTheServersThatServeIt(t *testing.T) {
	t.Parallel()
	c := bustest.StartTestCluster(t, 3)
	var mesh strings.Builder
	mesh.WriteString("bus:\n  replicas: 3\n  servers:\n")
	for _, srv := range c.Servers {
		fmt.Fprintf(&mesh, "    - url: %s\n      accounts_file: %s\n      reload: {pid_file: %s}\n", srv.URL, srv.AccountsFile, srv.PIDFile)
	}
	mesh.WriteString("nodes:\n  - name: alpha\nmodules:\n  - name: shop\n    on: [alpha]\n")
	dir := writeMesh(t, map[string]string{"mesh.yaml": mesh.String()})
	st := filepath.Join(t.TempDir(), "state")
	if code, out, errOut := meshctl(t, "apply", "-f", dir, "--state", st, "--bcrypt-cost", "4"); code != exitOK {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}

	down := c.Servers[2]
	down.Stop()
	code, out, errOut := meshctl(t, "credentials", "issue", "alpha.shop", "-f", dir, "--state", st, "--bcrypt-cost", "4")
	if code != exitError {
		t.Fatalf("issue with a server down: exit %d, want %d (not live everywhere)\n%s", code, exitError, errOut)
	}
	name := func(srv *bustest.TestClusterServer) string { return "server " + strings.TrimPrefix(srv.URL, "nats://") }
	if strings.Contains(errOut, "cannot log in yet") ||
		!lineHolds(errOut, "alpha.shop can log in through", name(c.Servers[0]), name(c.Servers[1]), "not yet through", name(down)) {
		t.Errorf("issue does not name the servers that serve the credential and the one that does not:\n%s", errOut)
	}

	// What it says is what the servers do: each of the two lets the membership in alone.
	var mem struct{ User, Password string }
	if err := json.Unmarshal([]byte(out), &mem); err != nil {
		t.Fatalf("the membership: %v\n%s", err, out)
	}
	for _, srv := range c.Servers[:2] {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		conn, err := busclient.DialAlone(ctx, busclient.Target{URL: srv.URL}, busclient.Credential{User: mem.User, Password: mem.Password})
		cancel()
		if err != nil {
			t.Errorf("%s does not let the issued alpha.shop in: %v", name(srv), err)
			continue
		}
		conn.Close()
	}
}
