package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/bus/bustest"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/internal/lockedbuf"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/replica"
)

// watchProcess starts `meshctl watch` on dir and state as a process of its own, logging JSON.
func watchProcess(t *testing.T, dir, stateDir string, extra ...string) *process {
	t.Helper()
	args := append([]string{"watch", "-f", dir, "--state", stateDir, "--bcrypt-cost", "4", "--debounce", "50ms",
		"--log-format", "json"}, extra...)
	return startMeshctl(t, args...)
}

// logged waits for a log line of p holding every one of want, after the first from bytes.
func (p *process) logged(t *testing.T, from int, what string, want ...string) {
	t.Helper()
	p.until(t, what, func() bool {
		for _, line := range strings.Split(p.stderr.String()[from:], "\n") {
			if containsAll(line, want) {
				return true
			}
		}
		return false
	})
}

func containsAll(s string, want []string) bool {
	for _, w := range want {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

// controllerJS is JetStream on srv as the controller, with the password in stateDir.
func controllerJS(t *testing.T, srv *bustest.TestServer, stateDir string) jetstream.JetStream {
	t.Helper()
	pw, err := os.ReadFile(filepath.Join(stateDir, "controller.password"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := busclient.Dial(ctx, busclient.Target{URL: srv.URL, Fingerprint: srv.Fingerprint},
		busclient.Credential{User: render.ControllerUser, Password: strings.TrimSpace(string(pw))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	js, err := jetstream.New(c.Conn)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// Two watches on two control hosts, one description and one controller password: one leads,
// the other stands by with its store restored from the bus. Killed with -9, the leader is
// replaced once its lease lapses (replica.LeaseTTL, 10 s; the test logs how long it took, and
// does not time it: a loaded machine only makes it later); back, it stands by. A leader frozen
// past its lease (SIGSTOP) is replaced as well, and once resumed applies nothing it planned. A
// one-shot apply from CI runs under the same lock, refused while another holds it and waiting
// for it with --wait.
func TestAStandbyTakesOverFromALeaderKilledOrFrozen(t *testing.T) {
	t.Parallel()
	srv := bustest.StartTestServer(t, t.TempDir())
	dir := writeMesh(t, map[string]string{"mesh.yaml": srv.Mesh()})
	stateA, stateB := t.TempDir(), filepath.Join(t.TempDir(), "b")
	if code, out, errOut := meshctl(t, "apply", "-f", dir, "--state", stateA, "--bcrypt-cost", "4"); code != exitOK {
		t.Fatalf("the first apply: exit %d\n%s%s", code, out, errOut)
	}
	password := filepath.Join(stateA, "controller.password")
	js := controllerJS(t, srv, stateA)

	a := watchProcess(t, dir, stateA)
	a.logged(t, 0, "the first watch leading", "leading the mesh")
	b := watchProcess(t, dir, stateB, "--controller-password-file", password)
	b.logged(t, 0, "the second watch standing by", "standing by: another watch leads the mesh")

	// A CI apply, with only the checkout and the password: refused while the lock is held,
	// waiting for it with --wait, applying under it.
	ls, err := replica.OpenLeases(context.Background(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	held, err := ls.AcquireWaiting(context.Background(), replica.LockKey, replica.Me("another", "copy", "apply"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ci := filepath.Join(t.TempDir(), "ci")
	code, _, errOut := meshctl(t, "apply", "-f", dir, "--state", ci, "--controller-password-file", password)
	if code != exitError || !strings.Contains(errOut, "apply lock on the bus is held by meshctl apply") || !strings.Contains(errOut, "--wait") {
		t.Fatalf("a CI apply while the lock is held: exit %d, want %d naming the holder:\n%s", code, exitError, errOut)
	}
	// With --wait it says whom it waits for, and the lock is let go only then: an apply that
	// did not wait would have been refused, as the one before.
	t.Cleanup(func() { held.Release(context.Background()) })
	waitOut, waitErr := &lockedbuf.Buffer{}, &lockedbuf.Buffer{}
	waited := make(chan int, 1)
	go func() {
		waited <- run(context.Background(), []string{"apply", "-f", dir, "--state", ci, "--wait"}, waitOut, waitErr)
	}()
	testwait.Until(t, "a CI apply with --wait waiting for the lock", func() bool {
		select {
		case code := <-waited:
			t.Fatalf("a CI apply with --wait did not wait for the lock: exit %d\n%s%s", code, waitOut, waitErr)
		default:
		}
		return strings.Contains(waitErr.String(), "waiting for the apply lock on the bus is held by meshctl apply")
	})
	held.Release(context.Background())
	if code := <-waited; code != exitOK {
		t.Fatalf("a CI apply with --wait: exit %d\n%s%s", code, waitOut, waitErr)
	}

	// kill -9: nothing lets the lead go, and the standby takes it once it lapses.
	mark := len(b.stderr.String())
	killed := time.Now()
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-a.exited
	b.logged(t, mark, "the standby leading", "leading the mesh")
	t.Logf("the standby led %s after the leader was killed with -9", time.Since(killed).Round(time.Millisecond))
	// It reconciles the description: a module added is applied by the new leader.
	mark = len(b.stderr.String())
	writeFile(t, filepath.Join(dir, "audit.yaml"), "modules:\n  - name: audit\n    on: [alpha]\n    follows: [shop/order.placed]\n")
	b.until(t, "the new leader applying an edit", func() bool {
		_, err := js.Consumer(context.Background(), render.StreamEvents, "alpha_audit")
		return err == nil
	})

	// The old leader back: it stands by, naming the new one.
	a = watchProcess(t, dir, stateA)
	a.logged(t, 0, "the old leader standing by", "standing by: another watch leads the mesh")
	// status says which watch leads, since when, and how far the standby's store is behind.
	a.until(t, "status saying the old leader stands by", func() bool {
		_, out, _ := meshctl(t, "status", "--state", stateA)
		return strings.Contains(out, "this watch stands by; meshctl watch on") && strings.Contains(out, "behind its copy on the bus")
	})
	if _, out, _ := meshctl(t, "status", "--state", stateB); !strings.Contains(out, "this watch leads the mesh, since") {
		t.Errorf("status of the leader does not say it leads:\n%s", out)
	}

	// The leader frozen past its lease: the other leads; resumed, it plans from a description
	// of its own that it must never apply.
	mark = len(a.stderr.String())
	if err := b.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	a.logged(t, mark, "the standby leading after the leader froze", "leading the mesh")
	t.Logf("the standby led %s after the leader froze", time.Since(frozen).Round(time.Millisecond))
	// An edit the frozen leader hears the moment it runs again.
	writeFile(t, filepath.Join(dir, "rogue.yaml"), "modules:\n  - name: rogue\n    on: [alpha]\n    follows: [shop/order.placed]\n")
	mark = len(b.stderr.String())
	if err := b.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	b.logged(t, mark, "the resumed leader standing by", "no longer leads the mesh")
	b.logged(t, mark, "the resumed leader standing by", "standing by: another watch leads the mesh")
	// The new leader applies the edit; the resumed one never did: its log says no apply.
	a.until(t, "the new leader applying the edit", func() bool {
		_, err := js.Consumer(context.Background(), render.StreamEvents, "alpha_rogue")
		return err == nil
	})
	for _, line := range strings.Split(b.stderr.String()[mark:], "\n") {
		if strings.Contains(line, `"outcome":"ok"`) {
			t.Errorf("the resumed leader applied changes after losing the lead: %s", line)
		}
	}
	if t.Failed() {
		t.Logf("the resumed leader's log:\n%s", b.stderr.String()[mark:])
	}
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}
