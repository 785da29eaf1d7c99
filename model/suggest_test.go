package model_test

import (
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
