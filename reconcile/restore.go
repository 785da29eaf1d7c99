package reconcile

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/bus"
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
// One thing is not on the bus: the proof of which accounts file the server serves, whose
// generation principal's password stays on the control host that wrote it. So the restored
// store proves it anew, writing the same users with a fresh generation principal and seeing the
// server serve them (SyncAccounts): a plan after a restore is then converged.
func Restore(ctx context.Context, m *model.Mesh, dir, password string) (*state.Store, string, error) {
	if m.Bus.Embedded() {
		return nil, "", fmt.Errorf("%w: the embedded bus keeps its store in its state directory, beside it, and the two are lost together; "+
			"a mesh that must outlive its control host runs on an external server or cluster (bus.url or bus.servers)", ErrNothingToRestore)
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
	what, err := SyncAccounts(ctx, m, st)
	if err != nil {
		st.Close()
		return nil, "", fmt.Errorf("the store is restored in %s, but the accounts config could not be proven served: %w", dir, err)
	}
	return st, what, nil
}

// readReplica reads every record of the store kept on the bus m names, as the controller.
func readReplica(ctx context.Context, m *model.Mesh, password string) ([]state.Record, error) {
	_, t := externalAccounts(m, "")
	conn, err := bus.DialAlone(ctx, t, bus.Credential{User: render.ControllerUser, Password: password})
	if errors.Is(err, nats.ErrAuthorization) {
		return nil, fmt.Errorf("the bus at %s refuses the controller's password: it is not the password of the store that manages it: %w", t.Address(), err)
	}
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	js, err := jetstream.New(conn.Conn)
	if err != nil {
		return nil, err
	}
	kv, err := replica.Bind(ctx, js)
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

// keepReplica makes the store write every change to its copy on the bus, through the session's
// connection, and catches the copy up first where it may be behind (state's CatchUp): a new
// bucket, or changes a process committed and died before sending. A read-only session keeps
// none, and writes nothing: a diff changes nothing anywhere.
//
// A bucket that holds another store's copy is refused: the store managing the bus is the one
// whose copy it keeps, and this one would overwrite it.
func (s *Session) keepReplica(ctx context.Context) error {
	if s.replicas == 0 || s.opts.ReadOnly {
		return nil
	}
	kv, err := keepOn(ctx, s.Store, s.Conn, s.replicas, s.Target)
	if kv != nil {
		s.replica = kv
	}
	return err
}

// dropReplica stops the store writing to the copy this session kept through its connection,
// which is closing: a later change is marked behind, and sent whole by the next to keep it.
func (s *Session) dropReplica() {
	if s.replica != nil {
		s.Store.DropReplica(s.replica)
		s.replica = nil
	}
}

// KeepOnBus is keepReplica for a command that changes the store without a session
// (`credentials`): it joins the bus m names as the controller, with the password the store
// holds, for as long as the command runs; stop ends it. On the embedded bus it does nothing.
func KeepOnBus(ctx context.Context, m *model.Mesh, store *state.Store) (stop func(), err error) {
	if m.Bus.Embedded() {
		return func() {}, nil
	}
	password, err := store.StoredControllerPassword(ctx)
	if err != nil {
		return nil, err
	}
	_, t := externalAccounts(m, store.Dir())
	conn, err := dialController(ctx, t, password)
	if err != nil {
		return nil, err
	}
	kv, err := keepOn(ctx, store, conn, max(m.Bus.Replicas, 1), t)
	if err != nil {
		if kv != nil {
			store.DropReplica(kv)
		}
		conn.Close()
		return nil, err
	}
	return func() {
		store.DropReplica(kv)
		conn.Close()
	}, nil
}

// keepOn makes store keep its copy in the bucket on the bus conn reaches (see keepReplica).
func keepOn(ctx context.Context, store *state.Store, conn *bus.Conn, replicas int, t bus.Target) (*replica.KV, error) {
	js, err := jetstream.New(conn.Conn)
	if err != nil {
		return nil, err
	}
	// Right after a server starts, or a meta leader changes, JetStream answers nobody for a
	// moment: asked again, as the plan's calls are on a cluster (retryCall).
	kv, err := retryCall(ctx, func(ctx context.Context) (*replica.KV, error) { return replica.Open(ctx, js, replicas) })
	if err != nil {
		return nil, fmt.Errorf("keeping the store on the bus at %s: %w", t.Address(), err)
	}
	id, err := store.ID(ctx)
	if err != nil {
		return nil, err
	}
	kept, err := retryCall(ctx, func(ctx context.Context) ([]byte, error) { return kv.Get(ctx, state.IdentityKey) })
	if err != nil {
		return nil, fmt.Errorf("keeping the store on the bus at %s: %w", t.Address(), err)
	}
	if kept != nil {
		other, err := state.IdentityIn(kept)
		if err != nil {
			return nil, err
		}
		if other != id {
			return nil, fmt.Errorf("%w: the bus at %s keeps the copy of state store %s, and this store is %s; %s",
				ErrNotManager, t.Address(), other, id, wayOut)
		}
	}
	store.SetReplica(kv)
	if err := store.CatchUp(ctx, kept == nil); err != nil {
		return kv, fmt.Errorf("keeping the store on the bus at %s: %w", t.Address(), err)
	}
	return kv, nil
}
