// Package redact cuts what may carry a password out of addresses before they are printed.
// A bus address is quoted by errors, logs and memberships; written with its userinfo
// (`nats://admin:pw@host`), or malformed around it, it would put the password there too.
// Redaction parses rather than pattern-matches: a password may hold a space, an '@', a
// quote or a '/', and a pattern that stops at any of them prints the rest.
package redact

import (
	"net/url"
	"strings"
)

// Elided stands for the part of a value that is not printed.
const Elided = "…"

// URL returns what of an address may be printed. For scheme://… it is the scheme and the
// host[:port], never the userinfo, path, query or fragment; for host:port (a listen
// address) the host and port alone. A value that does not parse prints as its scheme and
// Elided, or Elided alone: where parsing fails nobody can tell which part is a password.
func URL(raw string) string {
	scheme, rest, hasScheme := strings.Cut(raw, "://")
	if !hasScheme {
		rest, scheme = raw, ""
	}
	if hasScheme && !validScheme(scheme) {
		return Elided
	}
	// Port -1 is the embedded bus's "any free port"; the URL parser knows only digits.
	anyPort := strings.HasSuffix(rest, ":-1")
	if anyPort {
		rest = strings.TrimSuffix(rest, "-1") + "0"
	}
	// Parsed with a placeholder scheme when there is none, so host:port reads as a host.
	u, err := url.Parse("x://" + rest)
	if err != nil || u.Host == "" || strings.ContainsAny(u.Host, "@ \t\r\n\"") {
		if hasScheme {
			return scheme + "://" + Elided
		}
		return Elided
	}
	host := u.Host
	if anyPort {
		host = strings.TrimSuffix(host, "0") + "-1"
	}
	if hasScheme {
		return scheme + "://" + host
	}
	return host
}

// validScheme reports whether s is a URL scheme (RFC 3986: a letter, then letters, digits,
// '+', '-' and '.'), so that a value such as "user:pw@host://x" is not read as one.
func validScheme(s string) bool {
	for i, r := range s {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z':
		case i > 0 && ('0' <= r && r <= '9' || r == '+' || r == '-' || r == '.'):
		default:
			return false
		}
	}
	return s != ""
}

// Text redacts the userinfo of every URL in a line of free text, such as a message that
// quotes a value back. Where a URL ends in free text cannot be told (a password may hold a
// space or a quote), so everything from its "://" to the last '@' of the line goes.
func Text(s string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "://")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i+3])
		s = s[i+3:]
		line := s
		if j := strings.IndexAny(s, "\r\n"); j >= 0 {
			line = s[:j]
		}
		if at := strings.LastIndex(line, "@"); at >= 0 {
			b.WriteString("REDACTED@")
			s = s[at+1:]
		}
	}
}
