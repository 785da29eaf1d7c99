package graph

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/meshbus/meshctl/internal/printable"
)

// The styles of a change, as GitHub's own diff colours them: green for what is added, red
// and dashed for what is removed.
const (
	mermaidAddedVertex   = "fill:#dafbe1,stroke:#1a7f37,stroke-width:2px,color:#116329"
	mermaidRemovedVertex = "fill:#ffebe9,stroke:#cf222e,stroke-dasharray:4 3,color:#a40e26,text-decoration:line-through"
	mermaidAddedEdge     = "stroke:#1a7f37,stroke-width:3px,color:#116329"
	mermaidRemovedEdge   = "stroke:#cf222e,stroke-dasharray:4 3,color:#a40e26"
)

// Mermaid writes the graph as a Mermaid flowchart, left to right: modules as boxes, seats
// as hexagons, the controller as a stadium, instances drawn by node inside a subgraph per
// node. A change's added vertices and edges are green (edges thick), its removed ones red
// and dashed, and each says so in its label too.
func (g *Graph) Mermaid(w io.Writer) error {
	l := g.layout()
	var b strings.Builder
	b.WriteString("flowchart LR\n")
	marked := map[Mark]bool{}
	vertex := func(indent string, v Vertex) {
		open, close := `["`, `"]`
		switch v.Kind {
		case Controller:
			open, close = `(["`, `"])`
		case Seat:
			open, close = `{{"`, `"}}`
		}
		fmt.Fprintf(&b, "%s%s%s%s%s", indent, l.ids[v.Ref], open, vertexLabel(v, mermaidText), close)
		if v.Mark != Same {
			b.WriteString(":::" + string(v.Mark))
			marked[v.Mark] = true
		}
		b.WriteByte('\n')
	}
	for _, v := range l.loose {
		vertex("  ", v)
	}
	for _, gr := range l.groups {
		fmt.Fprintf(&b, "  subgraph %s [\"%s\"]\n", gr.id, mermaidText(gr.node))
		for _, v := range gr.vertices {
			vertex("    ", v)
		}
		b.WriteString("  end\n")
	}
	var added, removed []string
	for i, e := range g.Edges {
		arrow := "-->"
		switch e.Mark {
		case Added:
			arrow = "==>"
			added = append(added, strconv.Itoa(i))
		case Removed:
			arrow = "-.->"
			removed = append(removed, strconv.Itoa(i))
		}
		fmt.Fprintf(&b, "  %s %s|\"%s\"| %s\n", l.ids[e.From], arrow, edgeLabel(e, mermaidText), l.ids[e.To])
	}
	if marked[Added] {
		b.WriteString("  classDef added " + mermaidAddedVertex + "\n")
	}
	if marked[Removed] {
		b.WriteString("  classDef removed " + mermaidRemovedVertex + "\n")
	}
	if len(added) > 0 {
		b.WriteString("  linkStyle " + strings.Join(added, ",") + " " + mermaidAddedEdge + "\n")
	}
	if len(removed) > 0 {
		b.WriteString("  linkStyle " + strings.Join(removed, ",") + " " + mermaidRemovedEdge + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// mermaidText is s as the inside of a quoted Mermaid label. Mermaid ends a quoted string at
// the next `"` and nothing else, but decodes `#…;` entities inside it, reads backticks as a
// Markdown string and hands the text to the browser as HTML; so every character but ASCII
// letters, digits, space and `.`, `_`, `/`, `-` is written as its entity, `#<code>;`: a
// quote, a bracket, `|`, `;`, `<`, `#` or a line break in a name stays text in its label.
// A character that is not printable is first spelled out as printable.Text spells it, so a
// line break shows as \n rather than as a gap.
func mermaidText(s string) string {
	s = printable.Text(s)
	var b strings.Builder
	for _, r := range s {
		if r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(" ._/-", r)) {
			b.WriteRune(r)
			continue
		}
		fmt.Fprintf(&b, "#%d;", r)
	}
	return b.String()
}
