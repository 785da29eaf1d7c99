package plan

import (
	"fmt"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// The plan compares users by principal, each holding one credential string: a password
// user's bcrypt hash, or an nkey user's public key marked as such (NkeyCredential), so that
// the two kinds never compare equal and a change of kind reads as the credential changing.

// NkeyCredential is how the plan holds an nkey user's credential beside password users'
// (ServedUser.Credential), and the name of an nkey user whose entry names no principal.
func NkeyCredential(publicKey string) string { return "nkey:" + publicKey }

// entryCredential is the credential string of an entry render writes with c.
func entryCredential(c render.Credential) string {
	if c.Nkey != "" {
		return NkeyCredential(c.Nkey)
	}
	return c.Hash
}

// lockedHow is what happens to the credential of a user the target locks: "reissue" when
// the store holds one of the kind the mesh no longer uses (bus.auth changed), "revoked"
// otherwise.
func lockedHow(target Target, user string) string {
	if p, ok := target.principal(user); ok && render.CredentialOf(p, target.Hashes).Reissue {
		return CredentialReissue
	}
	return "revoked"
}

// CredentialReissue is a UserChange's Credential when the user's working credential is of
// the kind bus.auth no longer names — a password in a mesh whose hosts now log in with
// nkeys, or the reverse: it stops working at the reload, and the host needs a new membership.
const CredentialReissue = "reissue"

// authChange describes, on the accounts change c, a change of how hosts log in (bus.auth),
// and refuses it while credentials are in use unless the operator allows it: each host whose
// credential is of the old kind is locked out at the reload until it is issued a new
// membership — by `meshctl credentials issue`, or by the controller for a module instance on
// an enrolled node, once the node itself enrolled again. A change of bus.auth with no
// credential in use is said, and not refused. A change from jwt is an AuthMigration.
func authChange(c *Change, target Target, live Live, o Options) {
	if hosts := JWTHolders(target.JWTUsers); len(hosts) > 0 {
		AuthMigration{To: target.Auth(), Hosts: hosts}.Mark(c, o)
		return
	}
	reissue := 0
	for _, u := range c.Users {
		if u.Credential == CredentialReissue {
			reissue++
		}
	}
	from, to := authOf(live.Accounts), target.Auth()
	changed := live.AccountsKnown && from != to
	if reissue == 0 && !changed {
		return
	}
	// Worded without the other kind's name: a plan's outputs never say "password" (a leaked
	// one would most likely come with the word).
	what := "bus.auth changes to nkey: every host needs a new membership, carrying an nkey seed"
	switch {
	case !changed:
		what = "hosts hold credentials of the kind bus.auth no longer uses: each needs a new membership"
	case from == model.AuthNkey:
		what = "bus.auth changes from nkey: every host needs a new membership, without an nkey seed"
	}
	if reissue > 0 {
		what += fmt.Sprintf("; %d credential(s) in use stop working at the reload", reissue)
		c.Risk = RiskDisruptive
		if !o.AllowReissue {
			c.Refused = fmt.Sprintf("changing bus.auth would lock out %d host(s) that log in today until each is issued a new membership; "+
				"pass --allow-reissue to do it, then issue them (meshctl credentials issue; an enrolled node enrols again with a fresh enrol.<node>)", reissue)
		}
	}
	if reissue == len(c.Users) {
		// Nothing else changes for anyone: the generic reason would say nothing more.
		c.Reason = what
		return
	}
	c.Reason = what + "; " + c.Reason
}

// Auth is the bus.auth the target renders for: model.AuthNkey when its host principals are
// nkey users.
func (t Target) Auth() string {
	for _, p := range t.Principals() {
		if p.Nkey {
			return model.AuthNkey
		}
	}
	return model.AuthPassword
}

// authOf is the bus.auth an accounts config of meshctl's was rendered for.
func authOf(conf []byte) string {
	if render.NkeysIn(conf) {
		return model.AuthNkey
	}
	return model.AuthPassword
}

// Reissues counts the users of the accounts config in use, live, that rendering target's
// accounts config in its place would lock out because bus.auth changed (CredentialReissue):
// for what rewrites the file without a whole plan, as `credentials issue` does, and must
// leave a change of bus.auth to an apply that allows it. read reads live as the server
// would (Live.ReadUsers).
func Reissues(live []byte, read UsersReader, target Target) int {
	c, changed := diffAccounts(target, Live{Accounts: live, AccountsKnown: true, ReadUsers: read})
	n := 0
	for _, u := range c.Users {
		if changed && u.Credential == CredentialReissue {
			n++
		}
	}
	return n
}

// Reissued lists the principals of target whose stored credential is of the kind bus.auth no
// longer uses (render.Credential's Reissue): what an apply that changes bus.auth revokes.
func Reissued(target Target) []string {
	var out []string
	for _, p := range target.Principals() {
		if render.CredentialOf(p, target.Hashes).Reissue {
			out = append(out, p.User)
		}
	}
	return out
}
