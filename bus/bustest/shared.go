package bustest

import (
	"fmt"
	"os"
	"sync"

	"github.com/nats-io/nkeys"

	"github.com/meshbus/meshctl/internal/testnats"
)

// The operator's own accounts on a bus meshctl shares (bus.accounts: account): an account
// OTHER with a user of its own, and the system account SYS with the operator's system user —
// by password, and a second one by nkey (OperatorSystemSeed) — both in each server's config, which includes meshctl's file of the MESH account inside its
// accounts block.
const (
	OtherAccount           = "OTHER"
	OtherUser              = "other-app"
	OtherPassword          = "other-secret"
	OperatorSystemUser     = "ops"
	OperatorSystemPassword = "ops-secret"
)

// OperatorSystemSeed is the nkey seed of the operator's system user by nkey, made once for the
// test process.
var OperatorSystemSeed = sync.OnceValue(func() string {
	kp, err := nkeys.CreateUser()
	if err != nil {
		panic(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		panic(err)
	}
	return string(seed)
})

// sharedAccounts is the accounts part of each server's config on a shared bus.
func sharedAccounts() string {
	kp, err := nkeys.FromSeed([]byte(OperatorSystemSeed()))
	if err != nil {
		panic(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		panic(err)
	}
	return fmt.Sprintf(`accounts {
  %s { users: [ { user: %q, password: %q } ] }
  SYS { users: [ { user: %q, password: %q }, { nkey: %q } ] }
  include "mesh-accounts.conf"
}
system_account: SYS
`, OtherAccount, OtherUser, OtherPassword, OperatorSystemUser, OperatorSystemPassword, pub)
}

// StartSharedTestCluster is StartTestCluster on a bus shared with the operator's own accounts
// (above): one server alone for n 1. Each server's accounts file starts as the operator's
// would, the MESH account with nobody in it.
func StartSharedTestCluster(tb testnats.TB, n int) *TestCluster {
	tb.Helper()
	c := newTestCluster(tb, n, sharedAccounts())
	for _, srv := range c.Servers {
		if err := os.WriteFile(srv.AccountsFile, []byte("MESH { jetstream: enabled }\n"), 0o600); err != nil {
			tb.Fatalf("%v", err)
		}
	}
	c.StartAll()
	return c
}
