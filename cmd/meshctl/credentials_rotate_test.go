package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/host"
)

const rotateMesh = `bus:
  listen: 127.0.0.1:0
nodes:
  - name: one
modules:
  - name: shop
    on: [one]
    emits: [order.placed]
`

// readMembershipFile reads a membership the agent wrote, or fails the test.
func readMembershipFile(t *testing.T, path string) host.Membership {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := host.ReadMembership(f)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// joins tries m once against the bus.
func joins(m host.Membership) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := host.Join(ctx, m)
	if err == nil {
		h.Close()
	}
	return err
}

// For a module instance on an enrolled node, `credentials issue` refuses (the controller hands
// that credential out, and would replace what issue printed) and `credentials rotate` has the
// controller declare a new one: the old credential is refused once rotate returns, the agent
// writes the new one, which joins, and no password is printed.
func TestRotatingAnInstanceOnAnEnrolledNodeGoesThroughTheController(t *testing.T) {
	t.Parallel()
	dir := writeMesh(t, map[string]string{"mesh.yaml": rotateMesh})
	stateDir := filepath.Join(t.TempDir(), "state")
	common := []string{"-f", dir, "--state", stateDir, "--bcrypt-cost", "4"}
	w := startMeshctl(t, append([]string{"watch", "--resync", "1h"}, common...)...)
	w.until(t, "the first reconcile", 30*time.Second, func() bool { return strings.Contains(w.stderr.String(), "reconciled: changes applied") })

	enrol := filepath.Join(t.TempDir(), "enrol.json")
	if code, _, errOut := meshctl(t, append([]string{"credentials", "issue", "enrol.one", "-o", enrol}, common...)...); code != exitOK {
		t.Fatalf("issue enrol.one: %s", errOut)
	}
	agentDir := filepath.Join(t.TempDir(), "agent")
	a := startMeshctl(t, "agent", "--membership", enrol, "--dir", agentDir, "--heartbeat", "200ms")
	file := filepath.Join(agentDir, "one.shop.json")
	a.until(t, "one.shop's membership", 30*time.Second, func() bool { _, err := os.Stat(file); return err == nil })
	before := readMembershipFile(t, file)
	w.until(t, "one.shop's credential live", 30*time.Second, func() bool { return joins(before) == nil })

	code, out, errOut := meshctl(t, append([]string{"credentials", "issue", "one.shop"}, common...)...)
	if code != exitError || out != "" || !strings.Contains(errOut, "meshctl credentials rotate one.shop") {
		t.Fatalf("issue one.shop on an enrolled node: exit %d, stdout %q, stderr %s", code, out, errOut)
	}
	if err := joins(before); err != nil {
		t.Fatalf("the refused issue changed one.shop's credential: %v", err)
	}

	code, out, errOut = meshctl(t, append([]string{"credentials", "rotate", "one.shop"}, common...)...)
	if code != exitOK || out != "" || !strings.Contains(errOut, "declared to node one") {
		t.Fatalf("rotate one.shop: exit %d, stdout %q, stderr %s\nwatch:\n%s", code, out, errOut, w.stderr)
	}
	if err := joins(before); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("the rotated-out credential, once rotate returned: %v, want refused", err)
	}
	var after host.Membership
	a.until(t, "the agent writing the new credential", 30*time.Second, func() bool {
		after = readMembershipFile(t, file)
		return after.Password != before.Password
	})
	if err := joins(after); err != nil {
		t.Errorf("the new credential the agent wrote: %v", err)
	}
	for _, p := range []string{before.Password, after.Password} {
		if strings.Contains(errOut, p) || strings.Contains(w.stderr.String(), p) || strings.Contains(a.stderr.String(), p) {
			t.Error("a password appears in rotate's, watch's or the agent's output")
		}
	}
	if _, ok := bus.RunningEmbedded(stateDir); !ok {
		t.Error("the embedded bus stopped")
	}

	// A credential the controller does not hand out is rotated as issue mints it: printed once.
	code, out, errOut = meshctl(t, append([]string{"credentials", "rotate", "enrol.one"}, common...)...)
	if code != exitOK || !strings.Contains(out, `"user":"enrol.one"`) || !strings.Contains(out, `"password":"`) {
		t.Errorf("rotate enrol.one: exit %d, stdout %q, stderr %s", code, out, errOut)
	}
}
