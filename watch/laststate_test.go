package watch

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/meshbus/meshctl/model"
)

// The state file says what /healthz does not: an invalid tree's problems, capped as a load
// caps them, for meshctl status. It is written when the state changes, never again for the
// same state (a watch in sync resyncs for months), 0600, and says when its watch stopped.
func TestTheStateFileRecordsTheProblemsOnceAndWhenWatchStopped(t *testing.T) {
	t.Parallel()
	files := quickstart(t)
	// More broken modules than a load reports, one of them quoting a value that must not
	// be echoed raw.
	var bad strings.Builder
	bad.WriteString("modules:\n  - name: first\n    on: [\"nats://admin:s3cret@host\\n::warning::x\"]\n")
	for i := range model.MaxDiagnostics + 20 {
		fmt.Fprintf(&bad, "  - name: m%d\n    on: [ghost]\n", i)
	}
	files["bad.yaml"] = bad.String()
	h := startWatch(t, files)
	h.waitFor(0, "reporting the invalid tree at start", is(TriggerStart, OutcomeInvalid))

	path := filepath.Join(h.stateDir, StateFileName)
	s := readState(t, h.stateDir)
	if s.Cycle.Outcome != OutcomeInvalid || s.Cycle.Trigger != "start" || s.Cycle.At.IsZero() || s.PID != os.Getpid() || !s.Running() {
		t.Errorf("the state file after an invalid start: %+v; want invalid, trigger start, this pid, running", s)
	}
	probs := s.Cycle.Problems
	if len(probs) != model.MaxDiagnostics+1 || !strings.HasPrefix(probs[0], filepath.Join(h.dir, "bad.yaml")+":3:") ||
		probs[len(probs)-1] != "… and 21 more problem(s)" {
		t.Errorf("the state file's problems (%d): first %q, last %q; want the first %d at bad.yaml and \"… and 21 more problem(s)\"",
			len(probs), first(probs), last(probs), model.MaxDiagnostics)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "s3cret") || strings.ContainsAny(first(probs), "\n\r") {
		t.Errorf("the state file holds a password quoted from the description:\n%s", raw)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("the state file: %v, mode %v; want 0600", err, info.Mode().Perm())
	}

	mark := h.mark()
	h.write("bad.yaml", auditModule)
	h.waitFor(mark, "applying the fixed tree", is(TriggerFiles, OutcomeOK))
	if s := readState(t, h.stateDir); s.Cycle.Outcome != OutcomeOK || s.Cycle.Trigger != "files" || len(s.Cycle.Problems) != 0 || s.Cycle.Reason != "" {
		t.Errorf("the state file after the fix: %+v; want ok, trigger files, no problems", s)
	}

	// The first noop is a change of state (ok → noop); the ones after it are not, and leave
	// the file as it is: the same file, not a rewrite of the same bytes.
	hup := func() {
		t.Helper()
		mark := h.mark()
		h.hup <- syscall.SIGHUP
		h.waitFor(mark, "a noop after SIGHUP", is(TriggerSignal, OutcomeNoop))
	}
	hup()
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if s := readState(t, h.stateDir); s.Cycle.Outcome != OutcomeNoop || s.Cycle.Trigger != "sighup" {
		t.Errorf("the state file after the first noop: %+v; want noop, trigger sighup", s)
	}
	for range 3 {
		hup()
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Error("the state file was rewritten by noop cycles that did not change the state")
	}

	h.stop()
	if s := readState(t, h.stateDir); s.StoppedAt.IsZero() || s.Running() || s.Cycle.Outcome != OutcomeNoop {
		t.Errorf("the state file after watch stopped: %+v; want it to say stopped, with the last state", s)
	}
}

// A refused, conflicting or failed cycle's reason is on one line, for status's one row.
func TestAReasonIsOneLine(t *testing.T) {
	t.Parallel()
	if got := oneLine("first\r\nsecond\n\tthird\x1b[31m"); got != "first; second; third [31m" {
		t.Errorf("oneLine: %q", got)
	}
}

func readState(t *testing.T, stateDir string) State {
	t.Helper()
	s, err := ReadState(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

func last(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}

// A watch killed before it could say it stopped leaves a file naming a process that is gone:
// that is no running watch either.
func TestAStateFileOfAKilledWatchIsNotRunning(t *testing.T) {
	t.Parallel()
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	if s := (State{PID: gone.Process.Pid}); s.Running() {
		t.Errorf("a state file of pid %d, which exited, says its watch runs", s.PID)
	}
	if s := (State{PID: os.Getpid()}); !s.Running() {
		t.Error("a state file of this process, which runs and did not stop, says its watch does not run")
	}
}
