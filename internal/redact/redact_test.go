package redact

import (
	"strings"
	"testing"
)

// Each password here defeated the pattern meshctl used before: a space, an '@', a quote, a
// '/' (which ends the authority for a parser that then fails on the port), a scheme-less
// value.
func TestURLNeverPrintsUserinfo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ raw, secret, want string }{
		{"nats://admin:hunter2 x@host:4222", "hunter2", "nats://…"},
		{"nats://admin:p@ssw0rd@host:4222", "ssw0rd", "nats://host:4222"},
		{`nats://admin:pa"ss@host:4222`, `pa"ss`, "nats://…"},
		{"nats://admin:pa/ss@host:4222", "pa", "nats://…"},
		{"nats://admin:s3cret@127.0.0.1:4301", "s3cret", "nats://127.0.0.1:4301"},
		{"tls://controller:s3cret@bus.example:4443/path?password=s3cret#s3cret", "s3cret", "tls://bus.example:4443"},
		{"nats://controller:s3cret@127.0.0.1:bad%", "s3cret", "nats://…"},
		{"admin:s3cret@127.0.0.1:4301", "s3cret", "127.0.0.1:4301"},
		{"admin:s3cret@host", "s3cret", "host"},
		{"adm:in://s3cret@host", "s3cret", "…"},
		{"127.0.0.1:4222", "", "127.0.0.1:4222"},
		{"127.0.0.1:-1", "", "127.0.0.1:-1"},
		{"s3cret@127.0.0.1:-1", "s3cret", "127.0.0.1:-1"},
		{"[::1]:4222", "", "[::1]:4222"},
		{"nats://127.0.0.1:4222", "", "nats://127.0.0.1:4222"},
	} {
		got := URL(tc.raw)
		if got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.raw, got, tc.want)
		}
		if tc.secret != "" && strings.Contains(got, tc.secret) {
			t.Errorf("URL(%q) = %q prints the password", tc.raw, got)
		}
	}
}

func TestTextRedactsEveryURLsUserinfo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{`bus must be a mapping, not "nats://admin:hunter2 x@host"`, `bus must be a mapping, not "nats://REDACTED@host"`},
		{`not "nats://admin:p@ssw0rd@host"`, `not "nats://REDACTED@host"`},
		{`not "nats://admin:pa\"ss@host"`, `not "nats://REDACTED@host"`},
		{"a nats://u:pw@h and tls://v:pw2@k", "a nats://REDACTED@k"},
		{"nats://host:4222 is fine", "nats://host:4222 is fine"},
		{"one nats://u:pw@a\ntwo nats://b", "one nats://REDACTED@a\ntwo nats://b"},
	} {
		if got := Text(tc.in); got != tc.want {
			t.Errorf("Text(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}
