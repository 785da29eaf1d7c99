package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/internal/lockedbuf"
	"github.com/meshbus/meshctl/internal/testnats"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/state"
)

// The CLI tests below run meshctl as operators do, as a process of its own, and signal it.

var (
	buildOnce sync.Once
	builtDir  string
	builtBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if builtDir != "" {
		os.RemoveAll(builtDir)
	}
	testnats.RemoveBuiltServer()
	os.Exit(code)
}

// builtMeshctl builds this package's binary once per test run and returns its path.
func builtMeshctl(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if builtDir, buildErr = os.MkdirTemp("", "meshctl-bin-"); buildErr != nil {
			return
		}
		builtBin = filepath.Join(builtDir, "meshctl")
		out, err := exec.Command("go", "build", "-o", builtBin, ".").CombinedOutput()
		if err != nil {
			buildErr = errors.New(string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("building meshctl: %v", buildErr)
	}
	return builtBin
}

// process is a meshctl started in the background.
type process struct {
	cmd            *exec.Cmd
	stdout, stderr *lockedbuf.Buffer
	// exited is closed once the process has exited and cmd.Wait returned err: cmd.ProcessState
	// and err may be read after it, and not before.
	exited chan struct{}
	err    error
}

func startMeshctl(t *testing.T, args ...string) *process {
	t.Helper()
	return startProgram(t, builtMeshctl(t), args...)
}

// startProgram starts the program bin in the background, killed at the end of the test.
func startProgram(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin, args...), stdout: &lockedbuf.Buffer{}, stderr: &lockedbuf.Buffer{}, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill() // os.ErrProcessDone once it has exited
		<-p.exited
	})
	return p
}

// until waits until cond holds (testwait.Until), failing the test at once when the process
// exits first and cond does not hold then: it never will.
func (p *process) until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, what, func() bool {
		select {
		case <-p.exited:
			if !cond() {
				t.Fatalf("meshctl exited (%v) before %s:\n%s", p.err, what, p.stderr)
			}
			return true
		default:
			return cond()
		}
	})
}

// signal sends sig and waits for the process to exit, failing when it is still running
// well after the second it has; it returns the exit code and how long exiting took.
func (p *process) signal(t *testing.T, sig os.Signal) (int, time.Duration) {
	t.Helper()
	sent := time.Now()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		t.Fatalf("meshctl still ran 15s after %v; killed:\n%s", sig, p.stderr)
	}
	return p.cmd.ProcessState.ExitCode(), time.Since(sent)
}

// A validate blocked in the kernel — opening a FIFO named like a mesh file, which no
// writer will ever open — still exits on SIGTERM, saying so. It ignored SIGINT and
// SIGTERM; only SIGKILL ended it.
func TestAValidateBlockedOnAFIFOExitsOnSIGTERM(t *testing.T) {
	t.Parallel()
	dir, _ := cliFixture(t)
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe.yaml"), 0o644); err != nil {
		t.Skipf("no FIFOs here: %v", err)
	}
	p := startMeshctl(t, "validate", "-f", dir)
	exited := false
	testwait.Until(t, "validate blocking on the FIFO", func() bool {
		select {
		case <-p.exited:
			exited = true
			return true
		default:
			return blockedOnAFIFO(p.cmd.Process.Pid)
		}
	})
	if exited {
		// A loader that refuses a FIFO without opening it leaves nothing to interrupt.
		if code := p.cmd.ProcessState.ExitCode(); code != exitInvalid || !strings.Contains(p.stdout.String(), "pipe.yaml") {
			t.Fatalf("validate exited %d before blocking:\n%s%s", code, p.stdout, p.stderr)
		}
		t.Log("the loader refuses the FIFO without opening it")
		return
	}
	code, took := p.signal(t, syscall.SIGTERM)
	t.Logf("exited %d, %s after SIGTERM", code, took.Round(time.Millisecond))
	if code != exitInterrupted || !strings.Contains(p.stderr.String(), "SIGTERM: validate") {
		t.Errorf("exit %d, want %d, saying validate was stopped; stderr:\n%s", code, exitInterrupted, p.stderr)
	}
}

// blockedOnAFIFO reports whether a thread of pid waits in the kernel for a FIFO's writer.
func blockedOnAFIFO(pid int) bool {
	tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "wchan"))
	for _, task := range tasks {
		if w, err := os.ReadFile(task); err == nil && (string(w) == "wait_for_partner" || string(w) == "fifo_open") {
			return true
		}
	}
	return false
}

// An apply waiting for the apply lock stops on SIGINT and says it changed nothing; the
// embedded bus it started for its run is stopped.
func TestAnApplyInterruptedSaysWhatWasDone(t *testing.T) {
	t.Parallel()
	dir, st := cliFixture(t)
	lock, err := state.AcquireLock(context.Background(), st, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Unlock()
	p := startMeshctl(t, "apply", "-f", dir, "--state", st, "--bcrypt-cost", "4", "--wait")
	p.until(t, "wait for the apply lock", func() bool {
		return strings.Contains(p.stderr.String(), "waiting for the apply lock")
	})
	code, took := p.signal(t, os.Interrupt)
	t.Logf("exited %d, %s after SIGINT", code, took.Round(time.Millisecond))
	if code != exitInterrupted || !strings.Contains(p.stderr.String(), "interrupted: no change was made") {
		t.Errorf("exit %d, want %d, saying no change was made; stderr:\n%s", code, exitInterrupted, p.stderr)
	}
	if _, running := bus.RunningEmbedded(st); running {
		t.Error("the embedded bus apply started still runs")
	}
}

// watch ends on SIGTERM: it stops the embedded bus it serves and exits 0.
func TestWatchStopsOnSIGTERM(t *testing.T) {
	t.Parallel()
	dir, st := cliFixture(t)
	p := startMeshctl(t, "watch", "-f", dir, "--state", st, "--bcrypt-cost", "4", "--debounce", "50ms")
	p.until(t, "first reconcile", func() bool {
		return strings.Contains(p.stderr.String(), "reconciled")
	})
	code, took := p.signal(t, syscall.SIGTERM)
	t.Logf("exited %d, %s after SIGTERM", code, took.Round(time.Millisecond))
	if code != exitOK || !strings.Contains(p.stderr.String(), "stopped") {
		t.Errorf("exit %d, want 0 and a last line saying it stopped:\n%s", code, p.stderr)
	}
	if _, running := bus.RunningEmbedded(st); running {
		t.Error("the embedded bus still runs after watch stopped")
	}
}

// A command that ignores its cancelled context is abandoned after the grace, saying so.
func TestACommandIgnoringTheSignalIsAbandoned(t *testing.T) {
	t.Parallel()
	sigs := make(chan os.Signal, 1)
	var stderr bytes.Buffer
	block := make(chan struct{})
	defer close(block)
	sigs <- syscall.SIGTERM
	code := runInterruptible("validate", false, &stderr, sigs, 50*time.Millisecond, func(context.Context) int {
		<-block
		return exitOK
	})
	if code != exitInterrupted || !strings.Contains(stderr.String(), "SIGTERM: validate did not stop within 50ms") {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
	// watch is given the time it takes, and a second signal.
	sigs2 := make(chan os.Signal, 2)
	sigs2 <- os.Interrupt
	sigs2 <- os.Interrupt
	stderr.Reset()
	code = runInterruptible("watch", true, &stderr, sigs2, time.Nanosecond, func(context.Context) int {
		<-block
		return exitOK
	})
	if code != exitInterrupted || !strings.Contains(stderr.String(), "SIGINT again: watch abandoned") {
		t.Errorf("watch: exit %d, stderr %q", code, stderr.String())
	}
}
