package state

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"

	"github.com/meshbus/meshctl/internal/atomicfile"
)

// Knowing, without bcrypt, that controller.password matches the stored hash.
//
// Every command reads the controller's password and checks it against the stored hash, because
// the two can disagree (a file replaced, or restored from elsewhere) and a disagreeing pair must
// be refused (ControllerMismatchError). At cost 11 (a controller minted by
// an earlier meshctl, or at an operator's --bcrypt-cost) that check is a tenth of a second of
// every converged command. So once the pair is known to match — minted together, or
// checked with bcrypt once — controller.verified records a SHA-256 of the hash and the password
// together; a command then compares that digest instead. Either half changed gives another
// digest, and the pair is checked with bcrypt again. The digest says nothing usable about the
// password: it is 130 random bits, beyond any search of a SHA-256, and the file sits beside
// controller.password itself, 0600. It guards against nothing an attacker who writes the state
// directory could not do anyway (write the hash and the password); it only saves the work.
// meshctl's system user's pair (its password derived from the controller's) is known the same
// way, in system.verified.

const controllerVerifiedFileName = "controller.verified"

// verifiedFile is where the record of o's pair is kept: controller.verified beside
// controller.password.
func (o own) verifiedFile() string {
	return strings.TrimSuffix(o.file, ".password") + ".verified"
}

func (o own) verifier(hash, password string) []byte {
	sum := sha256.Sum256([]byte("meshctl " + o.file + " matches\x00" + hash + "\x00" + password))
	return []byte(hex.EncodeToString(sum[:]))
}

// knownToMatch reports whether o's record holds this hash and password as a pair.
func (s *Store) knownToMatch(o own, hash, password string) bool {
	data, err := os.ReadFile(filepath.Join(s.dir, o.verifiedFile()))
	return err == nil && subtle.ConstantTimeCompare(bytes.TrimSpace(data), o.verifier(hash, password)) == 1
}

// rememberMatch records hash and password as a pair known to match. A failure to record only
// costs the next command a bcrypt check, so it is not an error.
func (s *Store) rememberMatch(o own, hash, password string) {
	_ = atomicfile.Write(filepath.Join(s.dir, o.verifiedFile()), append(o.verifier(hash, password), '\n'))
}
