package printable

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/meshbus/meshctl/internal/redact"
)

// MaxQuoted is how many characters of a value a message quotes. Every name and reference
// the model accepts fits; what does not is an error anyway, and the start is enough to find
// it. A message is printed by every command, logged by watch and kept in the store, so a
// 50 MB value quoted whole would be 50 MB everywhere.
const MaxQuoted = 80

// Quote returns a value as a message shows it: in double quotes, with control characters
// and invalid UTF-8 escaped (so it is one line that cannot forge another in a log or a CI
// annotation), cut to MaxQuoted characters with "…", and with anything in the shape of a
// URL's user:password@ replaced by REDACTED. Every message that quotes a value from outside
// meshctl — the description, a subject or a reply a node sent — quotes it here.
func Quote(s string) string {
	s = redactUserinfo(s)
	cut := false
	if utf8.RuneCountInString(s) > MaxQuoted {
		n := 0
		for i := range s {
			if n == MaxQuoted {
				s, cut = s[:i], true
				break
			}
			n++
		}
	}
	q := strconv.Quote(s)
	if cut {
		q = q[:len(q)-1] + "…\""
	}
	return q
}

// redactUserinfo hides what a value holds before its last "@" when that looks like a
// credential: after a scheme (`nats://admin:pw@host`), or as user:password without one.
// The last "@" rather than the first, and no parsing, because a password may itself hold
// "@", a space or a quote, and a URL parser gives up on exactly those values.
func redactUserinfo(s string) string {
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return s
	}
	if strings.Contains(s, "://") {
		return redact.Text(s)
	}
	if strings.Contains(s[:at], ":") {
		return "REDACTED" + s[at:]
	}
	return s
}
