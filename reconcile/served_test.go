package reconcile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/internal/testnats"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/state"
)

// mailModule is a module added to a mesh: a new principal, alpha.mail, and a new stream.
const mailModule = `
  - name: mail
    on: [alpha]
    emits: [mail.sent]
`

// withMail adds mailModule to a mesh's modules, which end the mesh or precede its
// controller section.
func withMail(yaml string) string {
	if i := strings.Index(yaml, "controller:"); i >= 0 {
		return yaml[:i] + strings.TrimPrefix(mailModule, "\n") + yaml[i:]
	}
	return yaml + strings.TrimPrefix(mailModule, "\n")
}

// login dials as user and hangs up; nil means the server let it in.
func login(ctx context.Context, t busclient.Target, user, password string) error {
	c, err := busclient.Dial(ctx, t, busclient.Credential{User: user, Password: password})
	if err != nil {
		return err
	}
	c.Close()
	return nil
}

// renameServer edits a field of the external server's own config that nats-server refuses to
// reload: every reload after it fails with "config reload not supported for ServerName".
func (x externalServer) renameServer(t *testing.T) {
	t.Helper()
	path := filepath.Join(x.dir, "server.conf")
	conf, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(conf), "server_name: operators-bus", "server_name: renamed-bus", 1)
	if edited == string(conf) {
		t.Fatal("the external server's config names no server_name to edit")
	}
	if err := os.WriteFile(path, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Item 1 of issue 11: a server that refuses the reload (a non-reloadable field of its own
// config was edited) must not be reported as having taken the new accounts config — not by
// apply, not by diff, not by credentials issue or revoke.
func TestAReloadTheServerRefusesIsNeverReportedAsDone(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	x := startExternal(t)
	f := newFixture(t, x.mesh(x.fingerprint))
	s := f.connect(ctx)
	shop := f.mint(ctx, "alpha.shop")["alpha.shop"]
	f.mustApply(ctx, s)
	f.mustConverge(ctx, s)
	target := busclient.Target{URL: x.url, Fingerprint: x.fingerprint}
	if err := login(ctx, target, "alpha.shop", shop); err != nil {
		t.Fatalf("alpha.shop cannot log in after the first apply: %v", err)
	}
	before, err := os.ReadFile(x.accounts)
	if err != nil {
		t.Fatal(err)
	}

	x.renameServer(t)
	f.write(withMail(x.mesh(x.fingerprint)))
	if _, _, err := f.apply(ctx, s, RunOptions{}); err == nil {
		t.Fatal("an apply whose reload the server refused reported success")
	} else if !errors.Is(err, accounts.ErrRefused) || !strings.Contains(err.Error(), "seen serving it") {
		t.Errorf("the refusal does not say the previous config is back and served: %v", err)
	}
	if after, _ := os.ReadFile(x.accounts); string(after) != string(before) {
		t.Error("the accounts config the server refused stays in place of the one it serves")
	}
	p, err := s.Plan(ctx, f.mesh(), plan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Empty() || p.Accounts == nil {
		t.Error("after a refused reload, diff says the bus is in sync")
	}

	// A credential issued now is not live, and must not be reported as working.
	mail := f.mint(ctx, "alpha.mail")["alpha.mail"]
	if what, err := SyncAccounts(ctx, f.mesh(), f.store); !errors.Is(err, accounts.ErrRefused) {
		t.Errorf("credentials issue on a server that refuses reloads: %q, %v; want a refusal", what, err)
	}
	if err := login(ctx, target, "alpha.mail", mail); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("alpha.mail, issued on a refusing server: %v; want an authorization error", err)
	}

	// A revocation the server does not load leaves the user able to log in: revoke must say
	// it failed.
	if _, err := f.store.Revoke(ctx, "alpha.shop"); err != nil {
		t.Fatal(err)
	}
	if what, err := SyncAccounts(ctx, f.mesh(), f.store); !errors.Is(err, accounts.ErrRefused) {
		t.Errorf("credentials revoke on a server that refuses reloads: %q, %v; want a refusal", what, err)
	}
	if err := login(ctx, target, "alpha.shop", shop); err != nil {
		t.Fatalf("alpha.shop no longer logs in, though the server serves the old config: %v", err)
	}
}

// Item 11 of issue 11: a reload command that fails. This one really reloads the server, by
// the pid in its pid file, and then exits 3, so the new file is loaded and then the previous
// one: the error must say that the previous config is back and served, not that restoring
// it failed.
func TestAFailingReloadCommandSaysWhatIsRestoredAndServed(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	x := startExternal(t)
	f := newFixture(t, x.mesh(x.fingerprint))
	first := f.connect(ctx)
	f.mustApply(ctx, first)
	first.Close()
	before, err := os.ReadFile(x.accounts)
	if err != nil {
		t.Fatal(err)
	}

	reload := fmt.Sprintf("%s --signal reload=%s; exit 3", testnats.NATSServerBinary(t), x.pidFile)
	mesh := strings.Replace(x.mesh(x.fingerprint), fmt.Sprintf("reload: { pid_file: %s }", x.pidFile),
		fmt.Sprintf("reload: { command: [sh, -c, %q] }", reload), 1)
	f.write(withMail(mesh))
	mail := f.mint(ctx, "alpha.mail")["alpha.mail"]
	s := f.connect(ctx)
	_, _, err = f.apply(ctx, s, RunOptions{})
	if err == nil {
		t.Fatal("an apply whose reload command failed reported success")
	}
	if msg := err.Error(); strings.Contains(msg, "failed too") || !strings.Contains(msg, "exit status 3") ||
		!strings.Contains(msg, "seen serving it") {
		t.Errorf("the error does not say the previous config is restored and served: %v", err)
	}
	if after, _ := os.ReadFile(x.accounts); string(after) != string(before) {
		t.Error("the previous accounts config was not restored")
	}
	target := busclient.Target{URL: x.url, Fingerprint: x.fingerprint}
	if err := login(ctx, target, "alpha.mail", mail); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("alpha.mail, in the config that was rolled back: %v; want an authorization error", err)
	}
}

// Item 3 of issue 11: `credentials issue` beside a one-shot command that serves the embedded
// bus sent that process SIGHUP, which killed it (exit 129). Here the one-shot is a session of
// this test process: a signal would kill the test binary itself.
func TestCredentialsIssuedBesideAOneShotServingTheBusLeaveItRunning(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, quickMesh)
	s := f.connect(ctx)
	f.mustApply(ctx, s)
	if s.Embedded == nil {
		t.Fatal("the session does not serve the embedded bus")
	}

	pw := f.mint(ctx, "alpha.shop")["alpha.shop"]
	if _, err := SyncAccounts(ctx, f.mesh(), f.store); err != nil {
		t.Fatalf("issuing a credential while a one-shot command serves the bus: %v", err)
	}
	// Live when SyncAccounts returns: no waiting for a reload that may come later.
	if err := login(ctx, s.Target, "alpha.shop", pw); err != nil {
		t.Fatalf("the credential issued does not log in: %v", err)
	}
	// The serving session is unharmed and the bus is as the mesh says.
	f.mustConverge(ctx, s)
}

// Item 7 of issue 11: `apply --wait` queued behind a one-shot apply that serves the embedded
// bus. When the first apply ends, it stops its bus; the waiting one then takes the lock and
// found no bus to apply to.
func TestAnApplyWaitingForTheLockOutlivesThePreviousApplysBus(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, quickMesh)
	first := f.connect(ctx)
	f.mustApply(ctx, first)

	// The first apply in progress: it serves the bus and holds the lock.
	lock, err := state.AcquireLock(ctx, f.stateDi, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	second := f.connect(ctx)
	if second.Embedded != nil {
		t.Fatal("the second session started a bus beside the first's")
	}
	f.write(withMail(quickMesh))
	waiting := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, _, err := f.apply(ctx, second, RunOptions{WaitForLock: true, LockNotice: func(string) { close(waiting) }})
		done <- err
	}()
	<-waiting

	// The first apply ends: it unlocks, and the command stops the bus it served.
	if err := lock.Unlock(); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() {
		first.Close()
		close(stopped)
	}()
	if err := <-done; err != nil {
		t.Fatalf("the apply that waited for the lock failed: %v", err)
	}
	f.mustConverge(ctx, second)
	second.Close()
	<-stopped
}

// Item 7 again, when the process that served the bus is gone without a word (killed): the
// waiting apply serves the bus itself.
func TestAnApplyWaitingForTheLockServesTheBusWhenItsServerIsGone(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, quickMesh)
	first := f.connect(ctx)
	f.mustApply(ctx, first)
	lock, err := state.AcquireLock(ctx, f.stateDi, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	second := f.connect(ctx)
	f.write(withMail(quickMesh))
	waiting := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, _, err := f.apply(ctx, second, RunOptions{WaitForLock: true, LockNotice: func(string) { close(waiting) }})
		done <- err
	}()
	<-waiting
	first.Embedded.Shutdown() // as a kill would: nobody is waited for
	if err := lock.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the apply that waited for the lock failed: %v", err)
	}
	if second.Embedded == nil {
		t.Error("the waiting apply did not serve the bus itself")
	}
	// A session of its own: the fixture's apply wrapped the API the reconnect replaced.
	f.mustConverge(ctx, f.connect(ctx))
}

// Item 10 of issue 11: a run killed mid-check leaves .accounts-check-*/ — a copy of every
// hash — beside the accounts file; the next apply removes it, and leaves alone a check a
// running process is making.
func TestAnApplyRemovesTheChecksAKilledRunLeft(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, quickMesh)
	s := f.connect(ctx)
	f.mustApply(ctx, s)
	dir := filepath.Dir(s.Accounts.Path)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	killed := filepath.Join(dir, fmt.Sprintf(".accounts-check-%d-123456", dead.ProcessState.Pid()))
	older := filepath.Join(dir, ".accounts-check-3141592653")
	running := filepath.Join(dir, fmt.Sprintf(".accounts-check-%d-654321", os.Getpid()))
	for _, d := range []string{killed, older, running} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "accounts.conf", ""), []byte("# hashes"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f.mustConverge(ctx, s) // even an apply with nothing to do
	for _, d := range []string{killed, older} {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s, left by a killed run, is still there (%v)", filepath.Base(d), err)
		}
	}
	if _, err := os.Stat(running); err != nil {
		t.Errorf("the check of a running process was removed: %v", err)
	}
}

// With the reload left to the operator, the file is written and not served: diff must say
// so rather than "in sync", and once the operator reloads, the bus is in sync with no write.
func TestAConfigWrittenButNotReloadedIsNotInSync(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	x := startExternal(t)
	f := newFixture(t, x.mesh(x.fingerprint))
	f.mustApply(ctx, f.connect(ctx))

	f.write(withMail(strings.Replace(x.mesh(x.fingerprint), fmt.Sprintf("{ pid_file: %s }", x.pidFile), "none", 1)))
	s := f.connect(ctx)
	if _, _, err := f.apply(ctx, s, RunOptions{}); !errors.Is(err, accounts.ErrNotLive) {
		t.Fatalf("an apply whose reload is the operator's: %v; want accounts.ErrNotLive", err)
	}
	written, err := os.ReadFile(x.accounts)
	if err != nil {
		t.Fatal(err)
	}
	f.write(withMail(x.mesh(x.fingerprint))) // the same mesh, reloaded by pid from here on
	p, err := s.Plan(ctx, f.mesh(), plan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var reason string
	for _, c := range p.Changes {
		if c.Kind == plan.KindAccounts {
			reason = c.Reason
		}
	}
	if !strings.Contains(reason, "has not loaded it") {
		t.Fatalf("the plan does not say the server has not loaded the file on disk (reason %q)", reason)
	}

	// The operator reloads: the file on disk is proven served, and nothing is left to do.
	pid, err := os.ReadFile(x.pidFile)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(testnats.NATSServerBinary(t), "--signal", "reload="+strings.TrimSpace(string(pid))).CombinedOutput(); err != nil {
		t.Fatalf("reloading the server: %v: %s", err, out)
	}
	if err := s.Accounts.ServesRecorded(ctx); err != nil {
		t.Fatalf("after the operator's reload: %v", err)
	}
	f.mustConverge(ctx, f.connect(ctx))
	if after, _ := os.ReadFile(x.accounts); string(after) != string(written) {
		t.Error("a converged bus had its accounts config written again")
	}
}
