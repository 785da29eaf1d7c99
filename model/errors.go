package model

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/meshbus/meshctl/internal/printable"
)

// Diagnostic is one problem with the description, at the place an operator fixes it.
type Diagnostic struct {
	Pos     Pos    `json:"pos"`
	Message string `json:"message"`
}

func (d Diagnostic) String() string { return d.Pos.String() + ": " + d.Message }

// ErrInvalid is wrapped by every load error that is about the description itself (as
// opposed to a directory that cannot be read), so callers can tell "fix your YAML" from
// "something is wrong with this machine".
var ErrInvalid = errors.New("the mesh description is invalid")

// MaxDiagnostics is how many problems one load reports. Past a hundred, the first ones are
// what an operator fixes next (most often a single edit broke everything after it); a
// complete list of eight thousand helps nobody and costs every log, comment and CI page.
const MaxDiagnostics = 100

// LoadError carries the problems of one load, sorted by position: the first MaxDiagnostics
// of them, and how many there were in all.
type LoadError struct {
	Diagnostics []Diagnostic
	// Total counts every problem found, Diagnostics being the first of them.
	Total int
}

func (e *LoadError) Error() string {
	lines := make([]string, len(e.Diagnostics), len(e.Diagnostics)+1)
	for i, d := range e.Diagnostics {
		lines[i] = d.String()
	}
	if more := e.Omitted(); more > 0 {
		lines = append(lines, fmt.Sprintf("… and %d more problem(s)", more))
	}
	return strings.Join(lines, "\n")
}

// Omitted is how many problems were found beyond those in Diagnostics.
func (e *LoadError) Omitted() int { return max(0, e.Total-len(e.Diagnostics)) }

// Unwrap lets errors.Is(err, ErrInvalid) recognise a description problem.
func (e *LoadError) Unwrap() error { return ErrInvalid }

// diagnostics collects problems during one load.
type diagnostics []pending

// pending is a problem as found: its message, and for a name that resolves to nothing, the
// names it might have meant. The suggestion is worked out only for the problems reported,
// so eight thousand dangling references cost eight thousand map look-ups, not eight
// thousand scans of every name.
type pending struct {
	pos        Pos
	head, tail string // the message, with "did you mean" between head and tail
	name       string
	candidates func() []string
}

// add records a problem. Values from the description go into the message through
// printable.Quote.
func (d *diagnostics) add(p Pos, format string, args ...any) {
	*d = append(*d, pending{pos: p, head: fmt.Sprintf(format, args...)})
}

// addUnknown records a problem about a name that matches nothing, with "did you mean" the
// closest of candidates placed after head.
func (d *diagnostics) addUnknown(p Pos, name string, candidates func() []string, head, tail string) {
	*d = append(*d, pending{pos: p, head: head, tail: tail, name: name, candidates: candidates})
}

// err sorts the problems, keeps the first MaxDiagnostics and finishes their messages.
func (d diagnostics) err(ctx context.Context) error {
	if len(d) == 0 {
		return nil
	}
	sorted := append([]pending(nil), d...)
	sort.SliceStable(sorted, func(i, j int) bool {
		a, b := sorted[i].pos, sorted[j].pos
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
	shown := sorted[:min(len(sorted), MaxDiagnostics)]
	out := make([]Diagnostic, len(shown))
	for i, p := range shown {
		if err := ctx.Err(); err != nil {
			return err
		}
		msg := p.head
		if p.candidates != nil {
			msg += didYouMean(p.name, p.candidates())
		}
		out[i] = Diagnostic{Pos: p.pos, Message: msg + p.tail}
	}
	return &LoadError{Diagnostics: out, Total: len(sorted)}
}

// Suggest returns the candidate closest to name by edit distance, or "" when none is close
// enough to be the likely intent. Errors use it to say "did you mean".
func Suggest(name string, candidates []string) string {
	// A third of the name may be wrong: enough for a typo, not enough to turn "mesh" into
	// "bus".
	best, bestDist := "", max(1, len(name)/3)+1
	for _, c := range candidates {
		if d := editDistanceWithin(name, c, bestDist-1); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

func didYouMean(name string, candidates []string) string {
	if s := Suggest(name, candidates); s != "" {
		return fmt.Sprintf(" (did you mean %s?)", printable.Quote(s))
	}
	return ""
}

// maxCompared bounds the names compared by distance: longer ones match only exactly.
const maxCompared = 64

// editDistanceWithin counts the edits between a and b, a swap of two neighbours being one
// edit (optimal string alignment): "tow" is one slip from "two", as a person sees it. It
// gives up as soon as the count must exceed limit, returning limit+1, so checking a name
// against a thousand that are nothing like it costs a few comparisons each.
func editDistanceWithin(a, b string, limit int) int {
	if a == b {
		return 0
	}
	if len(a) > maxCompared || len(b) > maxCompared || abs(len(a)-len(b)) > limit {
		return limit + 1
	}
	// Three rows of the table: the one being filled and the two before it (a swap reaches
	// back two).
	var rows [3][maxCompared + 1]int
	prev2, prev, cur := &rows[0], &rows[1], &rows[2]
	for j := 0; j <= len(b); j++ {
		prev[j] = j
	}
	prevMin := 0
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		rowMin := i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			v := min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				v = min(v, prev2[j-2]+1)
			}
			cur[j] = v
			rowMin = min(rowMin, v)
		}
		// Every later cell builds on this row, or on the previous one plus a swap.
		if rowMin > limit && prevMin+1 > limit {
			return limit + 1
		}
		prevMin = rowMin
		prev2, prev, cur = prev, cur, prev2
	}
	return min(prev[len(b)], limit+1)
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
