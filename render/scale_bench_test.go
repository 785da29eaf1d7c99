package render_test

import (
	"testing"

	"github.com/meshbus/meshctl/bench/meshgen"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

func loadGenerated(b *testing.B, g meshgen.Mesh) *model.Mesh {
	b.Helper()
	m, err := model.Parse(g.Files())
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkDerive derives principals, grants, streams and consumers from a loaded mesh.
func BenchmarkDerive(b *testing.B) {
	for _, n := range meshgen.Sizes {
		g := meshgen.Scaled(n)
		b.Run(g.String(), func(b *testing.B) {
			m := loadGenerated(b, g)
			for b.Loop() {
				render.Derive(m)
			}
		})
	}
}

// BenchmarkAccountsConfig renders the accounts config of a derived mesh with a stored hash
// for every principal: rendering copies hashes, it never computes one.
func BenchmarkAccountsConfig(b *testing.B) {
	for _, n := range meshgen.Sizes {
		g := meshgen.Scaled(n)
		b.Run(g.String(), func(b *testing.B) {
			d := render.Derive(loadGenerated(b, g))
			hashes := map[string]string{}
			for _, u := range d.Users() {
				hashes[u] = "$2a$11$abcdefghijklmnopqrstuuJ0nGJ3tyf9wUcyrV5M5lY9k2pDrNw6C"
			}
			for b.Loop() {
				render.AccountsConfig(d.Principals, hashes)
			}
		})
	}
}

// BenchmarkValidateDeriveRender is what every command pays before it talks to a bus: the
// description read from disk and validated, the bus derived, the accounts config rendered.
func BenchmarkValidateDeriveRender(b *testing.B) {
	for _, n := range meshgen.Sizes {
		g := meshgen.Scaled(n)
		b.Run(g.String(), func(b *testing.B) {
			dir := b.TempDir()
			if err := g.Write(dir); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				m, err := model.Load(dir)
				if err != nil {
					b.Fatal(err)
				}
				d := render.Derive(m)
				render.AccountsConfig(d.Principals, nil)
			}
		})
	}
}
