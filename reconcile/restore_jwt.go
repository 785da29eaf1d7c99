package reconcile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/internal/atomicfile"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// ErrWrongControllerCreds is returned (wrapped) by RestoreJWT when the creds given are not
// those of the restored store's controller user.
var ErrWrongControllerCreds = errors.New("the creds are not the controller's")

// RestoreJWT is Restore for a mesh with bus.auth: jwt, whose controller logs in with its creds
// (STATE/controller.creds) rather than a password: it joins the bus with the creds in
// credsFile, rebuilds in dir (which must hold no store) the store kept there, and keeps the
// creds as the restored store's own, once the store says they are its controller's key. The
// restored store holds every user and every key still to revoke, so a plan after it is the
// plan the lost store would have made, and a revocation through it takes effect.
//
// The controller's user is not minted anew. A new key would be a second controller beside the
// one whose creds were lost, until a push revoked the old key; and a standby restoring its
// store that way would revoke the leader's controller. Holding the creds is, as holding the
// password is with the other auth modes, what makes the restored store the same authority.
//
// As Restore, the store is made the one writer of its copy under the apply lock on the bus,
// waited for when wait is set; it writes nothing to the servers.
func RestoreJWT(ctx context.Context, m *model.Mesh, dir, credsFile string, wait bool) (*state.Store, string, error) {
	if !m.Bus.JWT() || m.Bus.Embedded() || m.Bus.Operator == nil {
		return nil, "", errors.New("restoring with the controller's creds is for an external bus with bus.auth: jwt and bus.operator")
	}
	creds, err := os.ReadFile(credsFile)
	if err != nil {
		return nil, "", err
	}
	kp, err := jwt.ParseDecoratedUserNKey(creds)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %s holds no user key: %w", ErrWrongControllerCreds, credsFile, err)
	}
	key, err := kp.PublicKey()
	if err != nil {
		return nil, "", err
	}
	t, err := accounts.BusTarget(m)
	if err != nil {
		return nil, "", err
	}
	conn, err := busclient.DialAlone(ctx, t, busclient.Credential{User: render.ControllerUser}, nats.UserCredentials(credsFile))
	if errors.Is(err, nats.ErrAuthorization) {
		return nil, "", fmt.Errorf("%w: the bus at %s refuses the creds in %s (a JWT of the controller's that a change of its grants revoked since they were saved?): %w",
			ErrWrongControllerCreds, t.Address(), credsFile, err)
	}
	if err != nil {
		return nil, "", err
	}
	records, err := readRecords(ctx, conn, t)
	conn.Close()
	if err != nil {
		return nil, "", err
	}
	st, err := state.Restore(ctx, dir, records)
	if err != nil {
		return nil, "", err
	}
	users, err := st.JWTUsers(ctx)
	if err == nil {
		if u, ok := users[render.ControllerUser]; !ok || u.UserKey != key {
			err = fmt.Errorf("%w: %s holds user %s, and the store's controller is %q: give the controller's creds, the lost host's STATE/%s",
				ErrWrongControllerCreds, credsFile, key, u.UserKey, ControllerCredsFile)
		}
	}
	if err == nil {
		err = atomicfile.Write(filepath.Join(dir, ControllerCredsFile), creds)
	}
	if err != nil {
		st.Close()
		return nil, "", err
	}
	stop, err := keepOnBus(ctx, m, st, wait)
	if err != nil {
		st.Close()
		return nil, "", fmt.Errorf("the store is restored in %s, but the apply lock on the bus could not be taken: %w", dir, err)
	}
	stop()
	return st, fmt.Sprintf("the controller logs in with its creds, kept in %s; nothing was written to the servers", filepath.Join(dir, ControllerCredsFile)), nil
}
