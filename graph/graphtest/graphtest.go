// Package graphtest renders DOT with Graphviz for tests: the proof that what meshctl writes
// is DOT that Graphviz draws, rather than text that looks like it. It is test support, and
// nothing outside tests imports it.
package graphtest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"
)

// Required is the value of MESHCTL_TEST_GRAPHVIZ under which a missing Graphviz fails a test
// instead of skipping it: CI installs Graphviz and sets it, so CI cannot pass by skipping.
const Required = "required"

// SVG renders source with `dot -Tsvg` and returns the drawing, failing the test when
// Graphviz refuses it or says anything on stderr (a warning is a syntax Graphviz guessed
// around). Without dot on PATH it skips the test, saying how to install it, unless
// MESHCTL_TEST_GRAPHVIZ=required.
func SVG(tb testing.TB, source string) string {
	tb.Helper()
	dot, err := exec.LookPath("dot")
	if err != nil {
		why := "Graphviz's dot is not on PATH: install it (apt-get install -y graphviz) to check that meshctl's DOT renders"
		if os.Getenv("MESHCTL_TEST_GRAPHVIZ") == Required {
			tb.Fatal(why)
		}
		tb.Skip(why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, dot, "-Tsvg")
	cmd.Stdin = bytes.NewBufferString(source)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil || stderr.Len() > 0 {
		tb.Fatalf("dot -Tsvg: %v\n%s\nof:\n%s", err, stderr.String(), source)
	}
	return stdout.String()
}

var (
	nodeGroup    = regexp.MustCompile(`<g id="[^"]*" class="node">`)
	edgeGroup    = regexp.MustCompile(`<g id="[^"]*" class="edge">`)
	clusterGroup = regexp.MustCompile(`<g id="[^"]*" class="cluster">`)
)

// Count is how many vertices, edges and clusters a drawing holds, as Graphviz drew them.
func Count(svg string) (vertices, edges, clusters int) {
	return len(nodeGroup.FindAllString(svg, -1)), len(edgeGroup.FindAllString(svg, -1)), len(clusterGroup.FindAllString(svg, -1))
}
