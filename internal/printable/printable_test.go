package printable

import (
	"strings"
	"testing"
	"unicode"
)

func TestText(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"mesh.mod.shop.event.paid":                  "mesh.mod.shop.event.paid",
		"mesh.evil\x1b[2K\x1b[1A\aowned":            `mesh.evil\x1b[2K\x1b[1A\aowned`,
		"two\nlines\tand a tab":                     `two\nlines\tand a tab`,
		"bidi \u202eevil\u202c":                     `bidi \u202eevil\u202c`,
		"C1 \u009b2J":                               `C1 \u009b2J`,
		"not UTF-8 \xff\x9b":                        `not UTF-8 \xff\x9b`,
		"kept: é → … \"quoted\" back\\slash \uFFFD": "kept: é → … \"quoted\" back\\slash \uFFFD",
		"": "",
	} {
		if got := Text(in); got != want {
			t.Errorf("Text(%q) = %q, want %q", in, got, want)
		}
	}
}

// Whatever the input, the output holds no control character and is UTF-8.
func FuzzText(f *testing.F) {
	f.Add("mesh.evil\x1b[2K\x1b[1A\a")
	f.Add("\xff\xfe\u202e")
	f.Fuzz(func(t *testing.T, s string) {
		out := Text(s)
		if !strings.ContainsFunc(out, func(r rune) bool { return unicode.IsControl(r) || r == '\u202e' }) && strings.ToValidUTF8(out, "") == out {
			return
		}
		t.Errorf("Text(%q) = %q holds a control character or invalid UTF-8", s, out)
	})
}
