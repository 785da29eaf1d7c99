package controller

import (
	"context"
	"slices"
	"time"

	"github.com/meshbus/meshctl/state"
)

// NodeStatus is what the store knows of one node of the live mesh: whether it enrolled, the
// generation it was last declared and the one it last reported applying, and when.
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
}

// Converged is whether the node reported applying, without failures, what it was last declared.
func (n NodeStatus) Converged() bool {
	return n.Enrolled && n.Declared > 0 && n.Reported == n.Declared && len(n.Failed) == 0
}

// Nodes is the status of the given nodes and of every node the store knows of, sorted by node.
func Nodes(ctx context.Context, st *state.Store, nodes []string) ([]NodeStatus, error) {
	byNode := map[string]*NodeStatus{}
	get := func(n string) *NodeStatus {
		if s, ok := byNode[n]; ok {
			return s
		}
		s := &NodeStatus{Node: n}
		byNode[n] = s
		return s
	}
	for _, n := range nodes {
		get(n)
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
