package model

import (
	"strings"

	"github.com/meshbus/meshctl/internal/printable"
)

// plainText makes text the model did not write (a YAML parser's message, which may quote
// the input) safe to show the way printable.Quote makes a value safe, without adding quotes.
func plainText(s string) string {
	q := printable.Quote(s)
	return strings.TrimSuffix(q[1:], "\"")
}
