package model

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"
)

// malformed reports a file yaml.v3 cannot parse, at the place to fix it. yaml.v3 gives no
// position at all for a byte it cannot decode and only a line (sometimes the one before)
// for a tab, and its words for a tab ("found character that cannot start any token") do not
// say tab; the model finds the character itself.
func (d *decoder) malformed(data []byte, err error) {
	line := yamlErrorLine(err)
	msg := yamlErrorText(err)
	if p, what, ok := badCharacter(data); ok {
		d.diags.add(Pos{File: d.file, Line: p.Line, Col: p.Col}, "malformed YAML: %s; a mesh file is UTF-8 text without control characters other than tab and line breaks", what)
		return
	}
	// The scanner's "cannot start any token" is on the tab's own line; "violates
	// indentation" is reported at the start of the value the tab's line continues.
	tabProblem := strings.Contains(msg, "tab character")
	if tabProblem || strings.Contains(msg, "cannot start any token") {
		last := line
		if tabProblem {
			last = 0 // any later line
		}
		if l, c, ok := indentTab(data, line, last); ok {
			d.diags.add(Pos{File: d.file, Line: l, Col: c}, "malformed YAML: a tab in the indentation; YAML indents with spaces only, so replace the tab with spaces")
			return
		}
	}
	d.diags.add(Pos{File: d.file, Line: line, Col: 1}, "malformed YAML: %s", plainText(msg))
}

// badCharacter finds the first byte sequence that is not UTF-8 or a character YAML does not
// allow in a file (its c-printable set), and says what it is.
func badCharacter(data []byte) (Pos, string, bool) {
	line, col := 1, 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			return Pos{Line: line, Col: col}, fmt.Sprintf("the byte 0x%02X is not UTF-8", data[i]), true
		case r == 0:
			return Pos{Line: line, Col: col}, "a NUL byte", true
		case !yamlPrintable(r) && !(r == 0xFEFF && i == 0):
			return Pos{Line: line, Col: col}, fmt.Sprintf("the control character U+%04X", r), true
		}
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
		i += size
	}
	return Pos{}, "", false
}

// yamlPrintable is YAML 1.2's c-printable: what a YAML file may hold, tab and line breaks
// included.
func yamlPrintable(r rune) bool {
	switch {
	case r == '\t', r == '\n', r == '\r', r == 0x85:
		return true
	case r >= 0x20 && r <= 0x7E, r >= 0xA0 && r <= 0xD7FF, r >= 0xE000 && r <= 0xFFFD, r >= 0x10000 && r <= 0x10FFFF:
		return true
	}
	return false
}

// indentTab finds the first tab in the indentation (the blanks and `-` indicators that
// start a line) on lines first through last, or through the end when last is 0, and
// returns its line and column.
func indentTab(data []byte, first, last int) (int, int, bool) {
	for n, text := range bytes.Split(data, []byte("\n")) {
		line := n + 1
		if line < first {
			continue
		}
		if last > 0 && line > last {
			break
		}
		for i, c := range text {
			if c == '\t' {
				return line, i + 1, true
			}
			if c != ' ' && c != '-' {
				break
			}
		}
	}
	return 0, 0, false
}
