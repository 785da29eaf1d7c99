package model

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// wrongValue is, for each kind of value, one the loader must refuse, in YAML's flow style.
var wrongValue = map[valueKind]string{
	scalarValue:  "{not: a-name}",
	namesValue:   "{not: a-list}",
	scalarsValue: "{not: a-name}",
	integerValue: "many",
	boolValue:    "perhaps",
	sectionValue: "[not, a-mapping]",
	listValue:    "{not: a-list}",
	reloadValue:  "[not, a-mapping]",
	// A size without a unit's meaning, a week written as days, a count of none, a word not
	// in the list, a duration that is not a list.
	sizeValue:      "1GB5",
	durationValue:  "7d",
	countValue:     "0",
	enumValue:      "sometimes",
	durationsValue: "10s",
}

// rightValue is a value of the kinds a section may require.
var rightValue = map[valueKind]string{scalarValue: "x", namesValue: "[x]"}

// The tables in schema.go are the loader's as much as the schema's: every key they list must be
// one the loader reads and checks, not one it lets through unread. For every key of every
// section, a description giving that key a value of the wrong kind is refused, with a problem on
// the value's own line; a key in the tables that no decoder reads would be accepted, and fail
// here.
func TestLoaderReadsEveryKeyOfTheSchema(t *testing.T) {
	t.Parallel()
	var visit func(path []string, prefix string, s *section)
	visit = func(path []string, prefix string, s *section) {
		for _, k := range s.keys {
			what := strings.Join(append(path, k.name), ".")
			// The value sits on the last line, after the keys its section requires (whose
			// absence would be reported on the mapping's first line, perhaps the value's).
			var b strings.Builder
			b.WriteString(prefix)
			indent := strings.Repeat(" ", len(path)*4)
			for _, r := range s.keys {
				if r.required && r.name != k.name {
					fmt.Fprintf(&b, "%s%s: %s\n", indent, r.name, rightValue[r.kind])
				}
			}
			fmt.Fprintf(&b, "%s%s: %s\n", indent, k.name, wrongValue[k.kind])
			line := strings.Count(b.String(), "\n")
			_, err := Parse([]File{{Name: "mesh.yaml", Data: []byte(b.String())}})
			var lerr *LoadError
			if !errors.As(err, &lerr) {
				t.Errorf("%s given %s: the loader accepts it (is the key read at all?):\n%s", what, wrongValue[k.kind], b.String())
				continue
			}
			found := false
			for _, d := range lerr.Diagnostics {
				if d.Pos.Line == line {
					found = true
				}
			}
			if !found {
				t.Errorf("%s given %s: no problem on line %d:\n%s\n%v", what, wrongValue[k.kind], line, b.String(), err)
			}
			// Into the key's own section, if it has one.
			switch k.kind {
			case sectionValue, reloadValue:
				visit(append(path, k.name), prefix+fmt.Sprintf("%s%s:\n", indent, k.name), k.section)
			case listValue:
				visit(append(path, k.name), prefix+fmt.Sprintf("%s%s:\n%s  -\n", indent, k.name, indent), k.section)
			}
		}
	}
	visit(nil, "", topSection)
}
