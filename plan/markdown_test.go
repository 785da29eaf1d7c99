package plan

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/meshbus/meshctl/graph"
	"github.com/meshbus/meshctl/model"
)

// checkMarkdown checks the structure GitHub needs to render a comment as meant, and
// returns every problem found: each table row has as many cells (bare pipes) as its
// header, under a delimiter row, after a blank line; <details> blocks balance, with the
// blank lines GitHub needs to render Markdown inside them; every code span is closed on
// its line; a fenced block (the picture's Mermaid) opens after a blank line and is closed,
// and nothing inside it is read as Markdown; and no line holds anything shaped like a hash.
func checkMarkdown(md string) []string {
	var problems []string
	bad := func(n int, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("line %d: ", n+1)+fmt.Sprintf(format, args...))
	}
	lines := strings.Split(strings.TrimSuffix(md, "\n"), "\n")
	depth, cells := 0, 0 // cells: the header's pipe count while inside a table, else 0
	fenced := false
	for i, l := range lines {
		prev, next := "", ""
		if i > 0 {
			prev = lines[i-1]
		}
		if i+1 < len(lines) {
			next = lines[i+1]
		}
		if secret.MatchString(l) {
			bad(i, "shows a secret: %s", l)
		}
		switch {
		case fenced && l == "```":
			fenced = false
			continue
		case fenced:
			if strings.Contains(l, "```") {
				bad(i, "a fence inside a fenced block: %s", l)
			}
			continue
		case strings.HasPrefix(l, "```"):
			if !regexp.MustCompile("^```[a-z]+$").MatchString(l) || prev != "" {
				bad(i, "a fenced block must open after a blank line with its language: %s", l)
			}
			fenced = true
			continue
		}
		text, closed := outsideCode(l)
		if !closed {
			bad(i, "a code span is not closed: %s", l)
		}
		if raw := regexp.MustCompile(`(^|[^\\])<`).FindString(ourTags.ReplaceAllString(text, "")); raw != "" {
			bad(i, "raw HTML outside a code span: %s", l)
		}
		if strings.Contains(l, "<details>") {
			depth++
			if !regexp.MustCompile(`^<details><summary>[^<]*</summary>$`).MatchString(l) || next != "" {
				bad(i, "a <details> block must open with its summary on one line and a blank line after it")
			}
		}
		if strings.Contains(l, "</details>") {
			depth--
			if l != "</details>" || prev != "" || depth < 0 {
				bad(i, "</details> must stand alone after a blank line and close an open block")
			}
		}
		switch {
		case !strings.HasPrefix(l, "|"):
			cells = 0
		case cells == 0:
			cells = pipes(l)
			if prev != "" {
				bad(i, "a table must follow a blank line")
			}
			if !regexp.MustCompile(`^\|(---\|)+$`).MatchString(next) || pipes(next) != cells {
				bad(i, "a table header must be followed by a delimiter row of as many cells")
			}
		case pipes(l) != cells:
			bad(i, "%d cells where the header has %d: %s", pipes(l)-1, cells-1, l)
		}
		if strings.HasPrefix(l, "|") && !strings.HasSuffix(l, "|") {
			bad(i, "a table row must end with a pipe")
		}
	}
	if depth != 0 {
		problems = append(problems, fmt.Sprintf("%d <details> block(s) left open", depth))
	}
	if fenced {
		problems = append(problems, "a fenced block left open")
	}
	return problems
}

// pipes counts a row's cell separators as GitHub splits it: every pipe not right after a
// backslash, inside code spans too.
func pipes(row string) int {
	n := 0
	for i := range len(row) {
		if row[i] == '|' && (i == 0 || row[i-1] != '\\') {
			n++
		}
	}
	return n
}

// outsideCode returns the line without its code spans, as CommonMark reads them (outside
// a span a backslash escapes the next character; inside, nothing is escaped), and whether
// every span that opens is closed by a run of as many backticks.
func outsideCode(line string) (string, bool) {
	run := func(i int) int {
		n := 0
		for i+n < len(line) && line[i+n] == '`' {
			n++
		}
		return n
	}
	var out strings.Builder
	for i := 0; i < len(line); {
		switch line[i] {
		case '\\':
			out.WriteString(line[i:min(i+2, len(line))])
			i += 2
		case '`':
			n := run(i)
			closed := false
			for j := i + n; j < len(line); {
				if m := run(j); m > 0 {
					if m == n {
						closed, i = true, j+m
						break
					}
					j += m
					continue
				}
				j++
			}
			if !closed {
				return out.String(), false
			}
		default:
			out.WriteByte(line[i])
			i++
		}
	}
	return out.String(), true
}

func unclosedCodeSpan(line string) bool {
	_, closed := outsideCode(line)
	return !closed
}

// ourTags are the only HTML the Markdown writes; any other `<` outside code must be escaped.
var ourTags = regexp.MustCompile(`<br>|</?details>|</?summary>`)

func TestCheckMarkdownFindsBrokenMarkdown(t *testing.T) {
	t.Parallel()
	for name, md := range map[string]string{
		"a bare pipe in a cell":  "\n| A | B |\n|---|---|\n| x | y|z |\n",
		"a row short of a cell":  "\n| A | B |\n|---|---|\n| x |\n",
		"no delimiter row":       "\n| A | B |\n| x | y |\n",
		"a table after text":     "text\n| A |\n|---|\n",
		"an open details block":  "<details><summary>s</summary>\n\nbody\n",
		"details without blanks": "<details><summary>s</summary>\nbody\n</details>\n",
		"an unclosed code span":  "- `stream X\n",
		"a mismatched fence":     "- ``a`\n",
		"a hash":                 "- " + bcryptLike("x") + "\n",
		"raw HTML":               "- <script>x</script> `<b>`\n",
		"an open fence":          "\n```mermaid\nflowchart LR\n",
		"a fence after text":     "text\n```mermaid\nflowchart LR\n```\n",
	} {
		if len(checkMarkdown(md)) == 0 {
			t.Errorf("%s: not found in\n%s", name, md)
		}
	}
	if p := checkMarkdown("| A |\n|---|\n| `a\\|b` \\| c |\n\n- ``a`b`` and \\`\n\n```mermaid\n  a -->|\"x\"| b\n```\n"); len(p) > 0 {
		t.Errorf("clean Markdown reported: %v", p)
	}
}

// hostile is a plan whose strings hold everything Markdown might misread: pipes,
// backticks, HTML, emphasis, a line break. None occurs in a derived mesh today (names
// and subjects are validated), but a reason can quote a server's error, and a conflict's
// object is someone else's.
func hostile() *Plan {
	nasty := "a | b `c` ``d`` <script>x</script> **e** _f_ [g](h) \\| i\nj & k"
	from := model.Instance{Node: "one", Module: "a|b"}
	return &Plan{
		Baseline: BaselineBus,
		Changes: []Change{
			{Kind: KindStream, Name: "S|T`", Action: Conflict, Risk: RiskNone, Reason: nasty},
			{Kind: KindConsumer, Stream: "S", Name: "c", Action: Replace, Risk: RiskDataLoss, Reason: nasty,
				Fields:  []FieldChange{{Field: "description", Before: nasty, After: "`", Immutable: true}, {Field: "x|y", Before: "", After: "|"}},
				AtStake: &AtStake{Messages: 2}, Refused: nasty},
			{Kind: KindAccounts, Name: "accounts", Action: Update, Risk: RiskDisruptive, Reason: nasty,
				Users: []UserChange{{User: "u`|", Action: Update, PublishRemoved: []string{"a.|.`b`", "_DELIVER.x x|q"}, AllowResponses: "revoked"}}},
		},
		Holders: []HolderMove{{Seat: "s|`", From: &from}},
	}
}

func TestMarkdownEscapesWhatItQuotes(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := hostile().Markdown(&b); err != nil {
		t.Fatal(err)
	}
	if problems := checkMarkdown(b.String()); len(problems) > 0 {
		t.Fatalf("%s\n%s", strings.Join(problems, "\n"), b.String())
	}
}

// TestEscapesRoundTrip undoes each escape as a Markdown renderer would and expects the
// original text back, on one line.
func TestEscapesRoundTrip(t *testing.T) {
	t.Parallel()
	unescape := regexp.MustCompile(`\\([[:punct:]])`)
	for _, s := range []string{"plain", "a | b", "`x`", "``", "a\\b", "<br>", "x\ny", " lead", "*_~&#!"} {
		one := oneLine(s)
		if got := unescape.ReplaceAllString(mdText(s), "$1"); got != one {
			t.Errorf("mdText(%q) renders as %q", s, got)
		}
		for _, inTable := range []bool{false, true} {
			span := mdCode(s, inTable)
			if inTable {
				span = strings.ReplaceAll(span, `\|`, "|") // GitHub removes these before parsing the cell
			}
			if unclosedCodeSpan(span) {
				t.Errorf("mdCode(%q, %v) = %s: not closed", s, inTable, span)
			}
			fence := span[:len(span)-len(strings.TrimLeft(span, "`"))]
			inner := strings.TrimSuffix(strings.TrimPrefix(span, fence), fence)
			// CommonMark strips one space each side when both are there and it is not all spaces.
			if strings.HasPrefix(inner, " ") && strings.HasSuffix(inner, " ") && strings.TrimSpace(inner) != "" {
				inner = inner[1 : len(inner)-1]
			}
			if inner != one {
				t.Errorf("mdCode(%q, %v) = %s renders as %q", s, inTable, span, inner)
			}
		}
	}
}

func TestMarkdownOfAnInSyncPlanIsOneLine(t *testing.T) {
	t.Parallel()
	for _, p := range []*Plan{{Baseline: BaselineBus}, {Baseline: BaselineDescription}} {
		var b bytes.Buffer
		if err := p.Markdown(&b); err != nil {
			t.Fatal(err)
		}
		if strings.Count(b.String(), "\n") != 1 || !strings.Contains(b.String(), "nothing") {
			t.Errorf("%s: %q", p.Baseline, b.String())
		}
	}
}

func TestLongSectionsFold(t *testing.T) {
	t.Parallel()
	p := &Plan{Baseline: BaselineBus}
	for i := range foldAfter + 1 {
		p.Changes = append(p.Changes, Change{Kind: KindStream, Name: fmt.Sprintf("S%02d", i), Action: Create, Risk: RiskNone, Reason: "new"})
	}
	var b bytes.Buffer
	if err := p.Markdown(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "<details><summary>11 objects</summary>") {
		t.Errorf("11 rows are not folded:\n%s", b.String())
	}
	p.Changes = p.Changes[:foldAfter]
	b.Reset()
	_ = p.Markdown(&b)
	if strings.Contains(b.String(), "<details>") {
		t.Errorf("%d rows are folded:\n%s", foldAfter, b.String())
	}
}

// A change that connects or disconnects more pairs than a comment can draw legibly says
// how many, and draws nothing; one within the bound is drawn.
func TestAPictureTooLargeIsCounted(t *testing.T) {
	t.Parallel()
	p := &Plan{Baseline: BaselineDescription, Changes: []Change{{Kind: KindAccounts, Name: "config", Action: Update, Risk: RiskNone, Reason: "r"}}}
	p.Picture = &graph.Graph{Vertices: []graph.Vertex{{Ref: graph.ControllerRef}}}
	for i := range maxDrawnEdges + 1 {
		seat := graph.Ref{Kind: graph.Seat, Name: fmt.Sprintf("s%02d", i)}
		p.Picture.Vertices = append(p.Picture.Vertices, graph.Vertex{Ref: seat, Mark: graph.Added})
		p.Picture.Edges = append(p.Picture.Edges, graph.Edge{From: graph.ControllerRef, To: seat, Kind: graph.Send, Label: "work", Mark: graph.Added})
	}
	var b bytes.Buffer
	if err := p.Markdown(&b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "```mermaid") || !strings.Contains(b.String(), fmt.Sprintf("adds or removes %d arrows", maxDrawnEdges+1)) {
		t.Errorf("%d edges drawn:\n%s", maxDrawnEdges+1, b.String())
	}
	p.Picture.Edges = p.Picture.Edges[:maxDrawnEdges]
	b.Reset()
	_ = p.Markdown(&b)
	if !strings.Contains(b.String(), "```mermaid\nflowchart LR\n") {
		t.Errorf("%d edges not drawn:\n%s", maxDrawnEdges, b.String())
	}
	if problems := checkMarkdown(b.String()); len(problems) > 0 {
		t.Errorf("%s", strings.Join(problems, "\n"))
	}
}
