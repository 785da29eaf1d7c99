package reconcile

import (
	"context"
	"errors"
	"fmt"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/state"
)

// RotateController replaces the controller's password, at the operator's word, and proves the
// servers serve it: the store mints the new password and writes STATE/controller.password
// (state.RotateControllerPassword), replacing the system user's hash derived from it too, and
// the accounts config carrying both hashes is written to every server, reloaded — by request
// as the system user the servers still know, the one of the previous password — and seen
// served by a login as its generation principal, derived from the new password. A server that
// does not take it has the previous config back, and the store the previous password: nothing
// changed. Where the config is written but its reload is the operator's (accounts.ErrNotLive), or a
// server of a cluster is down (accounts.ErrServerDown), the rotation stands and the error says so: the
// new password logs in once the server serves the new config. It returns what it did.
//
// It works whether or not STATE/controller.password held the controller's password: it is the
// way out of a file the store refuses that does not put the old one back. With the password as
// it stands it holds the apply lock on the bus and keeps the store's copy there current, as
// every credential change does; with a file the store refuses it cannot join the bus, runs under
// the local apply lock alone, and then joins with the new password to give the copy on the bus
// the rotation (over whatever another copy wrote there meanwhile). Every holder of the previous
// password (a standby, the CI secret, a backup) needs the new file afterwards.
func RotateController(ctx context.Context, m *model.Mesh, store *state.Store, cost int) (string, error) {
	stop, err := keepOnBus(ctx, m, store, true)
	joined := err == nil
	switch {
	case joined:
		defer func() { stop() }()
	case !errors.Is(err, state.ErrControllerMismatch):
		return "", err
	}
	what, r, err := rotateController(ctx, m, store, cost)
	if err != nil || joined || m.Bus.Embedded() {
		return what, err
	}
	behind := err
	stop, err = keepOnBus(ctx, m, store, true)
	if err == nil {
		defer stop()
		err = store.KeepControllerRotation(ctx, r)
	}
	if err != nil && !errors.Is(err, state.ErrReplicaBehind) {
		return "", fmt.Errorf("the controller's password is rotated and served, but the store's copy on the bus could not take it: %w; "+
			"run 'meshctl credentials rotate controller' again", err)
	}
	return what, errors.Join(behind, err)
}

// rotateController is RotateController under the local apply lock, and the rotation made.
func rotateController(ctx context.Context, m *model.Mesh, store *state.Store, cost int) (string, *state.ControllerRotation, error) {
	unlock, err := lockAccounts(ctx, m, store)
	if err != nil {
		return "", nil, err
	}
	defer unlock()
	// Whether the store may rewrite the accounts config at all is asked before anything
	// changes, with the controller's password as it stands.
	previous, err := store.StoredControllerPassword(ctx)
	if err != nil && !errors.Is(err, state.ErrControllerMismatch) {
		return "", nil, err
	}
	target, err := desired(ctx, store, m)
	if err != nil {
		return "", nil, err
	}
	a, _, err := accountsOfStore(ctx, m, store, previous)
	if err != nil {
		return "", nil, err
	}
	if err := accounts.MayRewrite(ctx, store, a, target); err != nil {
		return "", nil, err
	}

	r, err := store.RotateControllerPassword(ctx, cost)
	behind := err
	if err != nil && !errors.Is(err, state.ErrReplicaBehind) {
		return "", nil, err
	}
	undo := func(cause error) error {
		if uerr := store.UndoControllerRotation(ctx, r); uerr != nil && !errors.Is(uerr, state.ErrReplicaBehind) {
			return fmt.Errorf("the controller's password could not be made live: %w; and putting the previous one back in %s failed too: %w",
				cause, store.Dir(), uerr)
		}
		return fmt.Errorf("the controller's password is not rotated: %w; the previous password is back in %s, and the servers serve it", cause, store.Dir())
	}
	if err := systemCredential(ctx, store, m, cost); err != nil {
		return "", nil, undo(err)
	}
	if target, err = desired(ctx, store, m); err != nil {
		return "", nil, undo(err)
	}
	a, what, err := accountsOfStore(ctx, m, store, r.Password)
	if err != nil {
		return "", nil, undo(err)
	}
	what, err = writeRendering(ctx, a.AfterRotation(r.Previous), target, what)
	switch {
	case errors.Is(err, accounts.ErrNotLive), errors.Is(err, accounts.ErrServerDown):
		// The new config is on disk (on some servers, live): the previous password goes on
		// logging in only until each server loads it, and putting it back now would leave a
		// file whose reload locks meshctl out.
		return "", nil, fmt.Errorf("the controller's password is rotated in %s, and the accounts config carrying it is written: %w", store.Dir(), err)
	case err != nil:
		return "", nil, undo(err)
	}
	return what, r, behind
}
