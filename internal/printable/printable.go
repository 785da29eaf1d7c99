package printable

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Text returns s with every character that is not printable — control characters such as
// ESC, BEL, a line break or a tab, format characters such as a bidirectional override — and
// every byte that is not UTF-8 escaped as Go spells them in a quoted string (\x1b, \a, \n,
// \u202e, \xff): what watch's log shows for the same value. Printable text is returned as it
// is.
//
// A terminal obeys the control sequences in what it prints: a refused subject holding
// "\x1b[2K\x1b[1A" would erase and overwrite the line above it, and a newline forges a line
// of its own; in a table, a tab moves every column after it.
func Text(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return r == utf8.RuneError || !strconv.IsPrint(r) }) < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])|0x100, 16)[1:])
		case strconv.IsPrint(r):
			b.WriteString(s[i : i+size])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}
