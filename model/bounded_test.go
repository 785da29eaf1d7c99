package model_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshbus/meshctl/bench/meshgen"
	"github.com/meshbus/meshctl/model"
)

// brokenNodes is a generated mesh whose nodes were all renamed, as one sed over nodes.yaml
// does: every `on` and every holder names a node that is not declared.
func brokenNodes(t testing.TB, instances int) []model.File {
	t.Helper()
	files := meshgen.Scaled(instances).Files()
	for i, f := range files {
		if f.Name == "nodes.yaml" {
			files[i].Data = bytes.ReplaceAll(f.Data, []byte("name: node-"), []byte("name: host-"))
			return files
		}
	}
	t.Fatal("meshgen wrote no nodes.yaml")
	return nil
}

// A load reports the first MaxDiagnostics problems, says how many there were, and still
// suggests what a misspelt name meant among those it reports.
func TestLoadReportsTheFirstProblemsAndCountsTheRest(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("nodes:\n  - name: alpha\nmodules:\n")
	const n = 3 * model.MaxDiagnostics
	for i := range n {
		fmt.Fprintf(&b, "  - name: m%d\n    on: [alpah]\n", i)
	}
	_, err := model.Parse([]model.File{{Name: "mesh.yaml", Data: []byte(b.String())}})
	var lerr *model.LoadError
	if !errors.As(err, &lerr) {
		t.Fatalf("Parse = %v, want a *LoadError", err)
	}
	if len(lerr.Diagnostics) != model.MaxDiagnostics || lerr.Total != n || lerr.Omitted() != n-model.MaxDiagnostics {
		t.Fatalf("got %d diagnostics of %d (%d omitted), want the first %d of %d", len(lerr.Diagnostics), lerr.Total, lerr.Omitted(), model.MaxDiagnostics, n)
	}
	if first := lerr.Diagnostics[0]; first.Pos.Line != 5 || !strings.HasSuffix(first.Message, `(did you mean "alpha"?)`) {
		t.Errorf("first diagnostic = %s, want line 5 suggesting alpha", first)
	}
	lines := strings.Split(err.Error(), "\n")
	if want := fmt.Sprintf("… and %d more problem(s)", n-model.MaxDiagnostics); len(lines) != model.MaxDiagnostics+1 || lines[len(lines)-1] != want {
		t.Errorf("the error has %d lines ending %q, want %d ending %q", len(lines), lines[len(lines)-1], model.MaxDiagnostics+1, want)
	}
}

// countdown is a context that reports itself cancelled from the after-th call to Err on,
// counting the calls: a way to end a load at an exact point without a clock.
type countdown struct {
	context.Context
	after int64
	calls atomic.Int64
}

func (c *countdown) Err() error {
	if c.calls.Add(1) >= c.after {
		return context.Canceled
	}
	return nil
}

func (c *countdown) Done() <-chan struct{} { return nil }

// LoadContext stops when its context ends, also when that is long after the last file was
// read: validating a large description is the part a person waits for.
func TestLoadContextStopsWhereverItIsCancelled(t *testing.T) {
	t.Parallel()
	g := meshgen.Scaled(500)
	dir := t.TempDir()
	if err := g.Write(dir); err != nil {
		t.Fatal(err)
	}
	ctx := &countdown{Context: context.Background(), after: 1 << 62}
	if _, err := model.LoadContext(ctx, dir); err != nil {
		t.Fatal(err)
	}
	checks := ctx.calls.Load()
	if files := int64(len(g.Files())); checks < 10*files {
		t.Fatalf("a load checked its context %d times for %d files: want checks throughout validation, not only between files", checks, files)
	}
	for _, after := range []int64{1, checks / 2, checks - 1, checks} {
		ctx := &countdown{Context: context.Background(), after: after}
		m, err := model.LoadContext(ctx, dir)
		if !errors.Is(err, context.Canceled) || m != nil {
			t.Errorf("cancelled at check %d of %d: got %v, %v; want context.Canceled and no mesh", after, checks, m != nil, err)
		}
	}
}

// A context already cancelled stops a load of a description with every reference broken
// before it works through the problems.
func TestLoadContextCancelledOnAnInvalidDescription(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, f := range brokenNodes(t, 500) {
		writeFile(t, dir+"/"+f.Name, string(f.Data))
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.Now())
	defer cancel()
	if _, err := model.LoadContext(ctx, dir); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("LoadContext with an ended context = %v, want context.DeadlineExceeded", err)
	}
}
