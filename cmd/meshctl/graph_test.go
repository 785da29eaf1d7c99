package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshbus/meshctl/graph/graphtest"
)

var seedDir = filepath.Join("..", "..", "examples", "seed")

// meshctl graph prints the graph package's golden pictures of examples/seed, by module and
// by node, in both languages.
func TestGraphDrawsTheSeed(t *testing.T) {
	t.Parallel()
	for golden, args := range map[string][]string{
		"seed.mmd":         {},
		"seed-by-node.mmd": {"--by-node"},
		"seed.dot":         {"-o", "dot"},
		"seed-by-node.dot": {"-o", "dot", "--by-node"},
	} {
		want, err := os.ReadFile(filepath.Join("..", "..", "graph", "testdata", golden))
		if err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := meshctl(t, append([]string{"graph", "-f", seedDir}, args...)...)
		if code != exitOK || stdout != string(want) || stderr != "" {
			t.Errorf("meshctl graph %s: exit %d, stderr %q, stdout:\n%s\nwant graph/testdata/%s:\n%s", strings.Join(args, " "), code, stderr, stdout, golden, want)
		}
	}
}

// What meshctl graph -o dot prints is DOT Graphviz draws, every module, seat and the
// controller a vertex and every declared line of talk an edge.
func TestGraphDOTRendersWithGraphviz(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args                      []string
		vertices, edges, clusters int
	}{
		{[]string{"-o", "dot"}, 7, 7, 0},
		{[]string{"-o", "dot", "--by-node"}, 7, 7, 2},
	} {
		code, stdout, stderr := meshctl(t, append([]string{"graph", "-f", seedDir}, tc.args...)...)
		if code != exitOK {
			t.Fatalf("meshctl graph %s: exit %d: %s", strings.Join(tc.args, " "), code, stderr)
		}
		vertices, edges, clusters := graphtest.Count(graphtest.SVG(t, stdout))
		if vertices != tc.vertices || edges != tc.edges || clusters != tc.clusters {
			t.Errorf("meshctl graph %s: Graphviz drew %d vertices, %d edges, %d clusters; want %d, %d, %d",
				strings.Join(tc.args, " "), vertices, edges, clusters, tc.vertices, tc.edges, tc.clusters)
		}
	}
}

// An invalid description is reported as validate reports it, and nothing is drawn; an
// unknown language is refused before the description is read.
func TestGraphRefusesWhatItCannotDraw(t *testing.T) {
	t.Parallel()
	invalid := writeMesh(t, map[string]string{"mesh.yaml": "nodes:\n  - name: one\nmodules:\n  - name: shop\n    on: [two]\n"})
	code, stdout, stderr := meshctl(t, "graph", "-f", invalid)
	if code != exitInvalid || stdout != "" || !strings.Contains(stderr, "mesh.yaml:5:10:") {
		t.Errorf("an invalid description: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, stderr = meshctl(t, "graph", "-f", seedDir, "-o", "png")
	if code != exitError || stdout != "" || !strings.Contains(stderr, `unknown output format "png"; use one of: mermaid, dot`) {
		t.Errorf("-o png: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// The pull request's comment: `diff --from` of examples/seed and the same with a new
// module prints the plan package's golden Markdown, whose picture draws the new module's
// edges (the plan's test pins them).
func TestDiffMarkdownDrawsANewModule(t *testing.T) {
	t.Parallel()
	golden := filepath.Join("..", "..", "plan", "testdata", "constructed", "seed-module-added")
	files := map[string]string{}
	for _, path := range append(globOrFail(t, filepath.Join(seedDir, "*.yaml")), filepath.Join(golden, "ledger.yaml")) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(path)] = string(data)
	}
	want, err := os.ReadFile(filepath.Join(golden, "want.md"))
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := meshctl(t, "diff", "--from", seedDir, "-f", writeMesh(t, files), "-o", "markdown")
	if code != exitChanges || stdout != string(want) {
		t.Errorf("exit %d, stderr %q, stdout:\n%s\nwant %s:\n%s", code, stderr, stdout, golden, want)
	}
	if !strings.Contains(stdout, "```mermaid\n") {
		t.Errorf("no picture drawn:\n%s", stdout)
	}
}

func globOrFail(tb testing.TB, pattern string) []string {
	tb.Helper()
	paths, err := filepath.Glob(pattern)
	if err != nil || len(paths) == 0 {
		tb.Fatalf("nothing matches %s: %v", pattern, err)
	}
	return paths
}
