package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/bus/bustest"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/render"
)

// A cluster's first start, in the order the README gives for one server: apply, start, apply.
// Every server's config includes its accounts file, so none can start before meshctl wrote
// it. The first apply, with no server running, writes every server's file (the last one's by
// its copy command), names each server as not answering and exits 2; the three servers then
// start on those files, and the next apply proves each one serves its file and creates the
// streams.
func TestAClusterStartsOnTheFilesOfItsFirstApply(t *testing.T) {
	t.Parallel()
	c := bustest.NewTestCluster(t, 3)
	desc := writeMesh(t, map[string]string{"mesh.yaml": clusterDescription(c)})
	st := t.TempDir()

	code, out, errOut := meshctl(t, "apply", "-f", desc, "--state", st, "--bcrypt-cost", "4")
	if code != exitError {
		t.Fatalf("the first apply with no server running: exit %d, want %d\n%s%s", code, exitError, out, errOut)
	}
	for _, srv := range c.Servers {
		if _, err := os.Stat(srv.AccountsFile); err != nil {
			t.Fatalf("the first apply left server %s no accounts file to start on: %v\n%s", srv.Name, err, errOut)
		}
		if !strings.Contains(errOut, strings.TrimPrefix(srv.URL, "nats://")) {
			t.Fatalf("the first apply does not name server %s (%s) as not answering:\n%s", srv.Name, srv.URL, errOut)
		}
	}
	if !strings.Contains(errOut, "not answering") || !strings.Contains(errOut, "first start") {
		t.Fatalf("the first apply does not say the servers are not answering and their files are left for their first start:\n%s", errOut)
	}
	if strings.Contains(errOut, "serve the new one") {
		t.Fatalf("the first apply says other servers serve the new config, when none runs:\n%s", errOut)
	}

	c.StartAll()
	if code, out, errOut := meshctl(t, "apply", "-f", desc, "--state", st, "--bcrypt-cost", "4"); code != exitOK {
		t.Fatalf("the apply once the servers run: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := meshctl(t, "diff", "-f", desc, "--state", st); code != exitOK || !strings.Contains(out+errOut, "in sync") {
		t.Fatalf("the diff after: exit %d\n%s%s", code, out, errOut)
	}

	// Each server alone lets the controller in, and the streams are there with three replicas.
	password, err := os.ReadFile(filepath.Join(st, "controller.password"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, srv := range c.Servers {
		conn, err := busclient.DialAlone(ctx, busclient.Target{URL: srv.URL},
			busclient.Credential{User: render.ControllerUser, Password: strings.TrimSpace(string(password))})
		if err != nil {
			t.Fatalf("server %s does not let the controller in: %v", srv.Name, err)
		}
		js, err := jetstream.New(conn.Conn)
		if err != nil {
			conn.Close()
			t.Fatal(err)
		}
		s, err := js.Stream(ctx, "EVENTS")
		conn.Close()
		if err != nil {
			t.Fatalf("no stream EVENTS through server %s: %v", srv.Name, err)
		}
		if r := s.CachedInfo().Config.Replicas; r != 3 {
			t.Fatalf("EVENTS has %d replicas, want 3", r)
		}
	}
}

// clusterDescription is a mesh on c, every server reloaded by its pid file; the last one's
// file is copied into place, as for a server off the control host: meshctl writes a staging
// file and the copy command installs it.
func clusterDescription(c *bustest.TestCluster) string {
	var b strings.Builder
	b.WriteString("bus:\n  replicas: 3\n  servers:\n")
	for i, srv := range c.Servers {
		if i == len(c.Servers)-1 {
			fmt.Fprintf(&b, "    - url: %s\n      accounts_file: %s.staged\n      copy: [cp, \"{file}\", %s]\n      reload: {pid_file: %s}\n",
				srv.URL, srv.AccountsFile, srv.AccountsFile, srv.PIDFile)
			continue
		}
		fmt.Fprintf(&b, "    - url: %s\n      accounts_file: %s\n      reload: {pid_file: %s}\n", srv.URL, srv.AccountsFile, srv.PIDFile)
	}
	b.WriteString("nodes:\n  - name: alpha\nmodules:\n  - name: shop\n    on: [alpha]\n    emits: [order.placed]\n")
	return b.String()
}

// A cluster whose servers have accounts files of their own (the operator's, with nobody in
// them) but none running: the first apply changes no file, and says that no server serves
// the new config rather than that the others do.
func TestAnApplyWithEveryServerDownSaysNoneServesIt(t *testing.T) {
	t.Parallel()
	c := bustest.NewTestCluster(t, 3)
	for _, srv := range c.Servers {
		for _, path := range []string{srv.AccountsFile, srv.AccountsFile + ".staged"} {
			if err := os.WriteFile(path, []byte("accounts { MESH { jetstream: enabled } }\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	desc := writeMesh(t, map[string]string{"mesh.yaml": clusterDescription(c)})
	code, out, errOut := meshctl(t, "apply", "-f", desc, "--state", t.TempDir(), "--bcrypt-cost", "4")
	if code != exitError || !strings.Contains(errOut, "did not answer") || strings.Contains(errOut, "serve the new one") ||
		!strings.Contains(errOut, "no server is seen serving the new one") {
		t.Fatalf("an apply with every server down: exit %d, want %d saying no server serves the new config:\n%s%s", code, exitError, out, errOut)
	}
	for _, srv := range c.Servers {
		for _, path := range []string{srv.AccountsFile, srv.AccountsFile + ".staged"} {
			if data, err := os.ReadFile(path); err != nil || string(data) != "accounts { MESH { jetstream: enabled } }\n" {
				t.Fatalf("the apply with server %s down changed %s: %v\n%s", srv.Name, path, err, data)
			}
		}
	}
}

// A copy failing on a cluster's first apply: that server's file never reached it, so none is
// left on the control host either, and the next apply writes and copies it, rather than
// taking the server for one that is merely down. The files of the servers before it stay.
func TestAFirstFileItsCopyDidNotPlaceIsWrittenAgain(t *testing.T) {
	t.Parallel()
	c := bustest.NewTestCluster(t, 3)
	last := c.Servers[len(c.Servers)-1]
	st := t.TempDir()
	broken := strings.Replace(clusterDescription(c), "\"{file}\", "+last.AccountsFile, "\"{file}\", /nonexistent/dir/accounts.conf", 1)
	desc := writeMesh(t, map[string]string{"mesh.yaml": broken})
	code, out, errOut := meshctl(t, "apply", "-f", desc, "--state", st, "--bcrypt-cost", "4")
	if code != exitError || !strings.Contains(errOut, "copying the accounts config") || !strings.Contains(errOut, "first start") {
		t.Fatalf("the first apply with a copy failing: exit %d, want %d saying the copy failed and the rest are left for their first start\n%s%s",
			code, exitError, out, errOut)
	}
	if _, err := os.Stat(last.AccountsFile + ".staged"); err == nil {
		t.Fatalf("the first apply left %s.staged, which its copy never put on the server", last.AccountsFile)
	}
	for _, srv := range c.Servers[:len(c.Servers)-1] {
		if _, err := os.Stat(srv.AccountsFile); err != nil {
			t.Fatalf("a copy failing on server %s took server %s's first file with it: %v", last.Name, srv.Name, err)
		}
	}

	// A diff meanwhile writes nothing, and says no server answers, not that the files written
	// do not let the controller in.
	if code, out, errOut := meshctl(t, "diff", "-f", desc, "--state", st); code != exitError ||
		!strings.Contains(errOut, "no servers available") || strings.Contains(errOut, "does not let the controller in") {
		t.Fatalf("a diff before the servers start: exit %d, want %d saying no server answers\n%s%s", code, exitError, out, errOut)
	}
	if _, err := os.Stat(last.AccountsFile + ".staged"); err == nil {
		t.Fatal("a diff wrote an accounts file")
	}

	desc = writeMesh(t, map[string]string{"mesh.yaml": clusterDescription(c)})
	code, out, errOut = meshctl(t, "apply", "-f", desc, "--state", st, "--bcrypt-cost", "4")
	lastName := "server " + strings.TrimPrefix(last.URL, "nats://")
	if code != exitError || !strings.Contains(errOut, lastName+" is not answering") || !strings.Contains(errOut, "first start") ||
		strings.Contains(errOut, "serve the new one") {
		t.Fatalf("the apply with the copy mended: exit %d, want %d saying %s's file is left for its first start\n%s%s",
			code, exitError, lastName, out, errOut)
	}
	if _, err := os.Stat(last.AccountsFile); err != nil {
		t.Fatalf("the apply with the copy mended did not put server %s's first file in place: %v\n%s", last.Name, err, errOut)
	}
}
