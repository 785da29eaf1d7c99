package state

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nkeys"
)

// nkey principals (bus.auth: nkey) keep their public key where a password principal keeps
// its bcrypt hash, in the credentials table's hash column: a principal has one credential of
// one kind, and the two never look alike (a hash begins `$2`, a user's public key `U`). So a
// credential rotated from one kind to the other replaces the row, a revocation deletes it
// whichever kind it is, and the replica's records carry either unchanged. Nothing secret is
// at rest for an nkey principal: the seed exists once, in the membership MintNkeys returns.

// MintNkeys makes an nkey user key pair for each principal, stores its public key (replacing
// any previous credential of that principal, of either kind), and returns the seeds (`SU…`)
// by principal, as Mint returns passwords: in one transaction, duplicates minted once.
func (s *Store) MintNkeys(ctx context.Context, principals []string, operation string) (map[string]string, error) {
	return s.mintAndStore(ctx, principals, 0, true, operation)
}

// newNkeys fills in a fresh user key pair for every entry: the seed as its secret, the
// public key as what the store keeps.
func newNkeys(entries []minted) error {
	for i := range entries {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return fmt.Errorf("making the nkey of %s: %w", entries[i].principal, err)
		}
		seed, err := kp.Seed()
		if err != nil {
			return fmt.Errorf("making the nkey of %s: %w", entries[i].principal, err)
		}
		public, err := kp.PublicKey()
		if err != nil {
			return fmt.Errorf("making the nkey of %s: %w", entries[i].principal, err)
		}
		// Copied out before Wipe, which overwrites the key pair's seed in place.
		entries[i].password, entries[i].hash = string(seed), public
		kp.Wipe()
	}
	return nil
}

// NkeyPrincipals returns a lookup from an nkey user's public key to its principal, for what
// reads the server's words about a client: the server names an nkey client by its public key
// (`"MESH/nkey:U…"`), and an operator by its principal. A key is looked up in the store the
// first time it is asked for and remembered: the server logs a refusal on its own goroutines,
// as often as a client repeats it, and a key names one principal for ever. A key the store
// does not hold (revoked, or never this store's) is not found.
func (s *Store) NkeyPrincipals() func(publicKey string) (string, bool) {
	var mu sync.Mutex
	known := map[string]string{}
	return func(publicKey string) (string, bool) {
		if !nkeys.IsValidPublicUserKey(publicKey) {
			return "", false
		}
		mu.Lock()
		defer mu.Unlock()
		if p, ok := known[publicKey]; ok {
			return p, true
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var p string
		if err := s.db.QueryRowContext(ctx, "SELECT principal FROM credentials WHERE hash = ?", publicKey).Scan(&p); err != nil {
			return "", false
		}
		known[publicKey] = p
		return p, true
	}
}
