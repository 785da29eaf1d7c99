package reconcile

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/meshbus/meshctl/bench/meshgen"
	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// BenchmarkCheckAccounts is the server's parser check of a whole generated accounts config
// (7,001 and 28,001 users), as bus.CheckAccounts makes it ("file": two files and
// ProcessConfigFile, which also digests them) and as the parser alone with the accounts
// inlined ("string": ProcessConfigString).
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
			b.Run("file", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if err := bus.CheckAccounts(conf, dir); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("string", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					o := &server.Options{}
					if err := o.ProcessConfigString("listen: \"127.0.0.1:-1\"\njetstream {\n  store_dir: \"/tmp/x\"\n}\n" + string(conf)); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
