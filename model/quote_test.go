package model_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/meshbus/meshctl/model"
)

func TestQuote(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", model.MaxQuoted)
	for _, tc := range []struct{ name, in, want string }{
		{"plain", "shop/order.placed", `"shop/order.placed"`},
		{"at the cap", long, `"` + long + `"`},
		{"past the cap", long + "bc", `"` + long + `…"`},
		{"cut by characters, not bytes", strings.Repeat("é", model.MaxQuoted+1), `"` + strings.Repeat("é", model.MaxQuoted) + `…"`},
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
			if got := model.Quote(tc.in); got != tc.want {
				t.Errorf("Quote(%q) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}

// quoted finds the double-quoted values of a message, as Quote writes them.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// No golden output quotes a value longer than the cap, holds a control character, or runs
// to a length no message of the model has: whatever a description holds, what meshctl
// prints about it is a line an operator can read and a log can keep.
func TestGoldenOutputsAreSafeToShow(t *testing.T) {
	t.Parallel()
	wants, err := filepath.Glob(filepath.Join("testdata", "*", "want.txt"))
	if err != nil || len(wants) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, path := range wants {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
			where := path + ":" + strconv.Itoa(i+1)
			if !utf8.ValidString(line) {
				t.Errorf("%s is not UTF-8", where)
			}
			for _, r := range line {
				if !unicode.IsPrint(r) {
					t.Errorf("%s holds the unprintable character %U", where, r)
					break
				}
			}
			if n := utf8.RuneCountInString(line); n > 500 {
				t.Errorf("%s is %d characters long: a value was echoed without Quote", where, n)
			}
			for _, q := range quoted.FindAllString(line, -1) {
				v, err := strconv.Unquote(q)
				if err != nil {
					continue // a quote inside a longer value's escape, not a value of its own
				}
				if n := utf8.RuneCountInString(v); n > model.MaxQuoted+1 || n == model.MaxQuoted+1 && !strings.HasSuffix(v, "…") {
					t.Errorf("%s quotes a value of %d characters, more than the cap of %d", where, n, model.MaxQuoted)
				}
			}
		}
	}
}
