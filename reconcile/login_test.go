package reconcile

import (
	"bytes"
	"os"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/render"
)

// TestControllerKnownToLogIn: the file meshctl wrote, carrying the store's controller hash, is
// known to let the controller in without a parse or bcrypt; a file edited by hand, or a
// controller minted anew, is decided from the file again, and a session still gets in.
func TestControllerKnownToLogIn(t *testing.T) {
	f := newFixture(t, quickMesh)
	ctx := testContext(t)
	s := f.connect(ctx)
	f.mustApply(ctx, s)
	path := s.Accounts.Path
	conf, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	hashes, err := f.store.Hashes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h := hashes[render.ControllerUser]; h == "" || !bytes.Contains(conf, []byte(h)) {
		t.Fatal("the file meshctl wrote does not carry the store's controller hash")
	}
	if !s.knownToLetControllerIn(path, conf) {
		t.Fatal("the file meshctl wrote, with the store's controller hash, is not known to let the controller in")
	}

	edited := append([]byte("# edited by hand\n"), conf...)
	if s.knownToLetControllerIn(path, edited) {
		t.Error("a file edited by hand is taken for the one meshctl wrote")
	}

	// The controller minted anew: the store's hash is no longer the file's.
	if _, err := f.store.Mint(ctx, []string{render.ControllerUser}, bcrypt.MinCost, "test"); err != nil {
		t.Fatal(err)
	}
	if s.knownToLetControllerIn(path, conf) {
		t.Error("a file carrying the controller's previous hash is known to let the new one in")
	}
}
