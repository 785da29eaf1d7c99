package accounts

import (
	"bytes"
	"context"
	"sync"

	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// Whether the accounts config lets the controller in, without bcrypt.
//
// Deciding it from the file costs a parse of every user (3 MB at 5,000 instances) and a bcrypt
// comparison at the controller's cost, on every command. But a file meshctl wrote is known: the
// generation record holds its digest and the controller hash it carries. When the file on disk
// is that file and the store's controller hash is that hash, the controller's password — which
// the store has already checked against its hash, or just minted with it — opens it. A file
// edited by hand no longer has the digest, and a controller credential rotated no longer has
// the hash; either is then decided from the file as before.

// controllerBlock is how render writes the controller's entry, around its hash.
var controllerBlock = sync.OnceValues(func() (layout, error) { return userBlock(render.ControllerUser) })

// controllerHashIn returns the controller's hash in a rendering of render's, "" when it has no
// controller entry.
func controllerHashIn(rendered []byte) string {
	l, err := controllerBlock()
	if err != nil {
		return ""
	}
	// The quote before the name makes it the controller's entry and no other's; no subject
	// holds `{ user: "`.
	i := bytes.Index(rendered, l.before)
	if i < 0 {
		return ""
	}
	rest := rendered[i+len(l.before):]
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return ""
	}
	return string(rest[:end])
}

// KnownToAdmitController reports whether the file at path, whose digest is sum, is the one meshctl
// last wrote there for a's server and carries the controller hash store holds now. False means
// "not known", never "refused".
func KnownToAdmitController(store *state.Store, a File, path, sum string) bool {
	server := "" // the embedded bus's, and a single bus.url's
	if path == a.Path {
		server = a.Server
	}
	g, ok := loadGeneration(store.Dir(), server)
	if !ok || g.Controller == "" || !g.describesDigest(path, sum) {
		return false
	}
	// No context reaches here: a read of the local store, never a wait on the bus.
	hashes, err := store.Hashes(context.Background())
	return err == nil && hashes[render.ControllerUser] == g.Controller
}

// AdmitsController reports whether the accounts config data lets the controller in with
// password.
func AdmitsController(data []byte, password string) bool {
	users, err := parseUsers(data)
	if err != nil {
		return false
	}
	u, ok := users[render.ControllerUser]
	return ok && bcrypt.CompareHashAndPassword([]byte(u.Password), []byte(password)) == nil
}
