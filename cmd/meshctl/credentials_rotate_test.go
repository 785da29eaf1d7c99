package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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
	n := startNode(t, rotateMesh)
	common, w, a := n.common, n.watch, n.agent
	file := filepath.Join(n.dir, "one.shop.json")
	before := n.membership(t, "one.shop")

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
	a.until(t, "the agent writing the new credential", func() bool {
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
	if _, ok := bus.RunningEmbedded(n.stateDir); !ok {
		t.Error("the embedded bus stopped")
	}

	// Revoked, an enrolled node's instance is declared a new credential: revoke says so
	// rather than that the instance is locked out.
	code, _, errOut = meshctl(t, append([]string{"credentials", "revoke", "one.shop"}, common...)...)
	if code != exitOK || !strings.Contains(errOut, "the controller declares the instance a new one") {
		t.Errorf("revoke one.shop: exit %d, stderr %s", code, errOut)
	}
	if err := joins(after); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("the revoked credential: %v, want refused", err)
	}
	a.until(t, "the agent writing the credential declared after the revoke", func() bool {
		return readMembershipFile(t, file).Password != after.Password
	})

	// A credential the controller does not hand out is rotated as issue mints it: printed once.
	code, out, errOut = meshctl(t, append([]string{"credentials", "rotate", "enrol.one"}, common...)...)
	if code != exitOK || !strings.Contains(out, `"user":"enrol.one"`) || !strings.Contains(out, `"password":"`) {
		t.Errorf("rotate enrol.one: exit %d, stdout %q, stderr %s", code, out, errOut)
	}
}

// node is a control host and one node, each a real meshctl process: watch serving the embedded
// bus, and an agent that enrolled with only the enrolment credential `credentials issue -o`
// wrote.
type node struct {
	common        []string // -f, --state and the cost, for the commands run on the control host
	stateDir, dir string   // the control host's state; the agent's directory
	watch, agent  *process
}

func startNode(t *testing.T, description string) *node {
	t.Helper()
	mesh := writeMesh(t, map[string]string{"mesh.yaml": description})
	n := &node{stateDir: filepath.Join(t.TempDir(), "state"), dir: filepath.Join(t.TempDir(), "agent")}
	n.common = []string{"-f", mesh, "--state", n.stateDir, "--bcrypt-cost", "4"}
	n.watch = startMeshctl(t, append([]string{"watch", "--resync", "1h"}, n.common...)...)
	n.watch.until(t, "the first reconcile", func() bool {
		return strings.Contains(n.watch.stderr.String(), "reconciled: changes applied")
	})
	enrol := filepath.Join(t.TempDir(), "enrol.json")
	if code, _, errOut := meshctl(t, append([]string{"credentials", "issue", "enrol.one", "-o", enrol}, n.common...)...); code != exitOK {
		t.Fatalf("issue enrol.one: %s", errOut)
	}
	n.agent = startMeshctl(t, "agent", "--membership", enrol, "--dir", n.dir, "--heartbeat", "200ms")
	return n
}

// membership waits for the agent to write user's membership and for it to join, and returns it.
func (n *node) membership(t *testing.T, user string) host.Membership {
	t.Helper()
	file := filepath.Join(n.dir, user+".json")
	n.agent.until(t, user+"'s membership", func() bool { _, err := os.Stat(file); return err == nil })
	m := readMembershipFile(t, file)
	n.watch.until(t, user+"'s credential live", func() bool { return joins(m) == nil })
	return m
}

var (
	hostOnce  sync.Once
	hostBin   string
	hostError error
)

// builtHost builds examples/host, the smallest module host, once per test run.
func builtHost(t *testing.T) string {
	t.Helper()
	hostOnce.Do(func() {
		dir, err := os.MkdirTemp("", "meshctl-host-")
		if err != nil {
			hostError = err
			return
		}
		hostBin = filepath.Join(dir, "host")
		if out, err := exec.Command("go", "build", "-o", hostBin, "../../examples/host").CombinedOutput(); err != nil {
			hostError = errors.New(string(out))
		}
	})
	if hostError != nil {
		t.Fatalf("building examples/host: %v", hostError)
	}
	return hostBin
}

const hostMesh = `bus:
  listen: 127.0.0.1:0
nodes:
  - name: one
seats:
  - name: mailer
    accepts: [send]
    emits: [sent]
modules:
  - name: shop
    on: [one]
    emits: [order.placed]
    sends: [mailer/send]
  - name: postman
    on: [one]
    claims: [mailer]
    follows: [shop/order.placed]
`

// The example host, the real binary, joins with the memberships the agent wrote — no
// `credentials issue` anywhere but the node's one enrolment credential — and does its jobs: the
// shop's host places an order and sends mail, and the postman's follows the order and takes the
// mail as the mailer seat's holder.
func TestTheExampleHostJoinsWithTheFilesTheAgentWrote(t *testing.T) {
	t.Parallel()
	n := startNode(t, hostMesh)
	n.membership(t, "one.shop")
	n.membership(t, "one.postman")
	bin := builtHost(t)

	postman := startProgram(t, bin, "-membership", filepath.Join(n.dir, "one.postman.json"), "-follow", "-seat", "mailer", "-emit", "sent")
	postman.until(t, "the postman holding its seat", func() bool { return strings.Contains(postman.stderr.String(), "holding seat mailer") })

	for subject, message := range map[string]string{"mesh.mod.shop.event.order.placed": "order-17", "mesh.seat.mailer.accept.send": "mail-17"} {
		out, err := exec.Command(bin, "-membership", filepath.Join(n.dir, "one.shop.json"), "-publish", subject, "-message", message).CombinedOutput()
		if err != nil {
			t.Fatalf("the shop publishing to %s with the agent's file: %v\n%s", subject, err, out)
		}
	}
	postman.until(t, "the postman following the order and taking the mail", func() bool {
		out := postman.stdout.String()
		return strings.Contains(out, "event mesh.mod.shop.event.order.placed order-17") && strings.Contains(out, "work mesh.seat.mailer.accept.send mail-17")
	})
	if code, _ := postman.signal(t, os.Interrupt); code != 0 {
		t.Errorf("the postman's host left with exit %d:\n%s", code, postman.stderr)
	}
}
