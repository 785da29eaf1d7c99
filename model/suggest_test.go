package model_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/meshbus/meshctl/model"
)

func TestSuggest(t *testing.T) {
	t.Parallel()
	topKeys := []string{"bus", "controller", "nodes", "seats", "modules", "holders"}
	busKeys := []string{"url", "fingerprint", "accounts_file", "listen", "replicas", "reload", "events_max_age"}
	long := strings.Repeat("a", 65)
	for _, tc := range []struct {
		name       string
		in         string
		candidates []string
		want       string
	}{
		{"exact match", "nodes", topKeys, "nodes"},
		{"missing letter", "node", topKeys, "nodes"},
		{"extra letter", "seatss", topKeys, "seats"},
		{"wrong letter", "modulez", topKeys, "modules"},
		{"missing letter inside a long key", "acounts_file", busKeys, "accounts_file"},
		{"swapped letters", "relaod", busKeys, "reload"},
		{"case differs", "Nodes", topKeys, "nodes"},
		{"nothing close", "password", busKeys, ""},
		{"unrelated long word", "configuration", topKeys, ""},
		{"no candidates", "nodes", nil, ""},
		{"closest wins over first", "printr", []string{"print-queue", "printer"}, "printer"},
		{"tie goes to the first candidate", "printr", []string{"printer", "print"}, "printer"},
		{"tie goes to the first candidate, reversed", "printr", []string{"print", "printer"}, "print"},
		// The bound is a third of the name plus one, exclusive: a slip suggests, a different
		// word does not. A swap of neighbours is one slip.
		{"one edit of four letters", "abcd", []string{"abxd"}, "abxd"},
		{"two edits of four letters", "abcd", []string{"axyd"}, ""},
		{"a swap is one edit", "tow", []string{"two"}, "two"},
		{"a different word", "mesh", []string{"bus"}, ""},
		{"long names match only exactly", long, []string{long + "b", long}, long},
		{"long names are not compared by distance", long, []string{long[1:] + "b"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := model.Suggest(tc.in, tc.candidates); got != tc.want {
				t.Errorf("Suggest(%q, %q) = %q, want %q", tc.in, tc.candidates, got, tc.want)
			}
		})
	}
}

// Suggest gives up on a candidate as soon as it cannot be close enough; what it picks must
// be what comparing every candidate in full picks.
func TestSuggestMatchesTheFullComparison(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	word := func() string {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = "abcde-"[rng.IntN(6)]
		}
		return string(b)
	}
	for range 20000 {
		name := word()
		candidates := make([]string, rng.IntN(6))
		for i := range candidates {
			candidates[i] = word()
		}
		want, bestDist := "", max(1, len(name)/3)+1
		for _, c := range candidates {
			if d := fullDistance(name, c); d < bestDist {
				want, bestDist = c, d
			}
		}
		if got := model.Suggest(name, candidates); got != want {
			t.Fatalf("Suggest(%q, %q) = %q, want %q", name, candidates, got, want)
		}
	}
}

// fullDistance is the optimal string alignment distance, every cell of the table filled.
func fullDistance(a, b string) int {
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
