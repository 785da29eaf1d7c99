package plan

import (
	"bytes"
	"strings"
	"testing"
	"unicode"

	"github.com/meshbus/meshctl/model"
)

// What a plan shows came from the bus (a conflicting object's name and fields, a live
// consumer's filter) or the description: the text and the Markdown print it escaped as
// watch's log does, never an ESC or BEL byte a terminal would obey. The text's own colours
// stay.
func TestPlanEscapesWhatCameFromTheBus(t *testing.T) {
	t.Parallel()
	evil := "evil\x1b[2K\x1b[1A\a\u202e"
	p := &Plan{
		Changes: []Change{
			{Kind: KindConsumer, Stream: "S" + evil, Name: "c" + evil, Action: Conflict, Reason: "not meshctl's: " + evil,
				Risk: RiskDataLoss, Refused: "refused " + evil,
				Fields: []FieldChange{{Field: "filter" + evil, Before: "mesh." + evil, After: "mesh.ok"}}},
			{Kind: KindAccounts, Name: "accounts", Action: Update, Reason: "permissions change",
				Users: []UserChange{{User: "u" + evil, Action: Update, PublishAdded: []string{"p." + evil}, SubscribeRemoved: []string{"s." + evil}}}},
		},
		Holders: []HolderMove{{Seat: "seat" + evil, To: &model.Instance{Node: "n" + evil, Module: "m"}}},
	}
	for _, color := range []bool{false, true} {
		var b bytes.Buffer
		if err := p.Text(&b, color); err != nil {
			t.Fatal(err)
		}
		checkEscaped(t, "Text", b.String(), color)
	}
	var md bytes.Buffer
	if err := p.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	checkEscaped(t, "Markdown", md.String(), false)
}

func checkEscaped(t *testing.T, what, out string, color bool) {
	t.Helper()
	if color {
		// The palette's own sequences are the only ones left.
		for _, code := range []string{"31", "32", "33", "1", "0"} {
			out = strings.ReplaceAll(out, "\x1b["+code+"m", "")
		}
	}
	if i := strings.IndexFunc(out, func(r rune) bool { return r != '\n' && (unicode.IsControl(r) || r == '\u202e') }); i >= 0 {
		t.Errorf("%s (color %v) printed a control character at byte %d:\n%q", what, color, i, out)
	}
	if !strings.Contains(out, `evil\x1b[2K\x1b[1A\a\u202e`) && !strings.Contains(out, `evil\\x1b\[2K\\x1b\[1A\\a\\u202e`) {
		t.Errorf("%s (color %v) does not show the name escaped:\n%s", what, color, out)
	}
}
