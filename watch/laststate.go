package watch

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/internal/atomicfile"
)

// StateFileName is the file in the state directory where watch keeps the state its reconciles
// left, for `meshctl status`: /healthz says only which state it is (any local user can ask it,
// and a problem quotes the description back, a symlinked secret included), so the problems and
// the reasons are here, 0600, for the operator who owns the state directory.
//
// It is rewritten when the state changes (the outcome, its problems or its reason), not at
// every cycle: a watch in sync resyncs every minute for months, and each of those noop cycles
// would be a write of the same news.
const StateFileName = "watch.json"

// State is the state file: which watch wrote it and whether it stopped, and the cycle that
// brought the state it is in.
type State struct {
	// PID is the watch process that wrote it.
	PID int `json:"pid"`
	// StoppedAt is when that watch stopped; zero while it runs, or when it was killed
	// before it could say so (then PID names no process).
	StoppedAt time.Time  `json:"stopped_at,omitzero"`
	Cycle     CycleState `json:"cycle"`
	// Lead says, on a bus that keeps the store, whether this watch leads or stands by; nil
	// on the embedded bus, where one watch serves the bus and leads it alone.
	Lead *LeadState `json:"lead,omitempty"`
}

// LeadState is a watch's part in leading the mesh, as it last found it.
type LeadState struct {
	// Leading is whether this watch leads.
	Leading bool `json:"leading"`
	// Leader is who leads (this watch when Leading), as replica.Holder says it; empty when
	// nobody does, or this watch could not read who.
	Leader string `json:"leader,omitempty"`
	// Since is when the leader took the lead, by its own clock.
	Since time.Time `json:"since,omitzero"`
	// Behind is how many messages the store's copy on the bus took that this watch's store
	// had not taken when it last looked: 0 when it is current. A leader writes the copy, and
	// is never behind it.
	Behind uint64 `json:"behind"`
	// At is when this watch last looked.
	At time.Time `json:"at"`
}

// CycleState is the first cycle that ended in the state the file records. Later cycles ending
// the same way leave the file alone, so At is when the state began.
type CycleState struct {
	At      time.Time `json:"at"`
	Trigger string    `json:"trigger"`
	Outcome Outcome   `json:"outcome"`
	// Problems are an invalid description's problems as watch logs them: file:line:col:
	// message, values quoted safely, the first model.MaxDiagnostics of them and "… and N
	// more problem(s)".
	Problems []string `json:"problems,omitempty"`
	// Reason is why a refused, conflicting or failed cycle ended so, on one line.
	Reason string `json:"reason,omitempty"`
}

// Running is whether the watch that wrote the file still runs: it has not said it stopped, and
// its process is alive. A process is alive when signal 0 reaches it; EPERM means it exists but
// is not ours to signal.
func (s State) Running() bool {
	return s.StoppedAt.IsZero() && bus.ProcessAlive(s.PID)
}

// ReadState reads the state file of the state directory; a missing file is fs.ErrNotExist: no
// watch finished a reconcile here yet.
func ReadState(stateDir string) (State, error) {
	var s State
	data, err := os.ReadFile(filepath.Join(stateDir, StateFileName))
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("reading the state watch recorded in %s: %w", stateDir, err)
	}
	return s, nil
}

// stateRecorder keeps the state file of one watch. It belongs to the loop's goroutine.
type stateRecorder struct {
	path    string
	logf    func(string, ...any)
	written *State // what the file says; nil until this watch wrote it
	failing bool
}

func newStateRecorder(stateDir string, logf func(string, ...any)) *stateRecorder {
	return &stateRecorder{path: filepath.Join(stateDir, StateFileName), logf: logf}
}

// cycle records a finished reconcile when it changes the state the file says.
func (r *stateRecorder) cycle(dir string, c Cycle, at time.Time) {
	cs := CycleState{At: at.UTC(), Trigger: c.Trigger.String(), Outcome: c.Outcome}
	switch c.Outcome {
	case OutcomeOK, OutcomeNoop:
	case OutcomeInvalid:
		cs.Problems = problems(dir, c.Err)
	default:
		if c.Err != nil {
			cs.Reason = oneLine(c.Err.Error())
		}
	}
	if w := r.written; w != nil && w.Cycle.Outcome == cs.Outcome && w.Cycle.Reason == cs.Reason && slices.Equal(w.Cycle.Problems, cs.Problems) {
		return
	}
	next := State{PID: os.Getpid(), Cycle: cs}
	if r.written != nil {
		next.Lead = r.written.Lead
	}
	r.write(next)
}

// lead records this watch's part in leading the mesh when it changed: whether it leads, who
// does, or how far its store is behind (At alone does not count: a standby looks every second).
func (r *stateRecorder) lead(ls LeadState) {
	ls.At, ls.Since = ls.At.UTC(), ls.Since.UTC()
	var next State
	if r.written != nil {
		next = *r.written
		if w := r.written.Lead; w != nil && w.Leading == ls.Leading && w.Leader == ls.Leader && w.Behind == ls.Behind {
			return
		}
	}
	next.PID, next.StoppedAt, next.Lead = os.Getpid(), time.Time{}, &ls
	r.write(next)
}

// stopped says in the file that this watch stopped, when it wrote the file; a file another
// watch left is that watch's to answer for.
func (r *stateRecorder) stopped(at time.Time) {
	if r.written == nil {
		return
	}
	s := *r.written
	s.StoppedAt = at.UTC()
	r.write(s)
}

func (r *stateRecorder) write(s State) {
	data, _ := json.MarshalIndent(s, "", "  ")
	if err := atomicfile.Write(r.path, data); err != nil {
		if !r.failing {
			r.logf("the state of the last reconcile could not be recorded for meshctl status; trying again at the next reconcile: %v", err)
		}
		r.failing = true
		return
	}
	r.failing = false
	r.written = &s
}

// oneLine puts an error's text on one line: its lines joined with "; ", any other control
// character a space, so a reason shows as one row of `meshctl status`.
func oneLine(s string) string {
	lines := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	for i, l := range lines {
		lines[i] = strings.Map(func(r rune) rune {
			if unicode.IsControl(r) {
				return ' '
			}
			return r
		}, strings.TrimSpace(l))
	}
	return strings.Join(lines, "; ")
}
