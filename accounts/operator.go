package accounts

import (
	"github.com/nats-io/nkeys"
)

// Operator is what meshctl holds of a JWT operator to manage the mesh's account (bus.auth:
// jwt): keys that sign in the operator's and the account's name, and a system-account user
// that pushes the account's JWT and reads it back. It is read from an operator store in nsc's
// layout (an admin's, made with nsc or the nats CLI's `nats auth`, or one meshctl made for a
// fresh deployment); docs/operator-mode.md says what each key may do.
//
// It holds seeds: it prints as its public keys only.
type Operator struct {
	// Name and PublicKey (O…) name the operator; JWT is the operator's JWT, which every
	// server trusts.
	Name      string
	PublicKey string
	JWT       string
	// Signer is an operator signing key, or the operator's own key: what signs the mesh's
	// account JWT.
	Signer nkeys.KeyPair
	// SystemAccount is the public key (A…) of the operator's system account, and SystemCreds
	// a creds file of one of its users: the connection that pushes and reads back.
	// SystemAccountJWT is the system account's JWT, which a server must be given before it
	// starts (resolver_preload): the system account carries every push, so no push can bring
	// it.
	SystemAccount    string
	SystemCreds      []byte
	SystemAccountJWT string
	// Account is the mesh's account, AccountJWT the JWT of it the store holds (what an admin
	// made, before meshctl's first push), and UserSigner the account's key or one of its
	// signing keys: what signs the account's users.
	Account    Account
	AccountJWT string
	UserSigner nkeys.KeyPair
}

// String names the operator and the mesh's account by their public keys, never a seed.
func (o Operator) String() string {
	return "operator " + o.Name + " (" + o.PublicKey + "), account " + o.Account.Name + " (" + o.Account.PublicKey + ")"
}

// GoString is String: a %#v must not print a seed either.
func (o Operator) GoString() string { return o.String() }
