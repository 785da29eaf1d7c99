package controller

import (
	"context"
	"fmt"
	"slices"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// Distributes reports whether the controller hands user's credential out — user is a module
// instance's principal on a node that enrolled, and its credential was not issued by hand —
// and which node it goes to. Such a credential has no other carrier: the controller mints it,
// seals it to the node's key and declares it, and the node's agent writes it. One issued by
// hand (state.Credential.ByHand) is the operator's, kept when the node enrolled (declare): the
// controller declares it to nobody, so `credentials issue` and `rotate` mint it by hand again;
// revoking it hands the instance to the controller, which declares it a fresh one.
func Distributes(ctx context.Context, st *state.Store, m *model.Mesh, user string) (node string, ok bool, err error) {
	instances := m.Instances()
	i := slices.IndexFunc(instances, func(in model.Instance) bool { return render.InstanceUser(in) == user })
	if i < 0 {
		return "", false, nil
	}
	node = instances[i].Node
	enrolled, err := st.Enrolments(ctx)
	if err != nil {
		return "", false, fmt.Errorf("reading which nodes enrolled: %w", err)
	}
	if !slices.ContainsFunc(enrolled, func(e state.Enrolment) bool { return e.Node == node }) {
		return node, false, nil
	}
	byHand, err := issuedByHand(ctx, st, m.Bus.JWT())
	if err != nil {
		return "", false, err
	}
	return node, !byHand[user], nil
}

// Redeclared reports whether node's declaration after generation carries a credential for user
// other than the one hashed oldHash, and the generation that does: a rotation the controller
// carried out, as the store records it.
func Redeclared(ctx context.Context, st *state.Store, node, user, oldHash string, generation uint64) (uint64, bool, error) {
	d, err := st.Declared(ctx, node)
	if err != nil {
		return 0, false, err
	}
	c, ok := d.Credentials[user]
	return d.Generation, ok && d.Generation > generation && c.Hash != "" && c.Hash != oldHash, nil
}
