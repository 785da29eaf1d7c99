package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/state"
)

// A change of bus.auth (password ↔ nkey) is a plan like any other: every host principal's
// entry changes kind, and each credential of the old kind in use stops working at the
// reload. The plan refuses it unless the operator allows it (plan's authChange, apply
// --allow-reissue); an apply that performs it first revokes every credential of the old
// kind, so that none comes back to life if bus.auth is changed back, and the store holds
// only credentials the accounts config renders.

// CheckAuth returns accounts.ErrAuthChange (wrapped) where a credential issued or revoked now would
// change bus.auth behind the apply that must allow it (accounts.AuthUnchanged): what `credentials`
// asks before it mints or revokes anything.
func CheckAuth(ctx context.Context, m *model.Mesh, store *state.Store) error {
	path := filepath.Join(store.Dir(), "bus", "accounts.conf")
	if !m.Bus.Embedded() {
		a, _, err := accounts.External(m, store.Dir())
		if err != nil {
			return err
		}
		path = a.Path
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // nothing in use yet: nothing to lock anyone out of
	}
	if err != nil {
		return fmt.Errorf("reading the accounts config in use: %w", err)
	}
	target, err := desired(ctx, store, m)
	if err != nil {
		return err
	}
	live, _ := accounts.Unstamp(data)
	return accounts.AuthUnchanged(path, live, target)
}

// revokeReissued revokes, before an apply of p that changes the accounts config, every stored
// credential of the kind the mesh's bus.auth no longer uses (plan.Reissued). Such a plan is
// refused unless the operator allowed it, and a blocked plan is left to apply to refuse. The
// rendering is the same before and after: a credential of the other kind is rendered locked.
func (s *Session) revokeReissued(ctx context.Context, p *plan.Plan, t plan.Target) error {
	if p.Blocked() || !slices.ContainsFunc(p.Changes, func(c plan.Change) bool { return c.Kind == plan.KindAccounts }) {
		return nil
	}
	users := plan.Reissued(t)
	if len(users) == 0 {
		return nil
	}
	err := s.Store.RevokeAll(ctx, users)
	if err != nil && !errors.Is(err, state.ErrReplicaBehind) {
		return fmt.Errorf("revoking the %d credential(s) of the kind bus.auth no longer uses: %w", len(users), err)
	}
	s.logf("bus.auth is %s: revoked %d credential(s) of the other kind; each of those hosts needs a new membership", t.Auth(), len(users))
	if err != nil {
		// The revocations stand; the store's copy on the bus catches up at its next change.
		s.logf("%v", err)
	}
	return nil
}

// dropJWTUsers revokes, after an apply of p proven on the bus, the user JWTs of the hosts a
// change of bus.auth from jwt leaves behind (t.JWTUsers, but the controller's, whose creds
// meshctl keeps for a return to jwt): none logs in on servers out of operator mode. Each key
// stays in the store to revoke, so that the account's next JWT, should bus.auth return to
// jwt, revokes it and it does not come back. A blocked plan is left to apply to refuse.
func (s *Session) dropJWTUsers(ctx context.Context, p *plan.Plan, t plan.Target) error {
	hosts := plan.JWTHolders(t.JWTUsers)
	if p.Blocked() || len(hosts) == 0 {
		return nil
	}
	if _, err := s.Store.RevokeJWTUsers(ctx, hosts, time.Now().Unix()); err != nil {
		return fmt.Errorf("dropping the %d user JWT(s) bus.auth %s supersedes: %w", len(hosts), t.Auth(), err)
	}
	s.logf("bus.auth is %s: dropped %d user JWT(s); each of those hosts needs a new membership", t.Auth(), len(hosts))
	return nil
}
