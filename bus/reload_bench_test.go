package bus

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"golang.org/x/crypto/bcrypt"
)

// BenchmarkReloadWithClients is the server's reload of an unchanged config with 20 clients
// connected, each its own user, at bcrypt's least cost and at nats-server's own default: a
// reload checks every connection against the users again, one bcrypt after another, so its
// time is the cost times the clients (state.DefaultCost says why meshctl mints at the least).
func BenchmarkReloadWithClients(b *testing.B) {
	const clients = 20
	for _, cost := range []int{bcrypt.MinCost, 11} {
		b.Run(fmt.Sprintf("cost=%d", cost), func(b *testing.B) {
			dir := b.TempDir()
			var users []string
			for i := range clients {
				h, err := bcrypt.GenerateFromPassword([]byte(fmt.Sprintf("password-%d", i)), cost)
				if err != nil {
					b.Fatal(err)
				}
				users = append(users, fmt.Sprintf(`{user: u%d, password: "%s"}`, i, h))
			}
			if err := os.WriteFile(filepath.Join(dir, "accounts.conf"), []byte("accounts { MESH { users: ["+strings.Join(users, ", ")+"] } }\n"), 0o600); err != nil {
				b.Fatal(err)
			}
			conf := filepath.Join(dir, "server.conf")
			if err := os.WriteFile(conf, []byte("listen: \"127.0.0.1:-1\"\ninclude \"accounts.conf\"\n"), 0o600); err != nil {
				b.Fatal(err)
			}
			opts, err := server.ProcessConfigFile(conf)
			if err != nil {
				b.Fatal(err)
			}
			opts.NoSigs, opts.NoLog = true, true
			s, err := server.NewServer(opts)
			if err != nil {
				b.Fatal(err)
			}
			go s.Start()
			defer s.Shutdown()
			if !s.ReadyForConnections(10 * time.Second) {
				b.Fatal("the server did not start")
			}
			for i := range clients {
				nc, err := nats.Connect(s.ClientURL(), nats.UserInfo(fmt.Sprintf("u%d", i), fmt.Sprintf("password-%d", i)))
				if err != nil {
					b.Fatal(err)
				}
				defer nc.Close()
			}
			b.ResetTimer()
			for b.Loop() {
				if err := s.Reload(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
