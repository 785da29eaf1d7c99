package graph

// Diff is the picture of a change from before to after, both drawn with the same Options:
// every vertex and edge of either, marked Added when only after has it and Removed when only
// before does.
func Diff(before, after *Graph) *Graph {
	b := builder{vertices: map[Ref]bool{}, edges: map[edgeKey]bool{}}
	inBefore, inAfter := vertexSet(before), vertexSet(after)
	for _, v := range after.Vertices {
		if !inBefore[v.Ref] {
			v.Mark = Added
		}
		b.add(v)
	}
	for _, v := range before.Vertices {
		if !inAfter[v.Ref] {
			v.Mark = Removed
			b.add(v)
		}
	}
	edgesBefore, edgesAfter := edgeSet(before), edgeSet(after)
	for _, e := range after.Edges {
		if !edgesBefore[e.key()] {
			e.Mark = Added
		}
		b.edge(e)
	}
	for _, e := range before.Edges {
		if !edgesAfter[e.key()] {
			e.Mark = Removed
			b.edge(e)
		}
	}
	return b.graph()
}

// Changed is the part of a change's picture a reviewer needs: every vertex and edge added
// or removed, and the vertices at the ends of those edges, unmarked, for where they attach.
// Everything else — the bulk of a large mesh — is left out. It is empty when nothing changed.
func (g *Graph) Changed() *Graph {
	keep := map[Ref]bool{}
	out := &Graph{}
	for _, e := range g.Edges {
		if e.Mark != Same {
			keep[e.From], keep[e.To] = true, true
			out.Edges = append(out.Edges, e)
		}
	}
	for _, v := range g.Vertices {
		if v.Mark != Same || keep[v.Ref] {
			out.Vertices = append(out.Vertices, v)
		}
	}
	return out
}

func vertexSet(g *Graph) map[Ref]bool {
	out := make(map[Ref]bool, len(g.Vertices))
	for _, v := range g.Vertices {
		out[v.Ref] = true
	}
	return out
}

func edgeSet(g *Graph) map[edgeKey]bool {
	out := make(map[edgeKey]bool, len(g.Edges))
	for _, e := range g.Edges {
		out[e.key()] = true
	}
	return out
}
