package graph

import (
	"fmt"
	"io"
	"strings"

	"github.com/meshbus/meshctl/internal/printable"
)

// The attributes of a change, in the colours Mermaid draws it with.
const (
	dotAdded   = `color="#1a7f37", fontcolor="#116329", penwidth=2`
	dotRemoved = `color="#cf222e", fontcolor="#a40e26", style=dashed`
)

// DOT writes the graph in Graphviz's DOT language, left to right: modules as boxes, seats as
// hexagons, the controller as an ellipse, instances drawn by node inside a cluster per node
// (`meshctl graph -o dot | dot -Tsvg > mesh.svg`). A change's added vertices and edges are
// green and thicker, its removed ones red and dashed, and each says so in its label too.
func (g *Graph) DOT(w io.Writer) error {
	l := g.layout()
	var b strings.Builder
	b.WriteString("digraph mesh {\n  rankdir=LR;\n  node [fontname=\"Helvetica\", fontsize=11];\n  edge [fontname=\"Helvetica\", fontsize=10];\n")
	vertex := func(indent string, v Vertex) {
		shape := "box"
		switch v.Kind {
		case Controller:
			shape = "ellipse"
		case Seat:
			shape = "hexagon"
		}
		fmt.Fprintf(&b, "%s%s [label=\"%s\", shape=%s%s];\n", indent, l.ids[v.Ref], vertexLabel(v, dotText), shape, dotMark(v.Mark))
	}
	for _, v := range l.loose {
		vertex("  ", v)
	}
	for _, gr := range l.groups {
		fmt.Fprintf(&b, "  subgraph cluster_%s {\n    label=\"%s\";\n", gr.id, dotText(gr.node))
		for _, v := range gr.vertices {
			vertex("    ", v)
		}
		b.WriteString("  }\n")
	}
	for _, e := range g.Edges {
		fmt.Fprintf(&b, "  %s -> %s [label=\"%s\"%s];\n", l.ids[e.From], l.ids[e.To], edgeLabel(e, dotText), dotMark(e.Mark))
	}
	b.WriteString("}\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func dotMark(m Mark) string {
	switch m {
	case Added:
		return ", " + dotAdded
	case Removed:
		return ", " + dotRemoved
	}
	return ""
}

// dotText is s as the inside of a quoted DOT string. DOT ends a quoted string only at an
// unescaped `"`, so a quote is escaped, and so is a backslash, which would otherwise escape
// the quote after it or, in a label, become one of Graphviz's escapes (\N, \G, \l); an `&`
// is written as its entity, since Graphviz decodes entities in labels. A character that is
// not printable, a line break included, is first spelled out as printable.Text spells it.
func dotText(s string) string {
	return dotEscaper.Replace(printable.Text(s))
}

var dotEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, `&`, `&amp;`)
