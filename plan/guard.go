package plan

import (
	"fmt"
	"strings"
)

// MassDelete is what a plan deletes of what meshctl owns, when that is more than half of
// it: the streams and consumers on the bus carrying meshctl's marker, and the users of the
// accounts config in use. A description emptied by mistake, a wrong directory or a merge
// that dropped a file derives a mesh of almost nothing, and its plan deletes almost
// everything; an apply refuses such a plan unless the operator allows it, and watch never
// applies it.
type MassDelete struct {
	Objects         int `json:"objects"`          // streams and consumers the plan deletes
	OwnedObjects    int `json:"owned_objects"`    // streams and consumers meshctl owns on the bus
	Principals      int `json:"principals"`       // users the plan deletes
	OwnedPrincipals int `json:"owned_principals"` // users in the accounts config in use
	// LockedOut counts the users that log in today whose working hash the plan replaces —
	// with a lock or another hash — though the store that planned it neither minted nor
	// revoked their credential: hosts issued by another meshctl state, which this one would
	// lock out without knowing it. LockedOutUsers names the first few.
	LockedOut      int      `json:"locked_out,omitempty"`
	LockedOutUsers []string `json:"locked_out_users,omitempty"`
	// Refused says why an apply will not perform the plan; empty when the operator allowed
	// it (--allow-mass-delete).
	Refused string `json:"refused,omitempty"`
}

// lockedOutShown is how many of the users a plan would lock out its refusal names.
const lockedOutShown = 5

// exceeds reports whether deleted is more than half of owned (all of it included).
func exceeds(deleted, owned int) bool { return owned > 0 && 2*deleted > owned }

// massDelete counts the plan's deletions against what meshctl owns, and returns nil when
// neither the objects nor the principals deleted are more than half.
func massDelete(p *Plan, target Target, live Live, o Options) *MassDelete {
	var m MassDelete
	owned := map[string]bool{}
	for _, s := range live.Streams {
		if target.owns(s.Config.Metadata) {
			owned[s.Config.Name] = true
			m.OwnedObjects++
		}
	}
	deletedStream := map[string]bool{}
	for _, c := range p.Changes {
		if c.Action != Delete {
			continue
		}
		switch c.Kind {
		case KindStream:
			deletedStream[c.Name] = true
			m.Objects++
		case KindConsumer:
			m.Objects++
		}
	}
	for _, c := range live.Consumers {
		if !target.owns(c.Config.Metadata) || !owned[c.Stream] {
			continue
		}
		m.OwnedObjects++
		// A deleted stream takes its consumers with it: the plan lists the stream alone.
		if deletedStream[c.Stream] {
			m.Objects++
		}
	}
	for _, c := range p.Changes {
		if c.Kind != KindAccounts {
			continue
		}
		creates := 0
		for _, u := range c.Users {
			switch u.Action {
			case Create:
				creates++
			case Delete:
				m.Principals++
			}
		}
		// Every user the target keeps or changes was in use, and so was every one it
		// deletes; the others are new.
		m.OwnedPrincipals = len(target.Principals()) - creates + m.Principals
	}
	m.LockedOutUsers, m.LockedOut = lockedOut(p, target)
	if m.LockedOut > 0 {
		// Never allowed, not even with --allow-mass-delete: the store that issued those
		// credentials is the one to change them, and a credential meant to go is revoked by
		// name (`credentials revoke`), which this store then knows.
		m.Refused = fmt.Sprintf("the plan would lock out %d user(s) that log in today (%s) with credentials this state store "+
			"neither minted nor revoked: another meshctl state issued them; run from the state that manages the bus, "+
			"or revoke each by name with `meshctl credentials revoke`", m.LockedOut, strings.Join(m.LockedOutUsers, ", "))
		if m.LockedOut > len(m.LockedOutUsers) {
			m.Refused = strings.Replace(m.Refused, ") with", ", …) with", 1)
		}
		return &m
	}
	if !exceeds(m.Objects, m.OwnedObjects) && !exceeds(m.Principals, m.OwnedPrincipals) {
		return nil
	}
	if !o.AllowMassDelete {
		m.Refused = fmt.Sprintf("the plan deletes %d of the %d streams and consumers meshctl owns and %d of the %d users in use: "+
			"more than half, as an emptied description or a wrong directory would; pass --allow-mass-delete if it is meant",
			m.Objects, m.OwnedObjects, m.Principals, m.OwnedPrincipals)
	}
	return &m
}

// LockedOut names (the first few) and counts the users of the accounts config in use, live,
// that rendering target's accounts config in its place would lock out without the store
// knowing it (MassDelete.LockedOut): for what rewrites the file without a whole plan, as
// `credentials issue` does. read reads live as the server would (Live.ReadUsers).
func LockedOut(live []byte, read UsersReader, target Target) ([]string, int) {
	c, changed := diffAccounts(target, Live{Accounts: live, AccountsKnown: true, ReadUsers: read})
	if !changed {
		return nil, 0
	}
	return lockedOut(&Plan{Changes: []Change{c}}, target)
}

// lockedOut names (the first lockedOutShown) and counts the users of the plan's accounts change
// whose working credential it replaces though the store neither minted nor revoked it: a
// rotated or revoked credential is a working hash before and another one, or a lock, after.
func lockedOut(p *Plan, target Target) ([]string, int) {
	var names []string
	n := 0
	for _, c := range p.Changes {
		if c.Kind != KindAccounts {
			continue
		}
		for _, u := range c.Users {
			if u.Action != Update || (u.Credential != "rotated" && u.Credential != "revoked") || target.Known == nil || target.Known[u.User] {
				continue
			}
			if n < lockedOutShown {
				names = append(names, u.User)
			}
			n++
		}
	}
	return names, n
}
