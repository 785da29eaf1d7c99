package state

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/bcrypt"
)

// publicKeyOf is the public key of an nkey seed.
func publicKeyOf(t *testing.T, seed string) string {
	t.Helper()
	kp, err := nkeys.FromSeed([]byte(seed))
	if err != nil {
		t.Fatalf("not an nkey seed: %v", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(seed, "SU") || !nkeys.IsValidPublicUserKey(pub) {
		t.Fatalf("not a user's seed and key: %.2s…, %s", seed, pub)
	}
	return pub
}

// MintNkeys keeps each principal's public key where a password's hash is kept, replacing the
// credential of either kind, and nothing secret: the seed is only in what it returns.
func TestMintNkeysKeepsOnlyThePublicKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.Mint(ctx, []string{"alpha.shop"}, bcrypt.MinCost, "issue"); err != nil {
		t.Fatal(err)
	}
	seeds, err := s.MintNkeys(ctx, []string{"alpha.shop", "node.alpha", "alpha.shop"}, "credentials issue")
	if err != nil || len(seeds) != 2 {
		t.Fatalf("MintNkeys = %d seeds, %v", len(seeds), err)
	}
	hashes, err := s.Hashes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for p, seed := range seeds {
		if hashes[p] != publicKeyOf(t, seed) {
			t.Errorf("%s: the store keeps %q, not the public key of the seed handed out", p, hashes[p])
		}
	}
	creds, err := s.Credentials(ctx)
	if err != nil || len(creds) != 2 || creds[0].Operation != "credentials issue" {
		t.Errorf("Credentials = %+v, %v", creds, err)
	}
	again, err := s.MintNkeys(ctx, []string{"alpha.shop"}, "credentials rotate")
	if err != nil || again["alpha.shop"] == seeds["alpha.shop"] {
		t.Fatalf("rotating minted the same seed, or failed: %v", err)
	}
	if had, err := s.Revoke(ctx, "node.alpha"); !had || err != nil {
		t.Fatalf("Revoke = %v, %v", had, err)
	}
	hashes, _ = s.Hashes(ctx)
	if _, ok := hashes["node.alpha"]; ok || hashes["alpha.shop"] != publicKeyOf(t, again["alpha.shop"]) {
		t.Errorf("after a rotation and a revocation the store holds %v", hashes)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(s.Dir(), "*"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, seed := range []string{seeds["alpha.shop"], seeds["node.alpha"], again["alpha.shop"]} {
			if bytes.Contains(data, []byte(seed)) {
				t.Errorf("%s holds a seed", f)
			}
		}
	}
	snapshotless := openStore(t, s.Dir())
	records, err := snapshotless.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range records {
		if bytes.Contains(r.Value, []byte(again["alpha.shop"])) {
			t.Errorf("the record %s holds a seed", r.Key)
		}
	}
}

// An nkey enrolment hands out the node's seed, and keeps its public key.
func TestAnNkeyEnrolmentKeepsTheNodesPublicKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.MintNkeys(ctx, []string{"enrol.one"}, "issue"); err != nil {
		t.Fatal(err)
	}
	seed, err := s.EnrolNode(ctx, NodeEnrolment{Node: "one", EnrolPrincipal: "enrol.one", NodePrincipal: "node.one",
		PublicKey: []byte("key-1"), Nkey: true}, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	hashes, _ := s.Hashes(ctx)
	if hashes["node.one"] != publicKeyOf(t, seed) {
		t.Errorf("the node's stored credential %q is not its seed's public key", hashes["node.one"])
	}
	if _, has := hashes["enrol.one"]; has {
		t.Error("the enrolment credential is still stored after it was used")
	}
}

// The server names an nkey client by its public key; the store names its principal, for keys
// minted before the lookup was made and after, and for nothing else.
func TestNkeyPrincipalsNamesTheKeysPrincipal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	first, err := s.MintNkeys(ctx, []string{"alpha.shop"}, "issue")
	if err != nil {
		t.Fatal(err)
	}
	lookup := s.NkeyPrincipals()
	later, err := s.MintNkeys(ctx, []string{"node.beta"}, "issue")
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{publicKeyOf(t, first["alpha.shop"]): "alpha.shop", publicKeyOf(t, later["node.beta"]): "node.beta"} {
		if got, ok := lookup(key); !ok || got != want {
			t.Errorf("lookup(%s) = %q, %v; want %q", key, got, ok, want)
		}
	}
	stranger, _ := nkeys.CreateUser()
	pub, _ := stranger.PublicKey()
	hashes, _ := s.Hashes(ctx)
	for _, key := range []string{pub, "", "not a key", hashes["alpha.shop"][:20]} {
		if got, ok := lookup(key); ok {
			t.Errorf("lookup(%q) = %q; want nothing", key, got)
		}
	}
}

// RevokeAll revokes each principal, recording each revocation.
func TestRevokeAllRevokesEach(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.Mint(ctx, []string{"a.x", "b.x", "c.x"}, bcrypt.MinCost, "issue"); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeAll(ctx, []string{"a.x", "b.x", "never.issued"}); err != nil {
		t.Fatal(err)
	}
	hashes, _ := s.Hashes(ctx)
	known, _ := s.Known(ctx)
	if len(hashes) != 1 || hashes["c.x"] == "" || !known["a.x"] || !known["b.x"] || !known["never.issued"] {
		t.Errorf("after RevokeAll: hashes %v, known %v", hashes, known)
	}
}
