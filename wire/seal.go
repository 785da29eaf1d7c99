package wire

import (
	"crypto/rand"
	"errors"
	"fmt"

	"golang.org/x/crypto/nacl/box"
)

// KeySize is the size of a node's public and private X25519 keys.
const KeySize = 32

// ErrUnseal is returned (wrapped) when a sealed membership cannot be opened with the key at
// hand: it was sealed to another key, or it was changed on the way.
var ErrUnseal = errors.New("the sealed membership does not open with this node's key")

// GenerateKey makes a node's key pair.
func GenerateKey() (public, private []byte, err error) {
	pub, priv, err := box.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("making the node's key pair: %w", err)
	}
	return pub[:], priv[:], nil
}

// Seal seals plaintext to a node's public key, anonymously: only the holder of the private key
// can open it, and nothing in it says who sealed it (the bus's permissions say that).
func Seal(public, plaintext []byte) ([]byte, error) {
	pub, err := key(public, "public")
	if err != nil {
		return nil, err
	}
	sealed, err := box.SealAnonymous(nil, plaintext, pub, rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("sealing a membership: %w", err)
	}
	return sealed, nil
}

// Open opens what Seal sealed to public, with its private key.
func Open(public, private, sealed []byte) ([]byte, error) {
	pub, err := key(public, "public")
	if err != nil {
		return nil, err
	}
	priv, err := key(private, "private")
	if err != nil {
		return nil, err
	}
	out, ok := box.OpenAnonymous(nil, sealed, pub, priv)
	if !ok {
		return nil, ErrUnseal
	}
	return out, nil
}

func key(b []byte, which string) (*[KeySize]byte, error) {
	if len(b) != KeySize {
		return nil, fmt.Errorf("a node's %s key is %d bytes, not %d", which, len(b), KeySize)
	}
	var k [KeySize]byte
	copy(k[:], b)
	return &k, nil
}
