package plan

import "fmt"

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
	// Refused says why an apply will not perform the plan; empty when the operator allowed
	// it (--allow-mass-delete).
	Refused string `json:"refused,omitempty"`
}

// exceeds reports whether deleted is more than half of owned (all of it included).
func exceeds(deleted, owned int) bool { return owned > 0 && 2*deleted > owned }

// massDelete counts the plan's deletions against what meshctl owns, and returns nil when
// neither the objects nor the principals deleted are more than half.
func massDelete(p *Plan, target Target, live Live, o Options) *MassDelete {
	var m MassDelete
	owned := map[string]bool{}
	for _, s := range live.Streams {
		if Owned(s.Config.Metadata) {
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
		if !Owned(c.Config.Metadata) || !owned[c.Stream] {
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
		m.OwnedPrincipals = len(target.Bus.Principals) - creates + m.Principals
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
