package graph

import (
	"bytes"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshbus/meshctl/graph/graphtest"
	"github.com/meshbus/meshctl/model"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ with what the writers produce")

func load(tb testing.TB, dir string) *model.Mesh {
	tb.Helper()
	m, err := model.Load(dir)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// parse loads a description given as files (name → YAML).
func parse(tb testing.TB, files map[string]string) *model.Mesh {
	tb.Helper()
	var fs []model.File
	for _, name := range slices.Sorted(maps.Keys(files)) {
		fs = append(fs, model.File{Name: name, Data: []byte(files[name])})
	}
	m, err := model.Parse(fs)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

func mermaid(tb testing.TB, g *Graph) string {
	tb.Helper()
	var b bytes.Buffer
	if err := g.Mermaid(&b); err != nil {
		tb.Fatal(err)
	}
	return b.String()
}

func dot(tb testing.TB, g *Graph) string {
	tb.Helper()
	var b bytes.Buffer
	if err := g.DOT(&b); err != nil {
		tb.Fatal(err)
	}
	return b.String()
}

// checkGolden compares got with testdata/name, or rewrites it with -update.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go test ./graph -update` to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", path, diff)
	}
}

// TestSeedGolden draws examples/seed, by module and by node, in both languages: the
// pictures are what an operator pastes into a page, so a change to them is reviewed in the
// diff of the files.
func TestSeedGolden(t *testing.T) {
	t.Parallel()
	m := load(t, "../examples/seed")
	for name, o := range map[string]Options{"seed": {}, "seed-by-node": {ByNode: true}} {
		g := Of(m, o)
		checkGolden(t, name+".mmd", mermaid(t, g))
		checkGolden(t, name+".dot", dot(t, g))
	}
}

// TestSeedEdges pins what the seed's picture says, so a golden file rewritten with -update
// cannot quietly lose an edge.
func TestSeedEdges(t *testing.T) {
	t.Parallel()
	m := load(t, "../examples/seed")
	mod := func(name string) Ref { return Ref{Kind: Module, Name: name} }
	want := []Edge{
		{From: ControllerRef, To: seatRef("mesh-build-machine"), Kind: Send, Label: "build"},
		{From: mod("mesh-catalog"), To: ControllerRef, Kind: Event, Label: "catching-up"},
		{From: mod("mesh-catalog"), To: ControllerRef, Kind: Event, Label: "upgraded"},
		{From: mod("shop"), To: mod("audit"), Kind: Event, Label: "order.placed"},
		{From: mod("shop"), To: seatRef("telegram-sender"), Kind: Send, Label: "send"},
		{From: mod("telegram"), To: seatRef("telegram-sender"), Kind: Hold},
		{From: seatRef("mesh-build-machine"), To: ControllerRef, Kind: Event, Label: "built"},
	}
	g := Of(m, Options{})
	if diff := cmp.Diff(want, g.Edges); diff != "" {
		t.Errorf("edges (-want +got):\n%s", diff)
	}
	if len(g.Vertices) != 1+len(m.Modules)+len(m.Seats) {
		t.Errorf("%d vertices: want the controller, %d modules and %d seats: %v", len(g.Vertices), len(m.Modules), len(m.Seats), g.Vertices)
	}
	byNode := Of(m, Options{ByNode: true})
	if !slices.Contains(byNode.Edges, Edge{From: Ref{Module, "two", "shop"}, To: Ref{Module, "two", "audit"}, Kind: Event, Label: "order.placed"}) ||
		!slices.Contains(byNode.Edges, Edge{From: Ref{Module, "one", "telegram"}, To: seatRef("telegram-sender"), Kind: Hold}) {
		t.Errorf("by node, the instances' edges are missing: %v", byNode.Edges)
	}
}

// withLedger is examples/seed with a module that follows the shop's orders and calls
// telegram's status, on both nodes.
func withLedger(tb testing.TB) *model.Mesh {
	tb.Helper()
	files := map[string]string{"ledger.yaml": "modules:\n  - name: ledger\n    on: [one, two]\n    follows: [shop/order.placed]\n    calls: [telegram/status]\n"}
	entries, err := os.ReadDir("../examples/seed")
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join("../examples/seed", e.Name()))
		if err != nil {
			tb.Fatal(err)
		}
		files[e.Name()] = string(data)
	}
	return parse(tb, files)
}

// A change's picture keeps what it adds or removes and the vertices at the ends of those
// edges, and nothing else of the mesh.
func TestChangedIsTheChangeAndItsNeighbours(t *testing.T) {
	t.Parallel()
	seed, after := load(t, "../examples/seed"), withLedger(t)
	ledger, shop, telegram := Ref{Kind: Module, Name: "ledger"}, Ref{Kind: Module, Name: "shop"}, Ref{Kind: Module, Name: "telegram"}
	got := Diff(Of(seed, Options{}), Of(after, Options{})).Changed()
	want := &Graph{
		Vertices: []Vertex{{Ref: ledger, Mark: Added}, {Ref: shop}, {Ref: telegram}},
		Edges: []Edge{
			{From: ledger, To: telegram, Kind: Call, Label: "status", Mark: Added},
			{From: shop, To: ledger, Kind: Event, Label: "order.placed", Mark: Added},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("adding ledger (-want +got):\n%s", diff)
	}
	// The same change undone: the same picture, removed.
	back := Diff(Of(after, Options{}), Of(seed, Options{})).Changed()
	for i := range want.Vertices {
		if want.Vertices[i].Mark == Added {
			want.Vertices[i].Mark = Removed
		}
	}
	for i := range want.Edges {
		want.Edges[i].Mark = Removed
	}
	if diff := cmp.Diff(want, back); diff != "" {
		t.Errorf("removing ledger (-want +got):\n%s", diff)
	}
	if c := Diff(Of(seed, Options{}), Of(seed, Options{})).Changed(); !c.Empty() || len(c.Edges) > 0 {
		t.Errorf("no change draws %+v", c)
	}
}

// The seed's pictures, and those of a change, are DOT that Graphviz draws with every vertex,
// edge and node's cluster.
func TestGraphvizDrawsTheDOT(t *testing.T) {
	t.Parallel()
	seed := load(t, "../examples/seed")
	for name, g := range map[string]*Graph{
		"seed":         Of(seed, Options{}),
		"seed by node": Of(seed, Options{ByNode: true}),
		"a change":     Diff(Of(seed, Options{ByNode: true}), Of(withLedger(t), Options{ByNode: true})),
	} {
		vertices, edges, clusters := graphtest.Count(graphtest.SVG(t, dot(t, g)))
		if vertices != len(g.Vertices) || edges != len(g.Edges) || clusters != len(g.layout().groups) {
			t.Errorf("%s: Graphviz drew %d vertices, %d edges, %d clusters; the graph has %d, %d, %d",
				name, vertices, edges, clusters, len(g.Vertices), len(g.Edges), len(g.layout().groups))
		}
	}
}
