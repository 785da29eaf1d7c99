package agent

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/host/hosttest"
	"github.com/meshbus/meshctl/wire"
)

// An nkey principal's membership carries a seed in place of the password. The agent writes an
// instance's sealed seed membership as the controller sealed it, byte for byte and 0600, and
// reads the node's own seed membership as it reads a password one.
func TestAnAgentPassesSeedMembershipsThrough(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pub, priv, err := wire.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	a := &agent{cfg: Config{Dir: dir}, log: slog.New(slog.DiscardHandler), node: "one", key: key{Public: pub, Private: priv}}

	instance, err := json.Marshal(host.Membership{Address: "nats://127.0.0.1:4222", User: "one.shop", Seed: hosttest.UserSeed(t)})
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := wire.Seal(pub, instance)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.write(wire.Instance{User: "one.shop", Module: "shop", Membership: sealed}); err != nil {
		t.Fatalf("writing a seed membership: %v", err)
	}
	path := filepath.Join(dir, "one.shop.json")
	written, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(written) != string(instance) {
		t.Errorf("the agent wrote %s, not the membership sealed to it: %s", written, instance)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the membership file's mode: %v, %v; want 0600", fi.Mode().Perm(), err)
	}

	nodeSeed := hosttest.UserSeed(t)
	own, err := json.Marshal(host.Membership{Address: "nats://127.0.0.1:4222", User: "node.one", Seed: nodeSeed})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "node.one.json"), own, 0o600); err != nil {
		t.Fatal(err)
	}
	node, m, enrolled, err := nodeMembership(context.Background(), a.cfg, a.key, a.log)
	if err != nil || node != "one" || enrolled || m.Seed != nodeSeed || m.Password != "" {
		t.Fatalf("the node's own seed membership read as node %q, enrolled %v, %v: %v", node, enrolled, m, err)
	}
}
