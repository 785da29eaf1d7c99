package hosttest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/testnats/opmode"
)

// JWTAccount is a mesh's account on operator-mode servers (bus.auth: jwt), as the operator's
// store would hold it: the account, its JWT signed by the operator's signing key and pushed to
// every server over the system account, and the account's key that signs its users. Its
// users log in with a user JWT and the seed of its subject, as an operator-mode membership
// carries them.
type JWTAccount struct {
	Cluster *opmode.Cluster
	Account accounts.Account
	// Resolver pushes the account's JWT to every server and reads it back.
	Resolver accounts.Resolver

	operatorKey, accountKey nkeys.KeyPair

	mu    sync.Mutex
	token string // the account JWT last pushed
}

// StartJWTAccount starts n operator-mode servers (opmode.StartCluster, whose operator the nats
// CLI made) and pushes a mesh account to them, its JetStream unlimited. Everything stops when
// t ends.
func StartJWTAccount(t testing.TB, n int) *JWTAccount {
	t.Helper()
	c := opmode.StartCluster(t, opmode.ClusterOptions{Servers: n})
	accountKey, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := accountKey.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	a := &JWTAccount{
		Cluster: c,
		Account: accounts.Account{Name: "MESH", PublicKey: pub,
			JetStream: jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}},
		// Every server is up unless a test stops one: Wait only bounds a hang.
		Resolver:    accounts.Resolver{Conn: c.ConnectSystem(), Servers: c.Names(), Wait: time.Minute},
		operatorKey: c.Operator.SigningKey(t),
		accountKey:  accountKey,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := a.Push(ctx); err != nil {
		t.Fatal(err)
	}
	return a
}

// Push signs the account's successor of the JWT last pushed, revoking the users of revoke
// (public keys) as of now, and pushes it; its error says which server did not store it. A
// push with nothing revoked is what every change of a jwt mesh does to its connected hosts.
func (a *JWTAccount) Push(ctx context.Context, revoke ...string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	token, err := a.Account.Encode(a.operatorKey, a.token, time.Now(), revoke...)
	if err != nil {
		return err
	}
	res, err := a.Resolver.Push(ctx, token)
	if err == nil {
		err = res.Err()
	}
	if err != nil {
		return fmt.Errorf("pushing the mesh's account JWT: %w", err)
	}
	a.token = token
	return nil
}

// Mint is a fresh credential of the account's user name, granted exactly g.
func (a *JWTAccount) Mint(t testing.TB, name string, g accounts.Grants) accounts.Creds {
	t.Helper()
	creds, err := a.Account.MintUser(a.accountKey, name, g)
	if err != nil {
		t.Fatal(err)
	}
	return creds
}

// Target is every server, the first as a membership's address.
func (a *JWTAccount) Target() busclient.Target {
	var servers []busclient.Target
	for _, url := range a.Cluster.URLs() {
		servers = append(servers, busclient.Target{URL: url})
	}
	return busclient.Cluster(servers)
}

// Membership is what `meshctl credentials issue` prints for user holding creds in operator
// mode: the servers, the seed and the user JWT.
func (a *JWTAccount) Membership(t testing.TB, user string, creds accounts.Creds) host.Membership {
	t.Helper()
	return host.MembershipOf(a.Target(), user, SeedOf(t, creds), true).WithJWT(creds.JWT)
}

// SeedOf is the user seed a creds file holds.
func SeedOf(t testing.TB, creds accounts.Creds) string {
	t.Helper()
	kp, err := jwt.ParseDecoratedUserNKey(creds.File)
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	return string(seed)
}

// UserJWT is a user JWT for seed's public key, signed by a throwaway account: one a membership
// can carry, which no server trusts.
func UserJWT(t testing.TB, seed string) string {
	t.Helper()
	kp, err := nkeys.FromSeed([]byte(seed))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	account, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	token, err := jwt.NewUserClaims(pub).Encode(account)
	if err != nil {
		t.Fatal(err)
	}
	return token
}
