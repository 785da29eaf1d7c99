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
		// The bound is len(name)/2+2 edits, exclusive: 3 edits to a 4-letter name still
		// suggest, 4 do not.
		{"three edits of four letters", "abcd", []string{"wxyd"}, "wxyd"},
		{"four edits of four letters", "abcd", []string{"wxyz"}, ""},
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
