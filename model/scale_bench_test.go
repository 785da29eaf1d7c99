package model_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/meshbus/meshctl/bench/meshgen"
	"github.com/meshbus/meshctl/model"
)

// BenchmarkLoad reads a generated description from disk, parses and validates it: the first
// stage of every command.
func BenchmarkLoad(b *testing.B) {
	for _, n := range meshgen.Sizes {
		g := meshgen.Scaled(n)
		b.Run(g.String(), func(b *testing.B) {
			dir := b.TempDir()
			if err := g.Write(dir); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := model.Load(dir); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLoadEveryNodeReferenceBroken loads a generated description whose nodes were all
// renamed, as one sed over nodes.yaml does: every `on` and every holder names an undeclared
// node, thousands of problems, each a name to match against every node for "did you mean".
// Suggestions are worked out only for the problems reported, so this costs about what
// loading the valid description does.
func BenchmarkLoadEveryNodeReferenceBroken(b *testing.B) {
	for _, n := range meshgen.Sizes {
		g := meshgen.Scaled(n)
		b.Run(g.String(), func(b *testing.B) {
			dir := b.TempDir()
			for _, f := range brokenNodes(b, n) {
				writeFile(b, filepath.Join(dir, filepath.FromSlash(f.Name)), string(f.Data))
			}
			for b.Loop() {
				_, err := model.Load(dir)
				var lerr *model.LoadError
				if !errors.As(err, &lerr) || lerr.Total < n {
					b.Fatalf("want at least %d problems, got %v", n, err)
				}
			}
		})
	}
}
