package reconcile

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/meshbus/meshctl/internal/lockedbuf"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/state"
)

// Item 9 of issue 11: a full disk was said as "error creating store for consumer" or "disk
// I/O error", or blamed on the server's parser, and a failed apply whose history row could
// not be written was lost. The disks here are full for real: a tmpfs, filled to the last
// byte.
//
// First the embedded bus's directory is full — its JetStream store, its accounts config —
// while the store of history is not: the error says so, and the history has it.
func TestAFullBusDiskIsSaidAsSuchAndRecorded(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	stateDir := filepath.Join(t.TempDir(), "state")
	busDir := filepath.Join(stateDir, "bus")
	mountTmpfs(t, busDir)
	f := fixtureWithState(t, onASmallDisk(quickMesh), stateDir)
	s := f.connect(ctx)
	f.mustApply(ctx, s)
	f.mint(ctx, "alpha.mail")
	// A follower too: its consumer is the first thing the apply stores on the bus.
	f.write(strings.Replace(withMail(onASmallDisk(quickMesh)), "controller:", "  - name: audit\n    on: [alpha]\n    follows: [shop/order.placed]\ncontroller:", 1))

	filler := fillDisk(t, busDir)
	_, _, err := f.apply(ctx, s, RunOptions{})
	t.Logf("the apply on a full disk: %v", err)
	if !errors.Is(err, state.ErrNoSpace) || !strings.Contains(err.Error(), busDir) {
		t.Fatalf("an apply on a full disk: %v; want it said as no space left on device, naming the place", err)
	}
	history, err := f.store.History(ctx, 1)
	if err != nil || len(history) != 1 || !strings.HasPrefix(history[0].Outcome, "failed: ") ||
		!strings.Contains(history[0].Outcome, "no space left on device") {
		t.Errorf("the failed apply is not in the history as such: %v, %v", history, err)
	}

	// With room again, the next apply finishes the work.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = f.connect(ctx)
	f.mustApply(ctx, s)
	f.mustConverge(ctx, s)
}

// Then the state directory itself is full: the apply cannot even take its lock, says why,
// and since the history cannot be written either, says that too.
func TestAFullStateDiskIsSaidAndTheLostHistoryToo(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	stateDir := filepath.Join(t.TempDir(), "state")
	mountTmpfs(t, stateDir)
	f := fixtureWithState(t, onASmallDisk(quickMesh), stateDir)
	s := f.connect(ctx)
	f.mustApply(ctx, s)
	f.write(withMail(onASmallDisk(quickMesh)))

	filler := fillDisk(t, stateDir)
	_, _, err := f.apply(ctx, s, RunOptions{})
	t.Logf("the apply on a full disk: %v", err)
	if !errors.Is(err, state.ErrNoSpace) || !strings.Contains(err.Error(), stateDir) {
		t.Fatalf("an apply on a full disk: %v; want it said as no space left on device, naming the place", err)
	}
	history, herr := f.store.History(ctx, 1)
	recorded := herr == nil && len(history) == 1 && strings.Contains(history[0].Outcome, "no space left on device")
	if !recorded && !strings.Contains(f.log.String(), "could not be recorded in the history") {
		t.Errorf("the failed apply is neither in the history (%v, %v) nor said to be missing from it", history, herr)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	f.mustApply(ctx, s)
	f.mustConverge(ctx, s)
}

// onASmallDisk is yaml with every stream bounded small enough for the tests' 32 MiB disks: the
// server reserves each stream's max_bytes against its store (75% of the disk's free space
// when it started) and refuses a stream past it, which the bounded defaults would be.
func onASmallDisk(yaml string) string {
	return strings.Replace(yaml, "bus:\n", "bus:\n  jetstream:\n    streams:\n      control: {max_bytes: 1MiB}\n"+
		"      events: {max_bytes: 2MiB}\n      nodes: {max_bytes: 1MiB}\n      seats: {max_bytes: 1MiB}\n", 1)
}

// mountTmpfs mounts a small tmpfs at dir for the test, or skips it, saying why, where
// mounting is not allowed.
func mountTmpfs(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a full disk is simulated with a tmpfs, and mounting one needs root")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=32m,mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (%v: %s)", err, strings.TrimSpace(string(out)))
	}
	// Registered before the fixture's cleanups, so it runs after they closed the store and
	// stopped the bus.
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
}

// fixtureWithState is newFixture with the state directory at stateDir.
func fixtureWithState(t *testing.T, yaml, stateDir string) *fixture {
	t.Helper()
	f := &fixture{t: t, dir: t.TempDir(), stateDi: stateDir, log: &lockedbuf.Buffer{}}
	f.write(yaml)
	st, err := state.Open(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	f.store = st
	t.Cleanup(func() {
		st.Close()
		f.assertNoSecretLeaked()
	})
	return f
}

// fillDisk writes a file in dir until its filesystem has no byte left, and returns it.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	fh, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	for _, size := range []int{1 << 20, 4 << 10, 1} {
		chunk := make([]byte, size)
		for {
			if _, err := fh.Write(chunk); err != nil {
				break
			}
		}
	}
	return path
}

// Item 9 of issue 22: a disk that fills during a first apply gave a `failed:` line for each
// of the 815 consumers the server could not create, and the failed apply, whose history is on
// the same full disk, was neither recorded nor said to be missing. The first store the server
// cannot create stops the apply: one error, naming where the disk is full.
func TestADiskFillingDuringAFirstApplyStopsItOnce(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	stateDir := filepath.Join(t.TempDir(), "state")
	mountTmpfs(t, stateDir)
	f := fixtureWithState(t, onASmallDisk(wideMesh(60)), stateDir)
	s := f.connect(ctx)
	var filled sync.Once
	var failed []string
	_, _, err := f.apply(ctx, s, RunOptions{Progress: func(_, _ int, c plan.Change, err error) {
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", c.ID(), err))
		}
		// The streams are made; the consumers, what most of a first apply is, meet a full disk.
		if c.Kind == plan.KindStream {
			filled.Do(func() { fillDisk(t, stateDir) })
		}
	}})
	t.Logf("the apply on a disk that filled: %v", err)
	storeDir := filepath.Join(stateDir, "bus", "jetstream")
	if !errors.Is(err, state.ErrNoSpace) || !strings.Contains(err.Error(), storeDir) {
		t.Errorf("an apply on a full disk: %v; want it said as no space left on device at %s", err, storeDir)
	}
	if n := strings.Count(err.Error(), "error creating store"); n != 1 {
		t.Errorf("the server's store failure is said %d times in the error, want once", n)
	}
	if len(failed) > 0 {
		t.Errorf("%d change(s) reported failed one by one, want the one error alone:\n%s", len(failed), strings.Join(failed, "\n"))
	}
	history, herr := f.store.History(ctx, 1)
	recorded := herr == nil && len(history) == 1 && strings.Contains(history[0].Outcome, "no space left on device")
	t.Logf("recorded in the history: %v", recorded)
	if !recorded && !strings.Contains(f.log.String(), "could not be recorded in the history") {
		t.Errorf("the failed apply is neither in the history (%v, %v) nor said to be missing from it", history, herr)
	}
}

// The same on an operator's server, whose store is not meshctl's to inspect: the first store
// it cannot create stops the apply with one error naming the server.
func TestAnExternalServersFullStoreStopsTheApplyOnce(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	dir := t.TempDir()
	storeDir := filepath.Join(dir, "js")
	mountTmpfs(t, storeDir)
	x := startExternalIn(t, dir)
	f := newFixture(t, onASmallDisk(x.mesh(x.fingerprint)))
	s := f.connect(ctx)
	f.mustApply(ctx, s)
	var b strings.Builder
	for i := range 40 {
		fmt.Fprintf(&b, "  - name: reader-%02d\n    on: [alpha]\n    follows: [shop/order.placed]\n", i)
	}
	f.write(onASmallDisk(x.mesh(x.fingerprint)) + b.String())
	fillDisk(t, storeDir)
	var failed []string
	_, _, err := f.apply(ctx, s, RunOptions{Progress: func(_, _ int, c plan.Change, err error) {
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", c.ID(), err))
		}
	}})
	t.Logf("the apply on a full disk: %v", err)
	if err == nil || strings.Count(err.Error(), "error creating store") != 1 || !strings.Contains(err.Error(), x.url) {
		t.Errorf("an apply on a server whose store is full: %v; want one error naming the server", err)
	}
	if len(failed) > 0 {
		t.Errorf("%d change(s) reported failed one by one, want the one error alone:\n%s", len(failed), strings.Join(failed, "\n"))
	}
	if history, herr := f.store.History(ctx, 1); herr != nil || len(history) != 1 || !strings.Contains(history[0].Outcome, "error creating store") {
		t.Errorf("the failed apply is not in the history as such: %v, %v", history, herr)
	}
}
