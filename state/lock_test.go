package state

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// noticeRecorder collects the messages AcquireLock reports, for a test to read after the call
// returned, and signals each on a channel for a test that waits for one.
type noticeRecorder struct {
	got chan string
}

func newNoticeRecorder() *noticeRecorder { return &noticeRecorder{got: make(chan string, 16)} }

func (n *noticeRecorder) notice(msg string) { n.got <- msg }

// all returns the messages received so far.
func (n *noticeRecorder) all() []string {
	var msgs []string
	for {
		select {
		case m := <-n.got:
			msgs = append(msgs, m)
		default:
			return msgs
		}
	}
}

func TestLockHeldFailsFastNamingTheHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	first, err := AcquireLock(ctx, dir, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	// flock belongs to the open file description, so a second open in this process contends
	// exactly as a second meshctl would.
	errc := make(chan error)
	go func() {
		_, err := AcquireLock(ctx, dir, false, nil)
		errc <- err
	}()
	err = <-errc
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second AcquireLock = %v, want ErrLocked", err)
	}
	if want := fmt.Sprintf("pid %d", os.Getpid()); !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "since") {
		t.Errorf("error %q does not name %q and since when", err, want)
	}
	if err := first.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := first.Unlock(); err != nil {
		t.Errorf("second Unlock: %v", err)
	}
	data, err := os.ReadFile(filepath.Join(dir, lockFileName))
	if err != nil || len(data) != 0 {
		t.Errorf("lock file after Unlock = %q (%v), want empty", data, err)
	}
	again, err := AcquireLock(ctx, dir, false, nil)
	if err != nil {
		t.Fatalf("AcquireLock after Unlock: %v", err)
	}
	again.Unlock()
}

func TestLockWaitsForRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	first, err := AcquireLock(ctx, dir, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	notices := newNoticeRecorder()
	type result struct {
		l   *Lock
		err error
	}
	done := make(chan result)
	go func() {
		l, err := AcquireLock(ctx, dir, true, notices.notice)
		done <- result{l, err}
	}()
	// The waiter says it is waiting once it found the lock held.
	if msg := <-notices.got; !strings.Contains(msg, "waiting") || !strings.Contains(msg, fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("notice %q does not say it waits for pid %d", msg, os.Getpid())
	}
	select {
	case r := <-done:
		t.Fatalf("the waiter returned while the lock was held: %v", r.err)
	default:
	}
	if err := first.Unlock(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("the waiter: %v", r.err)
	}
	defer r.l.Unlock()
	if msgs := notices.all(); len(msgs) != 0 {
		t.Errorf("unexpected notices after a clean release: %q", msgs)
	}
}

func TestLockWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, err := AcquireLock(context.Background(), dir, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() {
		_, err := AcquireLock(ctx, dir, true, func(string) { cancel() })
		errc <- err
	}()
	err = <-errc
	if !errors.Is(err, ErrLocked) || !errors.Is(err, context.Canceled) {
		t.Errorf("AcquireLock with an ended context = %v, want ErrLocked and context.Canceled", err)
	}
}

func TestLockTakeoverAfterCrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state")
	child := startCrashHelper(t, dir)
	pid := child.Process.Pid

	// While the child lives, it holds the lock.
	_, err := AcquireLock(ctx, dir, false, nil)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", pid)) {
		t.Errorf("AcquireLock while the child holds it = %v, want ErrLocked naming pid %d", err, pid)
	}

	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	child.Wait()
	if ws, ok := child.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the child ended with %v, not by SIGKILL", child.ProcessState)
	}

	// The store opens, with what the child committed and without what it had not.
	s := openStore(t, dir)
	hashes, err := s.Hashes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := hashes["node.crash"]; !ok {
		t.Errorf("the child's committed credential is missing: %v", hashes)
	}
	history, err := s.History(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(history) != 1 || history[0].Summary != "committed" {
		t.Errorf("History after the crash = %+v, want only the committed apply", history)
	}
	if _, err := s.Mint(ctx, []string{"node.after"}, bcrypt.MinCost, "issue"); err != nil {
		t.Errorf("writing after the crash: %v", err)
	}

	notices := newNoticeRecorder()
	l, err := AcquireLock(ctx, dir, false, notices.notice)
	if err != nil {
		t.Fatalf("AcquireLock after the crash: %v", err)
	}
	defer l.Unlock()
	msgs := notices.all()
	want := fmt.Sprintf("took over the apply lock left by pid %d", pid)
	if len(msgs) != 1 || !strings.Contains(msgs[0], want) || !strings.Contains(msgs[0], "no longer running") {
		t.Errorf("notices = %q, want one saying %q ... (no longer running)", msgs, want)
	}
	data, err := os.ReadFile(filepath.Join(dir, lockFileName))
	if err != nil || !strings.Contains(string(data), fmt.Sprintf(`"pid":%d`, os.Getpid())) {
		t.Errorf("lock file = %q (%v), want this process's record", data, err)
	}
}

func TestLockTakeoverOfUnreadableRecord(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, lockFileName), []byte("not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	notices := newNoticeRecorder()
	l, err := AcquireLock(context.Background(), dir, false, notices.notice)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	if msgs := notices.all(); len(msgs) != 1 || !strings.Contains(msgs[0], "took over") {
		t.Errorf("notices = %q, want one takeover notice", msgs)
	}
}

// Three applies started at the same instant on a fresh state directory all create and migrate
// the store; none may fail at that (one once failed with SQLITE_BUSY: two connections switching
// a new file to WAL at once deadlock, and SQLite refuses one without waiting), and each that does
// not get the apply lock must meet it held by a named holder, never "it has not recorded its
// pid". They are processes, as two applies are, released together by a gate; the race is
// repeated because most rounds serialise themselves.
func TestSimultaneousFirstOpensMeetTheApplyLock(t *testing.T) {
	t.Parallel()
	const rounds, openers = 80, 3
	helpers := startOpeners(t, openers)
	for round := range rounds {
		outcomes := helpers.openAtOnce(t, filepath.Join(t.TempDir(), "state"))
		locked := 0
		for _, o := range outcomes {
			switch {
			case o == "locked":
				locked++
			case !strings.Contains(o, ErrLocked.Error()+": held by pid "):
				t.Errorf("round %d: an opener failed other than by meeting the apply lock held by a named holder:\n%s", round, o)
			}
		}
		if locked != 1 {
			t.Errorf("round %d: %d openers took the apply lock, want 1: %q", round, locked, outcomes)
		}
		if t.Failed() {
			return
		}
	}
}

// openers are helper processes that open a store and take its apply lock at the instant the
// gate, a flock this process holds between rounds, is released.
type openers struct {
	gate    *os.File
	stdins  []io.Writer
	stdouts []*bufio.Scanner
}

// startOpeners starts n openers, stopped when the test ends.
func startOpeners(t *testing.T, n int) *openers {
	t.Helper()
	gate, err := os.Create(filepath.Join(t.TempDir(), "gate"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gate.Close() })
	o := &openers{gate: gate}
	for range n {
		cmd := helperCommand(t, "open", "")
		cmd.Env = append(cmd.Env, helperGateEnv+"="+gate.Name())
		stdin, stdout, stderr := startPiped(t, cmd)
		t.Cleanup(func() {
			stdin.Close()
			if err := cmd.Wait(); err != nil {
				t.Errorf("opener: %v\n%s", err, stderr.Bytes())
			}
		})
		o.stdins = append(o.stdins, stdin)
		o.stdouts = append(o.stdouts, stdout)
	}
	return o
}

// openAtOnce has every opener open the store in dir and take its apply lock at the same
// instant, and returns what each said: "locked", or its error.
func (o *openers) openAtOnce(t *testing.T, dir string) []string {
	t.Helper()
	if err := syscall.Flock(int(o.gate.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	o.sayToEach(t, dir, "waiting")
	if err := syscall.Flock(int(o.gate.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	outcomes := make([]string, len(o.stdouts))
	for i, out := range o.stdouts {
		if !out.Scan() {
			t.Fatalf("opener %d ended: %v", i, out.Err())
		}
		outcomes[i] = out.Text()
	}
	// Every opener has taken the lock or failed: the holder may let go.
	o.sayToEach(t, "release", "released")
	return outcomes
}

// sayToEach sends line to every opener and reads its answer, which must be want.
func (o *openers) sayToEach(t *testing.T, line, want string) {
	t.Helper()
	for i := range o.stdins {
		if _, err := io.WriteString(o.stdins[i], line+"\n"); err != nil {
			t.Fatal(err)
		}
		if !o.stdouts[i].Scan() || o.stdouts[i].Text() != want {
			t.Fatalf("opener %d answered %q (%v), want %q", i, o.stdouts[i].Text(), o.stdouts[i].Err(), want)
		}
	}
}
