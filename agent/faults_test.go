package agent

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/meshbus/meshctl/host"
)

// waitRunning is w.wait that fails at once, with what Run returned, when the agent gives up
// before cond holds.
func (w *world) waitRunning(r *running, what string, cond func() bool) {
	w.t.Helper()
	w.wait(what, func() bool { return r.exited() || cond() })
	if r.exited() {
		r.looked = true
		w.t.Fatalf("%s: the agent gave up first: %v\nthe log:\n%s", what, r.err, w.logs.String())
	}
}

// An agent started while the bus is down (the control host restarting) waits for it, saying
// so, and enrols once it is back. It exited: "no servers available for connection".
func TestAnAgentWaitsForTheBusToEnrol(t *testing.T) {
	t.Parallel()
	w, _ := worldOnAPort(t)
	stop := w.startWatch()
	enrol := w.issueEnrolments("one")
	stop()

	r := w.startAgent(enrol["one"])
	w.waitRunning(r, "the agent says it waits for the bus", func() bool {
		return strings.Contains(w.logs.String(), "agent: waiting for the bus")
	})
	t.Cleanup(w.startWatch())
	w.waitRunning(r, "node one, enrolled once the bus is back, writes the shop's membership", func() bool {
		return exists(filepath.Join(r.dir, "one.shop.json"))
	})
}

// cutFirst is a proxy to the bus at url that closes the first connection it takes at once —
// the EOF one agent of 40 enrolling together met on its first connect — and carries the
// others through. It returns the proxy's URL.
func cutFirst(t *testing.T, url string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := strings.TrimPrefix(url, "nats://")
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for first := true; ; first = false {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if first {
				c.Close()
				continue
			}
			b, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(b, c); b.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(c, b); c.Close() }()
		}
	}()
	return "nats://" + l.Addr().String()
}

// An enrolment whose first connection the server cuts off (EOF) connects again and enrols.
// The agent exited on the EOF and never enrolled.
func TestAnAgentEnrolsThroughAConnectionCutOff(t *testing.T) {
	t.Parallel()
	w := startWorld(t, mesh)
	file := w.issueEnrolments("one")["one"]
	m, err := host.ReadMembershipFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m.Address = cutFirst(t, w.busURL())
	data, _ := json.Marshal(m)
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	r := w.startAgent(file)
	w.waitRunning(r, "node one enrols through the cut and writes the shop's membership", func() bool {
		return exists(filepath.Join(r.dir, "one.shop.json"))
	})
}

// A node taken out of the description: its agent, refused by the bus it was let in by, says
// in its error what happened and what the operator does, removes its modules' memberships
// (their credentials are dead) and exits; its key, its membership and a stranger's file stay.
// It logged one "disconnected … EOF" and retried silently for ever, the files left on disk.
func TestARemovedNodesAgentSaysSoRemovesItsFilesAndExits(t *testing.T) {
	t.Parallel()
	w := startWorld(t, mesh)
	enrol := w.issueEnrolments("one", "two")
	one := w.startAgent(enrol["one"])
	w.runAgent(enrol["two"])
	shop := filepath.Join(one.dir, "one.shop.json")
	w.waitRunning(one, "node one writes the shop's membership", func() bool { return exists(shop) })
	stranger := filepath.Join(one.dir, "notes.json")
	if err := os.WriteFile(stranger, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}

	w.write(strings.NewReplacer("  - name: one\n", "", "on: [one]", "on: [two]").Replace(mesh))
	err := one.exit(t)
	if !errors.Is(err, ErrRemoved) {
		t.Fatalf("the removed node's agent returned %v, want ErrRemoved; the log:\n%s", err, w.logs.String())
	}
	t.Logf("the removed node's agent: %v", err)
	for _, want := range []string{"node one", "not in the description", "revoked", "meshctl credentials issue enrol.one"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the agent's error %q does not say %q", err, want)
		}
	}
	if exists(shop) {
		t.Errorf("%s, holding a dead credential, is still there", shop)
	}
	for _, keep := range []string{"node.key", "node.one.json", "notes.json"} {
		if !exists(filepath.Join(one.dir, keep)) {
			t.Errorf("%s was removed; the agent removes only its instances' memberships", keep)
		}
	}
}
