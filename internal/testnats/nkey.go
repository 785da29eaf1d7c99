package testnats

import "github.com/nats-io/nkeys"

// UserPublicKey is the public key of a fresh nkey user pair, for a test's rendering of an nkey
// principal: its seed is thrown away, as the store throws away every seed it mints.
func UserPublicKey(tb TB) string {
	tb.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		tb.Fatalf("making an nkey user: %v", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		tb.Fatalf("making an nkey user: %v", err)
	}
	return pub
}
