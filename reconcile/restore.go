package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/jsapi"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/replica"
	"github.com/meshbus/meshctl/state"
)

// The store kept on the bus.
//
// On an external bus or cluster, every change the state store commits goes to the bus as well,
// into a KV bucket only the controller may read or write (package replica), before the command
// that made it returns. A control host lost with its disk is then rebuilt from the bus by
// whoever knows the controller's password — the one secret the bus never holds, and the proof
// of being the same authority: Restore. The embedded bus keeps its store in the state directory
// beside its own, and the two are lost together: there is nothing to restore it from.

// ErrNothingToRestore is returned (wrapped) when the bus keeps no store to restore from.
var ErrNothingToRestore = errors.New("the bus keeps no meshctl state store")

// Restore rebuilds in dir, which must hold no store, the state store of the bus m names from the
// copy kept on the bus, joining it as the controller with password. The restored store is the
// same store — its identity, every credential's hash, revocation, enrolled node's key, sealed
// membership, declaration and the history — so every host goes on logging in, every enrolled
// agent goes on taking its declarations, and the bus goes on naming it as its manager.
//
// The proof of which accounts file each server serves is not on the bus, and needs not be: its
// generation principal's password follows from the controller's (accounts/authority.go). So the restored
// store proves with one login per server that the bus serves its rendering, records it, and
// writes and reloads nothing (SyncAccounts); only a file it cannot prove — stamped by an earlier
// meshctl, edited by hand, not loaded — is written once more and seen served. A plan after a
// restore is converged.
//
// The proof is made under the apply lock on the bus, waited for when wait is set; otherwise a
// lock another holds is refused (state.ErrLocked), the store restored all the same.
func Restore(ctx context.Context, m *model.Mesh, dir, password string, wait bool) (*state.Store, string, error) {
	if m.Bus.Embedded() {
		return nil, "", fmt.Errorf("%w: the embedded bus keeps its store in its state directory, beside it, and the two are lost together; "+
			"a mesh that must outlive its control host runs on an external server or cluster (bus.url or bus.servers)", ErrNothingToRestore)
	}
	if m.Bus.JWT() {
		return nil, "", errors.New("with bus.auth: jwt the controller logs in with its creds, not a password: restore with the controller's creds file (RestoreJWT)")
	}
	records, err := readReplica(ctx, m, password)
	if err != nil {
		return nil, "", err
	}
	st, err := state.Restore(ctx, dir, records)
	if err != nil {
		return nil, "", err
	}
	if err := st.AdoptControllerPassword(ctx, password); err != nil {
		st.Close()
		return nil, "", err
	}
	// Under the apply lock on the bus, as every write of the accounts config: a leading watch
	// proving its own file meanwhile would take this one's for a refusal, and this one its.
	stop, err := keepOnBus(ctx, m, st, wait)
	if err != nil {
		st.Close()
		return nil, "", fmt.Errorf("the store is restored in %s, but the apply lock on the bus could not be taken: %w", dir, err)
	}
	defer stop()
	what, err := SyncAccounts(ctx, m, st)
	if err != nil {
		st.Close()
		return nil, "", fmt.Errorf("the store is restored in %s, but the accounts config could not be proven served: %w", dir, err)
	}
	return st, what, nil
}

// readReplica reads every record of the store kept on the bus m names, as the controller.
func readReplica(ctx context.Context, m *model.Mesh, password string) ([]state.Record, error) {
	_, t, err := accounts.External(m, "")
	if err != nil {
		return nil, err
	}
	conn, err := busclient.DialAlone(ctx, t, busclient.Credential{User: render.ControllerUser, Password: password})
	if errors.Is(err, nats.ErrAuthorization) {
		return nil, fmt.Errorf("the bus at %s refuses the controller's password: it is not the password of the store that manages it: %w", t.Address(), err)
	}
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return readRecords(ctx, conn, t)
}

// readRecords reads every record of the store kept on the bus t names, through conn, the
// controller's.
func readRecords(ctx context.Context, conn *busclient.Conn, t busclient.Target) ([]state.Record, error) {
	js, err := jetstream.New(conn.Conn)
	if err != nil {
		return nil, err
	}
	// Bound through a server that may not serve the account's JetStream yet: asked again.
	kv, err := jsapi.RetryCall(ctx, func(ctx context.Context) (*replica.KV, error) { return replica.Bind(ctx, js) })
	if errors.Is(err, replica.ErrNoReplica) {
		return nil, fmt.Errorf("%w at %s: %w", ErrNothingToRestore, t.Address(), err)
	}
	if err != nil {
		return nil, err
	}
	records, err := kv.ReadAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the store kept on the bus at %s: %w", t.Address(), err)
	}
	if len(records) == 0 {
		return nil, fmt.Errorf("%w at %s: its bucket is empty", ErrNothingToRestore, t.Address())
	}
	return records, nil
}

// keepReplica binds the store's copy on the bus, through the session's connection, and the
// leases beside it. It writes nothing: the store writes to its copy once the session owns it,
// under the apply lock on the bus (owner.go), where it also sends the copy what it lacks. A
// read-only session keeps none, and writes nothing: a diff changes nothing anywhere.
//
// A bucket that holds another store's copy is refused: the store managing the bus is the one
// whose copy it keeps, and this one would overwrite it.
func (s *Session) keepReplica(ctx context.Context) error {
	if s.onBus.replicas == 0 || s.opts.ReadOnly {
		return nil
	}
	js, err := jetstream.New(s.Conn.Conn)
	if err != nil {
		return err
	}
	kv, fresh, err := bindReplica(ctx, s.Store, js, s.onBus.replicas, s.Target)
	if err != nil {
		return err
	}
	// Right after a server starts, or a meta leader changes, JetStream answers nobody for a
	// moment: asked again, as the plan's calls are on a cluster (jsapi.RetryCall).
	leases, err := jsapi.RetryCallIf(ctx, func(ctx context.Context) (*replica.Leases, error) {
		return replica.OpenLeases(ctx, js, s.onBus.replicas)
	}, jsapi.Placing)
	if err != nil {
		return fmt.Errorf("keeping the store on the bus at %s: %w", s.Target.Address(), err)
	}
	s.onBus.kv, s.onBus.leases, s.onBus.fresh = kv, leases, fresh
	return nil
}

// dropReplica stops the store writing to the copy this session kept through its connection,
// which is closing: a later change is marked behind, and sent whole by the next to keep it.
func (s *Session) dropReplica() {
	if s.onBus.kv != nil {
		s.Store.DropReplica(s.onBus.kv)
		s.onBus.kv = nil
	}
}

// KeepOnBus is for a command that changes the store without a session (`credentials`): it
// joins the bus m names as the controller, with the password the store holds, takes the apply
// lock on the bus (waiting for one in progress) and makes the store its one writer there
// (owner.go), for as long as the command runs; stop ends it. On the embedded bus it does nothing.
func KeepOnBus(ctx context.Context, m *model.Mesh, store *state.Store) (stop func(), err error) {
	return keepOnBus(ctx, m, store, true)
}

func keepOnBus(ctx context.Context, m *model.Mesh, store *state.Store, wait bool) (stop func(), err error) {
	if m.Bus.Embedded() {
		return func() {}, nil
	}
	conn, t, err := joinAsStore(ctx, m, store)
	if err != nil {
		return nil, err
	}
	s := &Session{Store: store, Conn: conn, Target: t, onBus: storeOnBus{replicas: max(m.Bus.Replicas, 1)}, logf: func(string, ...any) {},
		opts: Options{Role: "credentials"}}
	err = s.keepReplica(ctx)
	if err == nil {
		err = s.takeBusLock(ctx, wait, nil)
	}
	stop = func() {
		if s.onBus.lock != nil && !conn.IsConnected() {
			releaseAfresh(m, store, s.onBus.lock)
			s.onBus.lock = nil
		}
		s.releaseBusLock()
		s.dropReplica()
		conn.Close()
	}
	if err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// releaseAfresh lets lock go through a connection of its own, as the controller with the
// password the store holds now: the connection lock was taken on is gone — the controller's
// password was rotated under it, and the reload closed the connections of the previous one.
// Taken again by its own holder it is the same holding (replica's Acquire), and let go;
// where that fails it lapses within the lease's TTL.
func releaseAfresh(m *model.Mesh, store *state.Store, lock *replica.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Stopped renewing without a wait on the connection that is gone.
	gone, stop := context.WithCancel(ctx)
	stop()
	lock.Release(gone)
	conn, _, err := joinAsStore(ctx, m, store)
	if err != nil {
		return
	}
	defer conn.Close()
	js, err := jetstream.New(conn.Conn)
	if err != nil {
		return
	}
	leases, err := replica.OpenLeases(ctx, js, max(m.Bus.Replicas, 1))
	if err != nil {
		return
	}
	if again, err := leases.Acquire(ctx, lock.Key(), lock.Holder()); err == nil {
		again.Release(ctx)
	}
}

// joinAsStore joins the external bus m names as the controller, with the password store holds.
func joinAsStore(ctx context.Context, m *model.Mesh, store *state.Store) (*busclient.Conn, busclient.Target, error) {
	if m.Bus.JWT() {
		return joinWithCreds(ctx, m, store)
	}
	password, err := store.StoredControllerPassword(ctx)
	if err != nil {
		return nil, busclient.Target{}, err
	}
	_, t, err := accounts.External(m, store.Dir())
	if err != nil {
		return nil, t, err
	}
	conn, err := dialController(ctx, t, password)
	return conn, t, err
}

// bindReplica binds the bucket the store is kept in on the bus js reaches, creating it where
// there is none, and refuses one that keeps another store's copy. fresh says the bucket holds
// no copy of any store yet: the whole store is owed to it.
func bindReplica(ctx context.Context, store *state.Store, js jetstream.JetStream, replicas int, t busclient.Target) (kv *replica.KV, fresh bool, err error) {
	kv, err = jsapi.RetryCallIf(ctx, func(ctx context.Context) (*replica.KV, error) { return replica.Open(ctx, js, replicas) }, jsapi.Placing)
	if err != nil {
		return nil, false, fmt.Errorf("keeping the store on the bus at %s: %w", t.Address(), err)
	}
	id, err := store.ID(ctx)
	if err != nil {
		return nil, false, err
	}
	kept, err := jsapi.RetryCall(ctx, func(ctx context.Context) ([]byte, error) { return kv.Get(ctx, state.IdentityKey) })
	if err != nil {
		return nil, false, fmt.Errorf("keeping the store on the bus at %s: %w", t.Address(), err)
	}
	if kept != nil {
		other, err := state.IdentityIn(kept)
		if err != nil {
			return nil, false, err
		}
		if other != id {
			return nil, false, fmt.Errorf("%w: the bus at %s keeps the copy of state store %s, and this store is %s; %s",
				accounts.ErrNotManager, t.Address(), other, id, accounts.WayOut)
		}
	}
	return kv, kept == nil, nil
}
