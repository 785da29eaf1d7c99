package model

import (
	"path/filepath"

	"gopkg.in/yaml.v3"
)

// AuthJWT is bus.auth: jwt: the servers run in operator mode and the mesh is one account of
// the operator's, whose JWT meshctl signs and pushes to the servers' resolver; each principal
// is a user of that account holding a user JWT and its nkey seed (docs/operator-mode.md).
const AuthJWT = "jwt"

// DefaultOperatorAccount is the mesh's account in the operator's store when bus.operator does
// not name one.
const DefaultOperatorAccount = "MESH"

// JWT reports whether the servers run in operator mode and the mesh's hosts log in with user
// JWTs.
func (b Bus) JWT() bool { return b.Auth == AuthJWT }

// Operator is bus.operator: where meshctl finds the operator whose account the mesh is, in an
// nsc or `nats auth` store an admin keeps. Every path is absolute once Load returns it (Parse,
// which has no directory, leaves them relative to the description's root), resolved against
// the directory of the file that names it.
type Operator struct {
	// Store is the store's root: the directory holding stores/ and keys/.
	Store string
	// Name is the operator in the store; "" when the store holds one.
	Name string
	// Account is the mesh's account in the store, DefaultOperatorAccount unless named.
	Account string
	// SystemCreds is a creds file of a system-account user: what pushes the account's JWT
	// and reads it back on every server.
	SystemCreds string
	// SigningKey and AccountKey, when set, are seed files that override the store's: an
	// operator signing key (signs the account JWT), and the account's key or one of its
	// signing keys (signs the account's users).
	SigningKey, AccountKey string
	Pos                    Pos
}

type rawOperator struct {
	store, name, account, systemCreds, signingKey, accountKey name
	pos                                                       Pos
}

var operatorSection = newSection("bus.operator", []key{
	{name: "store", kind: scalarValue, required: true, doc: "The root of the operator's nsc or `nats auth` store: the directory holding stores/ and keys/. Relative to this file's directory."},
	{name: "name", kind: scalarValue, doc: "The operator in the store; optional when the store holds one."},
	{name: "account", kind: scalarValue, doc: "The mesh's account in the store, which an admin made (MESH by default). meshctl signs and pushes this account's JWT and no other."},
	{name: "system_creds", kind: scalarValue, doc: "Creds file of a system-account user, which pushes the account's JWT and reads it back on every server. Required on an external bus. Relative to this file's directory."},
	{name: "signing_key", kind: scalarValue, doc: "Seed file of an operator signing key, where the store does not hold one: it signs the account's JWT. Relative to this file's directory."},
	{name: "account_key", kind: scalarValue, doc: "Seed file of the account's key or one of its signing keys, where the store does not hold one: it signs the account's users. Relative to this file's directory."},
})

func (d *decoder) operator(n *yaml.Node) *rawOperator {
	o := &rawOperator{pos: d.pos(n)}
	f := d.section(n, operatorSection)
	o.store = d.required(n, f, "store", "bus.operator")
	o.name, _ = d.optional(f, "name")
	o.account, _ = d.optional(f, "account")
	o.systemCreds, _ = d.optional(f, "system_creds")
	o.signingKey, _ = d.optional(f, "signing_key")
	o.accountKey, _ = d.optional(f, "account_key")
	return o
}

// validateOperator reads bus.operator into b. It belongs to bus.auth: jwt alone, and on an
// external bus it must name a system user: the servers' operator is an admin's, and only its
// system account can push the mesh's account to their resolver. Without it, the operator is
// the one meshctl makes in its state directory, on the embedded bus or an external one.
func validateOperator(diags *diagnostics, rb *rawBus, b *Bus, external bool) {
	ro := rb.operator
	if ro != nil && !b.JWT() {
		diags.add(ro.pos, "bus.operator is for bus.auth: jwt (servers in operator mode); with bus.auth %s it means nothing", b.Auth)
		return
	}
	if !b.JWT() {
		return
	}
	if rb.accountsFile.pos != (Pos{}) {
		diags.add(rb.accountsFile.pos, "bus.accounts_file is for bus.auth password or nkey: with jwt no server file is written, the account's JWT is pushed to the servers' resolver")
	}
	if rb.reload != nil {
		diags.add(rb.reload.pos, "bus.reload is for bus.auth password or nkey: with jwt no server reloads, the account's JWT is pushed to the servers' resolver")
	}
	for _, rs := range rb.servers {
		if rs.accountsFile.pos != (Pos{}) {
			diags.add(rs.accountsFile.pos, "a server's accounts_file is for bus.auth password or nkey: with jwt no server file is written")
		}
		if rs.reload != nil {
			diags.add(rs.reload.pos, "a server's reload is for bus.auth password or nkey: with jwt no server reloads")
		}
		if rs.copyPos != (Pos{}) {
			diags.add(rs.copyPos, "a server's copy is for bus.auth password or nkey: with jwt no server file is written")
		}
	}
	if ro == nil {
		// A fresh deployment: meshctl makes the operator in its state directory (for an
		// external bus, `meshctl render -o server` does, printing the servers' config).
		return
	}
	if external && ro.systemCreds.val == "" {
		diags.add(ro.pos, "bus.operator needs system_creds on an external bus: the creds file of a system-account user, which pushes the mesh's account to the servers and reads it back")
	}
	for _, n := range []name{ro.name, ro.account} {
		if n.pos != (Pos{}) && n.val == "" {
			diags.add(n.pos, "bus.operator's names must not be empty")
		}
	}
	o := &Operator{Name: ro.name.val, Account: ro.account.val, Pos: ro.pos}
	if o.Account == "" {
		o.Account = DefaultOperatorAccount
	}
	for _, p := range []struct {
		n    name
		into *string
	}{{ro.store, &o.Store}, {ro.systemCreds, &o.SystemCreds}, {ro.signingKey, &o.SigningKey}, {ro.accountKey, &o.AccountKey}} {
		if p.n.pos != (Pos{}) && p.n.val == "" {
			diags.add(p.n.pos, "bus.operator's paths must not be empty")
		}
		*p.into = besideFile(p.n)
	}
	b.Operator = o
}

// besideFile resolves a path the description gives against the directory of the file it is
// written in, relative to the description's root; an absolute path stays as it is.
func besideFile(n name) string {
	if n.val == "" || filepath.IsAbs(n.val) {
		return n.val
	}
	return filepath.Join(filepath.Dir(filepath.FromSlash(n.pos.File)), n.val)
}

// rooted makes the operator's relative paths absolute against root, the directory loaded.
func (o *Operator) rooted(root string) {
	for _, p := range []*string{&o.Store, &o.SystemCreds, &o.SigningKey, &o.AccountKey} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(root, *p)
		}
	}
}

// SameOperator reports whether two bus.operator blocks name the same store, keys and system
// user, wherever they are written.
func SameOperator(a, b *Operator) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	x.Pos, y.Pos = Pos{}, Pos{}
	return x == y
}
