package graph

import (
	"fmt"
	"html"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/meshbus/meshctl/graph/graphtest"
	"github.com/meshbus/meshctl/internal/printable"
)

// hostileNames hold what could end a label in Mermaid or DOT, or be read as something
// else inside one: quotes, brackets, pipes, a line break, arrows, entities, HTML, Markdown,
// backslashes, comments, statement ends, keywords and a bidirectional override. The model
// allows none of them (names are [a-z][a-z0-9-]*, events dotted tokens), but the writers
// hold without it.
var hostileNames = []string{
	`a"b`, `x"]; evil["y`, "two\nlines", "cr\rlf", "-->", "a --> b", "a -.-> b", "a ==> b", "|pipe|",
	"#quot;", "#35;", "`code`", "<script>alert(1)</script>", `back\slash`, `\"`, `\N`, `\`,
	"end", "}}", "{{", "%%{init}%%", "%% comment", "subgraph", "x;y", "style:#f00;", ")]", "--o",
	"&amp;", "\u202eevil\u202c", "tab\there", "ünïcode", "]:::added", "}\ndigraph x {",
}

// hostileGraph has a module instance, a seat and an edge of each kind for every hostile
// name, on a node of a hostile name, some marked as a change would mark them.
func hostileGraph() *Graph {
	b := builder{vertices: map[Ref]bool{}, edges: map[edgeKey]bool{}}
	b.add(Vertex{Ref: ControllerRef})
	marks := []Mark{Same, Added, Removed}
	for i, name := range hostileNames {
		mod := Ref{Kind: Module, Node: hostileNames[(i+1)%len(hostileNames)], Name: name}
		seat := Ref{Kind: Seat, Name: name}
		b.add(Vertex{Ref: mod, Mark: marks[i%3]})
		b.add(Vertex{Ref: seat, Mark: marks[(i+1)%3]})
		b.edge(Edge{From: mod, To: seat, Kind: Send, Label: name, Mark: marks[i%3]})
		b.edge(Edge{From: seat, To: ControllerRef, Kind: Event, Label: name, Mark: marks[(i+2)%3]})
		b.edge(Edge{From: ControllerRef, To: mod, Kind: Call, Label: name})
		b.edge(Edge{From: mod, To: seat, Kind: Hold, Mark: marks[(i+1)%3]})
	}
	return b.graph()
}

// The Mermaid statements the writer may produce, LABEL standing for a quoted label's
// inside: ASCII letters, digits, space, `.`, `_`, `/`, `-`, the parentheses of a mark's
// words, and entities. A label holds no quote, so Mermaid's lexer ends it exactly where the
// pattern does: each line is one statement, and no name adds one.
var (
	mermaidLabel      = `((?:[A-Za-z0-9 ._/()-]|#[0-9]+;)*)`
	mermaidVertexLine = regexp.MustCompile(strings.ReplaceAll(`^ +(?:ctl|mod|seat)[0-9]+(?:\(\["LABEL"\]\)|\["LABEL"\]|\{\{"LABEL"\}\})(?::::(?:added|removed))?$`, "LABEL", mermaidLabel))
	mermaidEdgeLine   = regexp.MustCompile(strings.ReplaceAll(`^  (?:ctl|mod|seat)[0-9]+ (?:-->|==>|-\.->)\|"LABEL"\| (?:ctl|mod|seat)[0-9]+$`, "LABEL", mermaidLabel))
	mermaidGroupLine  = regexp.MustCompile(strings.ReplaceAll(`^  subgraph node[0-9]+ \["LABEL"\]$`, "LABEL", mermaidLabel))
	mermaidOtherLine  = regexp.MustCompile(`^(?:flowchart LR|  end|  classDef (?:added|removed) [a-z0-9:#,. -]+|  linkStyle [0-9,]+ [a-z0-9:#,. -]+)$`)
	mermaidEntity     = regexp.MustCompile(`#([0-9]+);`)
)

// unMermaid decodes a label's entities as Mermaid does before it draws the label.
func unMermaid(label string) string {
	return mermaidEntity.ReplaceAllStringFunc(label, func(e string) string {
		n, _ := strconv.Atoi(mermaidEntity.FindStringSubmatch(e)[1])
		return string(rune(n))
	})
}

func TestHostileNamesStayInTheirMermaidLabels(t *testing.T) {
	t.Parallel()
	g := hostileGraph()
	out := mermaid(t, g)
	var vertices, edges, groups int
	var labels []string
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var m []string
		switch {
		case mermaidVertexLine.MatchString(line):
			vertices++
			m = mermaidVertexLine.FindStringSubmatch(line)
		case mermaidEdgeLine.MatchString(line):
			edges++
			m = mermaidEdgeLine.FindStringSubmatch(line)
		case mermaidGroupLine.MatchString(line):
			groups++
			m = mermaidGroupLine.FindStringSubmatch(line)
		case mermaidOtherLine.MatchString(line):
		default:
			t.Errorf("a line that is no statement the writer makes: %q", line)
		}
		for _, l := range m[min(1, len(m)):] {
			if l != "" {
				labels = append(labels, unMermaid(l))
			}
		}
	}
	if vertices != len(g.Vertices) || edges != len(g.Edges) || groups != len(g.layout().groups) {
		t.Errorf("%d vertices, %d edges, %d subgraphs written; the graph has %d, %d, %d\n%s",
			vertices, edges, groups, len(g.Vertices), len(g.Edges), len(g.layout().groups), out)
	}
	checkLabelsShowNames(t, g, labels)
}

// TestHostileNamesStayInTheirDOTLabels has Graphviz draw the hostile graph: it must draw
// exactly the graph's vertices, edges and clusters, and every label must read as the name
// it holds.
func TestHostileNamesStayInTheirDOTLabels(t *testing.T) {
	t.Parallel()
	g := hostileGraph()
	svg := graphtest.SVG(t, dot(t, g))
	vertices, edges, clusters := graphtest.Count(svg)
	if vertices != len(g.Vertices) || edges != len(g.Edges) || clusters != len(g.layout().groups) {
		t.Errorf("Graphviz drew %d vertices, %d edges, %d clusters; the graph has %d, %d, %d",
			vertices, edges, clusters, len(g.Vertices), len(g.Edges), len(g.layout().groups))
	}
	var labels []string
	for _, m := range regexp.MustCompile(`<text[^>]*>([^<]*)</text>`).FindAllStringSubmatch(svg, -1) {
		labels = append(labels, html.UnescapeString(m[1]))
	}
	checkLabelsShowNames(t, g, labels)
}

// checkLabelsShowNames checks that the labels drawn are exactly what the graph's vertices,
// groups and edges say, each name as printable.Text shows it.
func checkLabelsShowNames(t *testing.T, g *Graph, got []string) {
	t.Helper()
	var want []string
	id := func(s string) string { return printable.Text(s) }
	for _, v := range g.Vertices {
		want = append(want, vertexLabel(v, id))
	}
	for _, gr := range g.layout().groups {
		want = append(want, id(gr.node))
	}
	for _, e := range g.Edges {
		want = append(want, edgeLabel(e, id))
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(want, got) {
		t.Errorf("labels drawn differ from the names:\nwant %s\ngot  %s", fmt.Sprintf("%q", want), fmt.Sprintf("%q", got))
	}
}

// The worst names the model accepts: keywords of both languages, arrows' pieces, a leading
// and a doubled dash, and underscores and dots in events, drawn without a line breaking.
func TestTheWorstValidNames(t *testing.T) {
	t.Parallel()
	m := parse(t, map[string]string{"mesh.yaml": `
nodes: [{name: end}, {name: x--o}, {name: subgraph}]
seats:
  - {name: o--x, accepts: [--x, _-_.-], emits: [---]}
  - {name: class, accepts: [style]}
modules:
  - {name: end, on: [end, x--o], emits: [--.__, a---b], claims: [o--x], serves: [node]}
  - {name: digraph, on: [subgraph], follows: [end/--.__, end/a---b, seat:o--x/---], sends: [o--x/--x, class/style], calls: [end/node]}
  - {name: style, on: [end], claims: [class], follows: [seat:o--x/---]}
`})
	options := []Options{{}, {ByNode: true}}
	for _, o := range options {
		g := Of(m, o)
		if len(g.Edges) == 0 {
			t.Fatal("no edges drawn")
		}
		for _, line := range strings.Split(strings.TrimSuffix(mermaid(t, g), "\n"), "\n") {
			if !mermaidVertexLine.MatchString(line) && !mermaidEdgeLine.MatchString(line) && !mermaidGroupLine.MatchString(line) && !mermaidOtherLine.MatchString(line) {
				t.Errorf("by node %v: a line that is no statement the writer makes: %q", o.ByNode, line)
			}
		}
	}
	for _, o := range options {
		g := Of(m, o)
		vertices, edges, clusters := graphtest.Count(graphtest.SVG(t, dot(t, g)))
		if vertices != len(g.Vertices) || edges != len(g.Edges) || clusters != len(g.layout().groups) {
			t.Errorf("by node %v: Graphviz drew %d vertices, %d edges, %d clusters; the graph has %d, %d, %d",
				o.ByNode, vertices, edges, clusters, len(g.Vertices), len(g.Edges), len(g.layout().groups))
		}
	}
}
