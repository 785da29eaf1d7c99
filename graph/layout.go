package graph

import (
	"slices"
	"strconv"
)

// layout is what both writers draw from: an identifier for each vertex and group, made by
// the writer from the vertex's kind and place and never from its name, so no name can be a
// keyword of either language (Mermaid's `end`, DOT's `node`) or collide with another; and
// the vertices grouped by the node their instance runs on.
type layout struct {
	ids    map[Ref]string
	loose  []Vertex // drawn outside every group: the controller, seats, modules not drawn by node
	groups []group
}

type group struct {
	node, id string
	vertices []Vertex
}

var idPrefix = map[Kind]string{Controller: "ctl", Module: "mod", Seat: "seat"}

func (g *Graph) layout() layout {
	l := layout{ids: make(map[Ref]string, len(g.Vertices))}
	counts := map[Kind]int{}
	byNode := map[string][]Vertex{}
	for _, v := range g.Vertices {
		l.ids[v.Ref] = idPrefix[v.Kind] + strconv.Itoa(counts[v.Kind])
		counts[v.Kind]++
		if v.Node == "" {
			l.loose = append(l.loose, v)
		} else {
			byNode[v.Node] = append(byNode[v.Node], v)
		}
	}
	nodes := make([]string, 0, len(byNode))
	for n := range byNode {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	for i, n := range nodes {
		l.groups = append(l.groups, group{node: n, id: "node" + strconv.Itoa(i), vertices: byNode[n]})
	}
	return l
}

// vertexLabel is what a vertex's box says: its name, escaped by esc, and its mark.
func vertexLabel(v Vertex, esc func(string) string) string {
	return esc(v.Name) + markWord(v.Mark)
}

// edgeLabel is what an edge says: the event it carries, the work it sends, the tool it
// calls, or that it holds, with its mark. Only the name is escaped by esc; the words around
// it are meshctl's.
func edgeLabel(e Edge, esc func(string) string) string {
	var s string
	switch e.Kind {
	case Send:
		s = "sends " + esc(e.Label)
	case Call:
		s = "calls " + esc(e.Label)
	case Hold:
		s = "holds"
	default:
		s = esc(e.Label)
	}
	return s + markWord(e.Mark)
}

// markWord says a mark in words, so a change reads the same without its colours (a
// terminal, a screen reader, a colour-blind reviewer).
func markWord(m Mark) string {
	switch m {
	case Added:
		return " (new)"
	case Removed:
		return " (removed)"
	}
	return ""
}
