package bustest

import (
	"context"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/internal/testnats"
)

// openAccounts configures no account at all, so the server keeps its global account, which
// JetStream is enabled on when no other account exists, and requires no auth.
const openAccounts = "# No accounts: an open bus for tests that do not exercise auth.\n"

// StartTestBus starts an embedded bus for one test: on a random 127.0.0.1 port, in tb.TempDir(),
// stopped by tb.Cleanup. accounts is the accounts config text; nil starts an open bus with
// JetStream and no auth. One server per test, never a shared one: parallel tests on one bus
// deleted each other's objects by their fixed names.
func StartTestBus(tb testnats.TB, accounts []byte) *bus.Embedded {
	tb.Helper()
	if accounts == nil {
		accounts = []byte(openAccounts)
	}
	e, err := bus.StartEmbedded(context.Background(), bus.EmbeddedOptions{
		StateDir:        tb.TempDir(),
		Listen:          "127.0.0.1:-1",
		ServerName:      "meshctl-test",
		InitialAccounts: accounts,
	})
	if err != nil {
		tb.Fatalf("starting a test bus: %v", err)
	}
	tb.Cleanup(e.Shutdown)
	return e
}
