package plan

import (
	"fmt"
	"slices"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// A change of bus.auth to or from jwt changes the servers too: in jwt mode they run in
// operator mode and take the mesh's users from the account's JWT, in the file modes they read
// meshctl's accounts config. Their admin restarts each server on the other config, which
// meshctl cannot do, and from then on no credential of the old mode logs in. So the plan names
// every host that holds one (AuthMigration): each needs a new membership of the new mode, and
// an apply goes on only when the operator allows it, as for password ↔ nkey.

// AuthMigration is a change of bus.auth to or from jwt: To, the mode the description names,
// and Hosts, the principals the store holds a credential of the other mode for (issued and
// not revoked), each of which needs a new membership. meshctl's own users are not hosts: it
// mints the controller's credential of each mode itself.
type AuthMigration struct {
	To    string
	Hosts []string
}

// Mark describes m on c, the accounts change: each host's credential is CredentialReissue,
// the reason says what the servers and the hosts need, and the change is refused unless o
// allows reissuing. A migration with no host changes nothing.
func (m AuthMigration) Mark(c *Change, o Options) {
	if len(m.Hosts) == 0 {
		return
	}
	for _, h := range m.Hosts {
		i := slices.IndexFunc(c.Users, func(u UserChange) bool { return u.User == h })
		if i < 0 {
			c.Users = append(c.Users, UserChange{User: h, Action: Update})
			i = len(c.Users) - 1
		}
		c.Users[i].Credential = CredentialReissue
	}
	slices.SortStableFunc(c.Users, func(a, b UserChange) int {
		// Deletions stay last, as every accounts change lists them.
		return boolOrder(a.Action == Delete, b.Action == Delete)
	})
	// Worded without the file modes' names: a plan's outputs never say "password".
	var what string
	if m.To == model.AuthJWT {
		what = fmt.Sprintf("bus.auth changes to jwt: on servers in operator mode no credential of the accounts config logs in, "+
			"and %d host(s) holding one need a new membership, carrying creds (a user JWT and its nkey seed)", len(m.Hosts))
	} else {
		what = fmt.Sprintf("bus.auth changes from jwt: on servers out of operator mode no user JWT logs in, "+
			"and %d host(s) holding one need a new membership", len(m.Hosts))
		if m.To == model.AuthNkey {
			what += ", carrying an nkey seed"
		}
	}
	if c.Reason == "" {
		c.Reason = what
	} else {
		c.Reason = what + "; " + c.Reason
	}
	c.Risk = RiskDisruptive
	if !o.AllowReissue {
		c.Refused = fmt.Sprintf("changing bus.auth %s jwt leaves %d host(s) with no credential that logs in until each is issued a new membership; "+
			"pass --allow-reissue to go on, then issue them (meshctl credentials issue; an enrolled node enrols again with a fresh enrol.<node>)",
			map[bool]string{true: "to", false: "from"}[m.To == model.AuthJWT], len(m.Hosts))
	}
}

func boolOrder(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// FileCredentialHolders are the hosts among principals that hashes, the store's credentials
// of the file modes (bcrypt hashes and nkey public keys), holds one for: in a jwt mesh, the
// hosts an AuthMigration names.
func FileCredentialHolders(principals []render.Principal, hashes map[string]string) []string {
	var out []string
	for _, p := range principals {
		if isHost(p) && hashes[p.User] != "" {
			out = append(out, p.User)
		}
	}
	slices.Sort(out)
	return out
}

// JWTHolders are the hosts among jwtUsers, the principals the store holds a user JWT for:
// in a file-mode mesh, the hosts an AuthMigration names.
func JWTHolders(jwtUsers []string) []string {
	out := slices.DeleteFunc(slices.Clone(jwtUsers), func(u string) bool { return u == render.ControllerUser })
	slices.Sort(out)
	return out
}

func isHost(p render.Principal) bool {
	return p.Kind != render.KindController && p.Kind != render.KindSystem
}
