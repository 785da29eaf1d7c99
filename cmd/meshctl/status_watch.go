package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"text/tabwriter"
	"time"

	"github.com/meshbus/meshctl/internal/printable"
	"github.com/meshbus/meshctl/watch"
)

// watchSeen is what status says of the state `meshctl watch` recorded (watch.StateFileName):
// the cycle that brought it, and whether that watch still runs.
type watchSeen struct {
	watch.CycleState
	PID int `json:"pid"`
	// Running is whether the watch that wrote it still runs: false, it is the state a watch
	// that stopped (StoppedAt) or was killed left behind.
	Running   bool      `json:"running"`
	StoppedAt time.Time `json:"stopped_at,omitzero"`
	// Lead is, on a bus that keeps the store, whether that watch leads or stands by.
	Lead *watch.LeadState `json:"lead,omitempty"`
}

// readWatchState reads the state watch recorded in the state directory; nil when none did.
func readWatchState(stateDir string) (*watchSeen, error) {
	s, err := watch.ReadState(stateDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &watchSeen{CycleState: s.Cycle, PID: s.PID, Running: s.Running(), StoppedAt: s.StoppedAt, Lead: s.Lead}, nil
}

// watchOutcomes say what each outcome means, as status shows it.
var watchOutcomes = map[watch.Outcome]string{
	watch.OutcomeOK:       "changes applied; the bus is in sync",
	watch.OutcomeNoop:     "the bus is in sync",
	watch.OutcomeInvalid:  "the description does not validate; nothing was applied and the last good state stays live",
	watch.OutcomeRefused:  "the plan would lose data or delete most of the mesh; nothing was applied (review it with meshctl diff)",
	watch.OutcomeConflict: "objects meshctl does not own are in the way; everything else was applied (meshctl diff names them)",
	watch.OutcomeError:    "the reconcile failed and is retried",
}

// printWatch writes, on a line of status's heading (w), the state watch's reconciles left and
// whether the watch that recorded it still runs; then, on out, its problems or its reason.
func printWatch(out io.Writer, w *tabwriter.Writer, s *watchSeen) {
	if s == nil {
		fmt.Fprintln(w, "Watch:\tno reconcile recorded (meshctl watch records its state here while it runs)")
		_ = w.Flush()
		return
	}
	who := fmt.Sprintf("meshctl watch pid %d", s.PID)
	switch {
	case !s.StoppedAt.IsZero():
		who += fmt.Sprintf(", which stopped at %s: no watch runs now", s.StoppedAt.Local().Format(time.DateTime))
	case !s.Running:
		who += ", which is no longer running (it did not say it stopped: killed or crashed)"
	}
	if s.Outcome == "" {
		fmt.Fprintf(w, "Watch:\tno reconcile of its own recorded\n")
	} else {
		fmt.Fprintf(w, "Watch:\t%s since %s (trigger %s): %s\n", printable.Text(string(s.Outcome)), s.At.Local().Format(time.DateTime),
			printable.Text(s.Trigger), watchOutcomes[s.Outcome])
	}
	fmt.Fprintf(w, "\trecorded by %s\n", who)
	if l := s.Lead; l != nil {
		switch {
		case l.Leading:
			fmt.Fprintf(w, "Lead:\tthis watch leads the mesh, since %s\n", l.Since.Local().Format(time.DateTime))
		case l.Leader != "":
			fmt.Fprintf(w, "Lead:\tthis watch stands by; %s leads\n", printable.Text(l.Leader))
			fmt.Fprintf(w, "\tthis store was %d message(s) behind its copy on the bus at %s\n", l.Behind, l.At.Local().Format(time.DateTime))
		default:
			fmt.Fprintf(w, "Lead:\tthis watch stands by; who leads could not be read\n")
		}
	}
	_ = w.Flush()
	if s.Reason != "" {
		fmt.Fprintf(out, "  reason: %s\n", printable.Text(s.Reason))
	}
	if len(s.Problems) > 0 {
		fmt.Fprintln(out, "  problems:")
		for _, p := range s.Problems {
			fmt.Fprintf(out, "    %s\n", printable.Text(p))
		}
	}
}
