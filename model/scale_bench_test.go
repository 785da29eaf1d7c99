package model_test

import (
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
