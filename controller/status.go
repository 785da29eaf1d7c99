package controller

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// Who holds a module instance's credential, as status says it (InstanceStatus).
const (
	// HeldByAgent: the controller minted it and declares it, sealed, to the node, whose agent
	// writes it.
	HeldByAgent = "agent"
	// HeldByHand: an operator issued it (`meshctl credentials issue` or `rotate`) to a host of
	// their own; the controller kept it when the node enrolled and the agent leaves it alone.
	// Revoking it hands the instance to the agent.
	HeldByHand = "hand"
	// HeldByNobody: it has no credential, and cannot log in.
	HeldByNobody = "none"
)

// InstanceStatus is who holds one module instance's credential: HeldByAgent, HeldByHand or
// HeldByNobody.
type InstanceStatus struct {
	User       string `json:"user"`
	Credential string `json:"credential"`
}

// NodeStatus is what the store knows of one node of the live mesh: whether it enrolled, the
// generation it was last declared and the one it last reported applying, and when, and who
// holds each of its instances' credentials.
type NodeStatus struct {
	Node       string    `json:"node"`
	Enrolled   bool      `json:"enrolled"`
	EnrolledAt time.Time `json:"enrolled_at,omitzero"`
	Declared   uint64    `json:"declared_generation"`
	DeclaredAt time.Time `json:"declared_at,omitzero"`
	Reported   uint64    `json:"reported_generation"`
	ReportedAt time.Time `json:"reported_at,omitzero"`
	// Failed are the instances the node's last report said it could not apply, with why.
	Failed map[string]string `json:"failed,omitempty"`
	// Heartbeat is the last heartbeat watch heard from the node, as it last recorded it, and
	// Silent whether the node had gone quiet by then (nil and false when none was heard).
	Heartbeat *Seen `json:"last_heartbeat,omitempty"`
	Silent    bool  `json:"silent,omitempty"`
	// Instances are the node's module instances as last applied, sorted, with who holds each
	// one's credential.
	Instances []InstanceStatus `json:"instances,omitempty"`
}

// Converged is whether the node reported applying, without failures, what it was last declared.
func (n NodeStatus) Converged() bool {
	return n.Enrolled && n.Declared > 0 && n.Reported == n.Declared && len(n.Failed) == 0
}

// Nodes is the status of the inventory's nodes and of every node the store knows of, sorted by
// node, each with the inventory's instances on it.
func Nodes(ctx context.Context, st *state.Store, inv state.Inventory) ([]NodeStatus, error) {
	byNode := map[string]*NodeStatus{}
	get := func(n string) *NodeStatus {
		if s, ok := byNode[n]; ok {
			return s
		}
		s := &NodeStatus{Node: n}
		byNode[n] = s
		return s
	}
	for _, n := range inv.Nodes {
		get(n)
	}
	if err := withCredentials(ctx, st, inv.Instances, get); err != nil {
		return nil, err
	}
	enrolled, err := st.Enrolments(ctx)
	if err != nil {
		return nil, err
	}
	for _, e := range enrolled {
		s := get(e.Node)
		s.Enrolled, s.EnrolledAt = true, e.EnrolledAt
		d, err := st.Declared(ctx, e.Node)
		if err != nil {
			return nil, err
		}
		s.Declared, s.DeclaredAt = d.Generation, d.DeclaredAt
	}
	reports, err := st.Reports(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range reports {
		s := get(r.Node)
		s.Reported, s.ReportedAt, s.Failed = r.Generation, r.ReportedAt, r.Failed
	}
	out := make([]NodeStatus, 0, len(byNode))
	for _, s := range byNode {
		slices.SortFunc(s.Instances, func(a, b InstanceStatus) int { return strings.Compare(a.User, b.User) })
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b NodeStatus) int {
		switch {
		case a.Node < b.Node:
			return -1
		case a.Node > b.Node:
			return 1
		}
		return 0
	})
	return out, nil
}

// withCredentials adds each of instances, with who holds its credential, to its node's status.
func withCredentials(ctx context.Context, st *state.Store, instances []state.Instance, get func(string) *NodeStatus) error {
	creds, err := st.Credentials(ctx)
	if err != nil {
		return err
	}
	// A jwt mesh's (bus.auth: jwt) are its account's users; a store holds one kind or the other.
	users, err := st.JWTUsers(ctx)
	if err != nil {
		return err
	}
	byHand := make(map[string]bool, len(creds)+len(users))
	for _, c := range creds {
		byHand[c.Principal] = c.ByHand()
	}
	for p, u := range users {
		byHand[p] = u.ByHand()
	}
	for _, in := range instances {
		user := render.InstanceUser(model.Instance{Node: in.Node, Module: in.Module})
		held := HeldByNobody
		if hand, ok := byHand[user]; ok {
			held = HeldByAgent
			if hand {
				held = HeldByHand
			}
		}
		s := get(in.Node)
		s.Instances = append(s.Instances, InstanceStatus{User: user, Credential: held})
	}
	return nil
}
