package render

import (
	"bytes"

	"github.com/nats-io/nkeys"

	"github.com/meshbus/meshctl/model"
)

// nkey principals (bus.auth: nkey). A host principal — a node, its enrolment identity, a
// module instance — and an observer is then an nkey user of the MESH account: its entry holds
// the public key the store keeps for it, and the host proves itself by signing the server's nonce with the
// seed its membership carries. The server checks a signature where it would run bcrypt for
// a password user, at every login and, at every reload, once for each connected client.
//
// meshctl's own users stay password users: the controller, its system user and the
// generation principal are one each however large the mesh, and meshctl itself logs in as
// them; their passwords are what the state directory keeps (controller.password, …).

// markNkeys makes the host principals and the observers nkey users: every principal but
// meshctl's own.
func markNkeys(m *model.Mesh, principals []Principal) {
	if !m.Bus.Nkeys() {
		return
	}
	for i := range principals {
		switch principals[i].Kind {
		case KindNode, KindEnrol, KindModule, KindObserver:
			principals[i].Nkey = true
		}
	}
}

// IsPublicKey reports whether a stored credential is an nkey user's public key (`U…`, its
// checksum intact) rather than a bcrypt hash. The server refuses a whole accounts config
// over one malformed key, so nothing else is ever written as one.
func IsPublicKey(stored string) bool { return nkeys.IsValidPublicUserKey(stored) }

// Credential is what a principal's entry in the accounts config opens with: an nkey user's
// public key, or a password user's bcrypt hash.
type Credential struct {
	Nkey string // the public key of an nkey user; "" for a password user
	Hash string // the bcrypt hash of a password user; LockedHash when nothing opens it
	// Reissue reports a credential the store holds that is of the other kind than the
	// principal's (a password's hash for an nkey principal, a public key for a password
	// one): the bus.auth of the mesh changed since it was minted. The principal is locked
	// until a credential of its kind is issued.
	Reissue bool
}

// CredentialOf is p's credential, from the store's credentials by user (a bcrypt hash or a
// public key).
//
// A principal with no credential of its kind is a password user with LockedHash, in an nkey
// mesh too. It cannot be an nkey entry: no key means nobody can log in, but an entry holds
// exactly one key and the server refuses the same key twice, so no shared placeholder
// exists; and left out of the file, the principal would vanish from what reads the file by
// user — the plan's accounts diff (a revocation would read as a deletion, and an unissued
// host as a user created at every change), the count of users in use that guards a mass
// deletion, reviewers reading its permissions. The locked entry admits nobody (LockedHash),
// costs no bcrypt comparison (it is too short to be a bcrypt hash, and no client is ever
// connected as it), and keeps every principal in the file by name.
//
// A public key is never taken as a password: the server would compare it as plaintext, and
// a public key is no secret.
func CredentialOf(p Principal, stored map[string]string) Credential {
	s := stored[p.User]
	key := IsPublicKey(s)
	switch {
	case s == "":
		return Credential{Hash: LockedHash}
	case p.Nkey && key:
		return Credential{Nkey: s}
	case !p.Nkey && !key:
		return Credential{Hash: s}
	}
	return Credential{Hash: LockedHash, Reissue: true}
}

// How an nkey user's entry begins: NkeyEntryStart and the principal's quoted name, then
// NkeyEntryKey and the quoted public key. The server's entry takes no name beside a key
// ("Nkey users do not take usernames or passwords"), so the principal is named in a comment
// line above it, where the reading of the config in use for the plan finds it again
// (plan.UsersReader) and so does a person.
const (
	NkeyEntryStart = "      # user "
	NkeyEntryKey   = "\n      { nkey: "
)

// nkeyNote heads an accounts config whose host principals are nkey users: it says so to a
// reader, and tells the plan that the mesh's bus.auth is nkey even when no host holds a
// credential yet (NkeysIn).
const nkeyNote = "# Hosts log in with nkeys (bus.auth: nkey): each host's entry holds its public key, under a comment naming its principal.\n"

// NkeysIn reports whether conf, an accounts config of meshctl's, is one whose host
// principals are nkey users.
func NkeysIn(conf []byte) bool { return bytes.Contains(conf, []byte(nkeyNote)) }

// writeNkeyNote heads the config with nkeyNote when its host principals are nkey users.
func writeNkeyNote(b *bytes.Buffer, principals []Principal) {
	for _, p := range principals {
		if p.Nkey {
			b.WriteString(nkeyNote)
			return
		}
	}
}

// writeEntryStart writes the start of a mesh user's entry, up to its permissions: the
// principal's name and hash for a password user, its name in a comment and its public key
// for an nkey user.
func writeEntryStart(b *bytes.Buffer, p Principal, c Credential) {
	if c.Nkey == "" {
		b.WriteString(entryStart)
		writeQuoted(b, p.User)
		b.WriteString(", password: ")
		writeQuoted(b, c.Hash)
		return
	}
	b.WriteString(NkeyEntryStart)
	writeQuoted(b, p.User)
	b.WriteString(NkeyEntryKey)
	writeQuoted(b, c.Nkey)
}
