package printable

import (
	"strings"
	"testing"
)

func TestQuote(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", MaxQuoted)
	for _, tc := range []struct{ name, in, want string }{
		{"plain", "shop/order.placed", `"shop/order.placed"`},
		{"at the cap", long, `"` + long + `"`},
		{"past the cap", long + "bc", `"` + long + `…"`},
		{"cut by characters, not bytes", strings.Repeat("é", MaxQuoted+1), `"` + strings.Repeat("é", MaxQuoted) + `…"`},
		{"a line break", "one\nmesh.yaml:1:1: forged", `"one\nmesh.yaml:1:1: forged"`},
		{"a terminal escape", "one\x1b[2J", `"one\x1b[2J"`},
		{"a NUL", "o\x00ne", `"o\x00ne"`},
		{"invalid UTF-8", "o\xffne", `"o\xffne"`},
		{"a right-to-left override", "one\u202eowt", `"one\u202eowt"`},
		{"a quote", `say "hi"`, `"say \"hi\""`},
		{"userinfo of a URL", "nats://admin:hunter2@host:4222", `"nats://REDACTED@host:4222"`},
		{"a password with a space", "nats://admin:hunter2 x@host", `"nats://REDACTED@host"`},
		{"a password with an @", "nats://admin:p@ssw0rd@host", `"nats://REDACTED@host"`},
		{"a password with a quote", `nats://admin:pa"ss@host`, `"nats://REDACTED@host"`},
		{"a token as the user", "tls://s3cr3t@host", `"tls://REDACTED@host"`},
		{"user:password without a scheme", "admin:hunter2@host:4222", `"REDACTED@host:4222"`},
		{"an @ that is no credential", "team@example", `"team@example"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Quote(tc.in); got != tc.want {
				t.Errorf("Quote(%q) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}
