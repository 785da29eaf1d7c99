package graph

import (
	"cmp"
	"slices"

	"github.com/meshbus/meshctl/model"
)

// Kind is what a vertex stands for.
type Kind string

// The kinds of vertex, in the order the writers draw them.
const (
	Controller Kind = "controller"
	Module     Kind = "module"
	Seat       Kind = "seat"
)

// Ref names a vertex. Node is the mesh node a module instance runs on, in a picture drawn
// by node, and "" otherwise.
type Ref struct {
	Kind Kind
	Node string
	Name string
}

// Mark is how a vertex or an edge fares in a change: Same in a picture of one mesh.
type Mark string

// The marks Diff sets.
const (
	Same    Mark = ""
	Added   Mark = "added"
	Removed Mark = "removed"
)

// Vertex is a module (or one of its instances), a seat or the controller.
type Vertex struct {
	Ref
	Mark Mark
}

// EdgeKind is what flows along an edge.
type EdgeKind string

// The kinds of edge, in the order the writers draw parallel edges.
const (
	Event EdgeKind = "event" // emitter → follower; Label is the event
	Send  EdgeKind = "send"  // sender → seat; Label is the accept
	Call  EdgeKind = "call"  // caller → the module or seat serving the tool; Label is the tool
	Hold  EdgeKind = "hold"  // holder → seat; no Label
)

// Edge is one line of talk between two vertices.
type Edge struct {
	From, To Ref
	Kind     EdgeKind
	Label    string
	Mark     Mark
}

// Graph is a picture of a mesh, or of a change to one: vertices sorted by kind, node and
// name; edges by their ends, kind and label, each once. Every edge's ends are vertices of
// the graph.
type Graph struct {
	Vertices []Vertex
	Edges    []Edge
}

// Options say how to draw a mesh.
type Options struct {
	// ByNode draws each module instance as a vertex of its own, grouped by the node it runs
	// on, instead of one vertex per module.
	ByNode bool
}

// ControllerRef is the controller's vertex.
var ControllerRef = Ref{Kind: Controller, Name: "controller"}

// Of draws the mesh m: every module (or instance), every seat and the controller, and the
// edges its declarations make. An event a module emits on several nodes is drawn from each
// of its instances to each instance that follows it, when drawn by node.
func Of(m *model.Mesh, o Options) *Graph {
	b := builder{vertices: map[Ref]bool{}, edges: map[edgeKey]bool{}}
	b.add(Vertex{Ref: ControllerRef})
	instances := make(map[string][]Ref, len(m.Modules))
	for _, mod := range m.Modules {
		refs := []Ref{{Kind: Module, Name: mod.Name}}
		if o.ByNode {
			refs = refs[:0]
			for _, n := range mod.On {
				refs = append(refs, Ref{Kind: Module, Node: n, Name: mod.Name})
			}
		}
		instances[mod.Name] = refs
		for _, r := range refs {
			b.add(Vertex{Ref: r})
		}
	}
	for _, s := range m.Seats {
		b.add(Vertex{Ref: seatRef(s.Name)})
	}
	// owners are the vertices that emit a referenced event or serve a referenced tool: the
	// seat itself (its holder speaks for it), or every instance of the module.
	owners := func(seat bool, owner string) []Ref {
		if seat {
			return []Ref{seatRef(owner)}
		}
		return instances[owner]
	}
	declare := func(froms []Ref, follows []model.EventRef, sends []model.AcceptRef, calls []model.ToolRef) {
		for _, f := range follows {
			for _, emitter := range owners(f.Seat, f.Owner) {
				for _, follower := range froms {
					b.edge(Edge{From: emitter, To: follower, Kind: Event, Label: f.Event})
				}
			}
		}
		for _, from := range froms {
			for _, s := range sends {
				b.edge(Edge{From: from, To: seatRef(s.Seat), Kind: Send, Label: s.Accept})
			}
			for _, c := range calls {
				for _, server := range owners(c.Seat, c.Owner) {
					b.edge(Edge{From: from, To: server, Kind: Call, Label: c.Tool})
				}
			}
		}
	}
	c := m.Controller
	declare([]Ref{ControllerRef}, c.Follows, c.Sends, c.Calls)
	for _, mod := range m.Modules {
		declare(instances[mod.Name], mod.Follows, mod.Sends, mod.Calls)
	}
	for _, h := range m.Holding {
		holder := Ref{Kind: Module, Name: h.Holder.Module}
		if o.ByNode {
			holder.Node = h.Holder.Node
		}
		b.edge(Edge{From: holder, To: seatRef(h.Seat), Kind: Hold})
	}
	return b.graph()
}

func seatRef(name string) Ref { return Ref{Kind: Seat, Name: name} }

// edgeKey is an edge without its mark: what Diff compares.
type edgeKey struct {
	from, to Ref
	kind     EdgeKind
	label    string
}

func (e Edge) key() edgeKey { return edgeKey{e.From, e.To, e.Kind, e.Label} }

// builder collects a graph's vertices and edges, each once.
type builder struct {
	vertices map[Ref]bool
	edges    map[edgeKey]bool
	out      Graph
}

// add adds a vertex, with its mark, unless it is there already.
func (b *builder) add(v Vertex) {
	if !b.vertices[v.Ref] {
		b.vertices[v.Ref] = true
		b.out.Vertices = append(b.out.Vertices, v)
	}
}

// edge adds e unless it is drawn already or one of its ends is no vertex: a validated mesh
// references only what it declares, and a graph never holds an edge into nothing.
func (b *builder) edge(e Edge) {
	k := e.key()
	if b.edges[k] || !b.vertices[e.From] || !b.vertices[e.To] {
		return
	}
	b.edges[k] = true
	b.out.Edges = append(b.out.Edges, e)
}

func (b *builder) graph() *Graph {
	g := b.out
	g.sort()
	return &g
}

func (g *Graph) sort() {
	slices.SortFunc(g.Vertices, func(a, b Vertex) int { return compareRefs(a.Ref, b.Ref) })
	slices.SortFunc(g.Edges, compareEdges)
}

var kindOrder = map[Kind]int{Controller: 0, Module: 1, Seat: 2}

var edgeKindOrder = map[EdgeKind]int{Event: 0, Send: 1, Call: 2, Hold: 3}

func compareRefs(a, b Ref) int {
	return cmp.Or(cmp.Compare(kindOrder[a.Kind], kindOrder[b.Kind]), cmp.Compare(a.Node, b.Node), cmp.Compare(a.Name, b.Name))
}

func compareEdges(a, b Edge) int {
	return cmp.Or(compareRefs(a.From, b.From), compareRefs(a.To, b.To),
		cmp.Compare(edgeKindOrder[a.Kind], edgeKindOrder[b.Kind]), cmp.Compare(a.Label, b.Label))
}

// Empty reports whether there is nothing to draw.
func (g *Graph) Empty() bool { return len(g.Vertices) == 0 }
