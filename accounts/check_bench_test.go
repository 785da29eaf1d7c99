package accounts

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/meshbus/meshctl/bench/meshgen"
	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// BenchmarkCheckAccounts is the server's parser check of a whole generated accounts config
// (7,001 and 28,001 users), as bus.CheckAccounts makes it before every change is installed.
func BenchmarkCheckAccounts(b *testing.B) {
	for _, n := range []int{5000, 20000} {
		g := meshgen.Scaled(n)
		b.Run(g.String(), func(b *testing.B) {
			m, err := model.Parse(g.Files())
			if err != nil {
				b.Fatal(err)
			}
			conf := render.AccountsConfig(render.Derive(m).Principals, map[string]string{})
			dir := b.TempDir()
			b.ReportAllocs()
			for b.Loop() {
				if err := bus.CheckAccounts(conf, dir); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReloadAccounts is the server's own reload of a whole generated accounts config on
// the embedded bus (reload: from accounts.conf, as the control socket, watch and a restore ask
// for it), the check and reload of a change in the process that serves the bus (checked: one
// parse for both, Embedded.CheckAccounts), and the proof that follows either (one login as the
// generation principal).
func BenchmarkReloadAccounts(b *testing.B) {
	for _, n := range []int{5000, 20000} {
		g := meshgen.Scaled(n)
		b.Run(g.String(), func(b *testing.B) {
			m, err := model.Parse(g.Files())
			if err != nil {
				b.Fatal(err)
			}
			dir := b.TempDir()
			conf := render.AccountsConfig(render.Derive(m).Principals, map[string]string{})
			stamped, gen, err := File{Path: filepath.Join(dir, "bus", "accounts.conf")}.stamp(conf, digest(conf))
			if err != nil {
				b.Fatal(err)
			}
			e, err := bus.StartEmbedded(context.Background(), bus.EmbeddedOptions{StateDir: dir, Listen: "127.0.0.1:-1", InitialAccounts: stamped})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Shutdown()
			b.Run("reload", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if err := e.Reload(); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("checked", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					checked, err := e.CheckAccounts(stamped)
					if err != nil {
						b.Fatal(err)
					}
					if err := checked.Reload(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("proof", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if err := proveOnce(context.Background(), busclient.Target{URL: e.URL()}, gen); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
