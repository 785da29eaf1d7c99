package render

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"golang.org/x/crypto/bcrypt"
)

// startWithAccounts starts a real nats-server from a config file that includes the
// rendered accounts file, as an operator's server would.
func startWithAccounts(t *testing.T, accounts []byte) *server.Server {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "accounts.conf"), accounts, 0o600); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf("listen: \"127.0.0.1:-1\"\njetstream { store_dir: %q }\ninclude \"accounts.conf\"\n", filepath.Join(dir, "js"))
	path := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("the server's parser refused the rendered config: %v", err)
	}
	opts.NoSigs, opts.NoLog = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("a server with the rendered config does not start: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("the server did not become ready")
	}
	t.Cleanup(s.Shutdown)
	return s
}

func TestTheRenderedConfigStartsARealServer(t *testing.T) {
	t.Parallel()
	d := Derive(mustLoad(t, "../examples/seed"))
	hash, err := bcrypt.GenerateFromPassword([]byte("audit-password"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	s := startWithAccounts(t, AccountsConfig(d.Principals, map[string]string{"two.audit": string(hash)}))

	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("two.audit", "audit-password"),
		nats.CustomInboxPrefix(Inbox("two.audit")))
	if err != nil {
		t.Fatalf("a principal with a stored hash cannot log in: %v", err)
	}
	defer nc.Close()
	// The server holds the user to its list: a followed subject may be heard, and the
	// connection stays healthy after subscribing to it.
	if _, err := nc.SubscribeSync("mesh.mod.shop.event.order.placed"); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil || nc.LastError() != nil {
		t.Fatalf("subscribing to a followed event was refused: %v %v", err, nc.LastError())
	}
}

// A principal never issued a credential has a locked entry: no password opens it.
func TestALockedEntryOpensForNoPassword(t *testing.T) {
	t.Parallel()
	d := Derive(mustLoad(t, "../examples/seed"))
	s := startWithAccounts(t, AccountsConfig(d.Principals, nil))
	for _, pw := range []string{"", "x", LockedHash, "!locked:no-credential-has-been-issued"} {
		nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("node.one", pw), nats.NoReconnect())
		if err == nil {
			nc.Close()
			t.Fatalf("node.one logged in with password %q through a locked entry", pw)
		}
	}
	nc, err := nats.Connect(s.ClientURL(), nats.NoReconnect())
	if err == nil {
		nc.Close()
		t.Fatal("an anonymous connection was accepted by a server with the mesh's accounts")
	}
}
