package controller

import (
	"encoding/json"

	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/wire"
)

// membershipOf is user's membership with its freshly minted secret: a password, or where the
// mesh's hosts log in with nkeys (bus.auth: nkey) the seed of its nkey, sealed to the node
// like a password, and like it never logged or kept. The bus is recognised as the controller's
// own connection recognises it: its pins or its CA, and the client certificate it presents.
func (l *loop) membershipOf(user, secret string) wire.Membership {
	return host.MembershipOf(l.cfg.Target, user, secret, l.mesh.Bus.Nkeys())
}

// sealedMembership is m, a membership with its freshly minted secret, sealed (wire.Seal) to
// key, the public key of the node it goes to.
func sealedMembership(key []byte, m wire.Membership) ([]byte, error) {
	membership, _ := json.Marshal(m)
	return wire.Seal(key, membership)
}
