package reconcile

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/bench/meshgen"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// BenchmarkControllerCanLogIn is the decision every command makes before it dials, on the
// accounts file of a generated mesh (7,001 users at 5,000 instances) with the controller at
// the product's cost: "known" is the file meshctl wrote, "parsed" the fallback that reads and
// bcrypt-compares it (a file edited by hand, or written before the record held the hash).
func BenchmarkControllerCanLogIn(b *testing.B) {
	for _, n := range []int{5000, 20000} {
		g := meshgen.Scaled(n)
		b.Run(g.String(), func(b *testing.B) {
			ctx := context.Background()
			m, err := model.Parse(g.Files())
			if err != nil {
				b.Fatal(err)
			}
			dir := b.TempDir()
			st, err := state.Open(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			pw, err := st.ControllerPassword(ctx, 11)
			if err != nil {
				b.Fatal(err)
			}
			hashes, err := st.Hashes(ctx)
			if err != nil {
				b.Fatal(err)
			}
			path := filepath.Join(dir, "bus", "accounts.conf")
			a := accounts.File{Path: path, StateDir: dir}
			if err := a.Install(render.AccountsConfig(render.Derive(m).Principals, hashes)); err != nil {
				b.Fatal(err)
			}
			s := &Session{Store: st, password: pw}
			b.Run("known", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if !s.controllerCanLogIn(path) {
						b.Fatal("the controller cannot log in")
					}
				}
			})
			b.Run("parsed", func(b *testing.B) {
				// Not the file meshctl wrote: decided from the file, by a parse and bcrypt.
				conf, err := os.ReadFile(path)
				if err != nil {
					b.Fatal(err)
				}
				if err := os.WriteFile(path, append([]byte("# edited by hand\n"), conf...), 0o600); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					if !s.controllerCanLogIn(path) {
						b.Fatal("the controller cannot log in")
					}
				}
			})
		})
	}
}
