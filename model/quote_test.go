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

	"github.com/meshbus/meshctl/internal/printable"
)

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
				if n := utf8.RuneCountInString(v); n > printable.MaxQuoted+1 || n == printable.MaxQuoted+1 && !strings.HasSuffix(v, "…") {
					t.Errorf("%s quotes a value of %d characters, more than the cap of %d", where, n, printable.MaxQuoted)
				}
			}
		}
	}
}
