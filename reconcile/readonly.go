package reconcile

import (
	"context"
	"errors"
	"fmt"

	"github.com/meshbus/meshctl/state"
)

// ErrNeedsApply means a read-only session (Options.ReadOnly) could reach the bus only by
// writing: minting the controller's credential or installing an accounts config that lets
// it in. Those are an apply's to do, and a command that says it changes nothing must not.
var ErrNeedsApply = errors.New("reading the bus needs a write only an apply makes")

// controllerPassword is the controller's password the session dials with: minted on first
// use only, or with o.ReadOnly only the stored one (state.ErrNoController when there is none,
// which a caller of an embedded bus reads as "nothing applied yet"). A password file the stored
// hash refuses is refused either way, saying what to do (state.ControllerMismatchError): an
// apply mints no new one over it.
func controllerPassword(ctx context.Context, store *state.Store, o Options) (string, error) {
	if !o.ReadOnly {
		return store.ControllerPassword(ctx, o.Cost)
	}
	return store.StoredControllerPassword(ctx)
}

// refuseBootstrap is the read-only session's answer where an accounts config would have to
// be installed for the controller to log in.
func (s *Session) refuseBootstrap(path string) error {
	return fmt.Errorf("%w: the accounts config at %s does not let the controller in; 'meshctl apply' installs one that does", ErrNeedsApply, path)
}
