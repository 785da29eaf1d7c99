package model

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/meshbus/meshctl/internal/redact"
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

// LoadError carries every problem of one load, sorted by position.
type LoadError struct {
	Diagnostics []Diagnostic
}

func (e *LoadError) Error() string {
	lines := make([]string, len(e.Diagnostics))
	for i, d := range e.Diagnostics {
		lines[i] = d.String()
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.Is(err, ErrInvalid) recognise a description problem.
func (e *LoadError) Unwrap() error { return ErrInvalid }

// diagnostics collects problems during one load.
type diagnostics []Diagnostic

func (d *diagnostics) add(p Pos, format string, args ...any) {
	// Messages quote values back, and a URL written where it does not belong (`bus:
	// nats://user:pw@host`) would otherwise put its password in the error.
	msg := redact.Text(fmt.Sprintf(format, args...))
	*d = append(*d, Diagnostic{Pos: p, Message: msg})
}

func (d diagnostics) err() error {
	if len(d) == 0 {
		return nil
	}
	out := append([]Diagnostic(nil), d...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i].Pos, out[j].Pos
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
	return &LoadError{Diagnostics: out}
}

// Suggest returns the candidate closest to name by edit distance, or "" when none is close
// enough to be the likely intent. Errors use it to say "did you mean".
func Suggest(name string, candidates []string) string {
	// A third of the name may be wrong: enough for a typo, not enough to turn "mesh" into
	// "bus".
	best, bestDist := "", max(1, len(name)/3)+1
	for _, c := range candidates {
		if d := editDistance(name, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

func didYouMean(name string, candidates []string) string {
	if s := Suggest(name, candidates); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return ""
}

// editDistance counts the edits between a and b, a swap of two neighbours being one edit
// (optimal string alignment): "tow" is one slip from "two", as a person sees it.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		if a == b {
			return 0
		}
		return 1 << 20
	}
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
