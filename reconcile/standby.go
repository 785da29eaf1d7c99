package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/jsapi"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/replica"
	"github.com/meshbus/meshctl/state"
)

// Standby is the controller's connection of a `meshctl watch` that does not lead, or not yet:
// it asks for the lead (replica.LeaderKey) and, while another holds it, keeps the store equal to
// its copy on the bus, which the leader writes. It changes nothing: neither the bus, nor the
// store's copy there. A watch that takes the lead keeps this connection for as long as it
// leads: the lease is renewed on it.
type Standby struct {
	store  *state.Store
	conn   *busclient.Conn
	js     jetstream.JetStream
	kv     *replica.KV
	leases *replica.Leases
	target busclient.Target
	// seen is the last sequence of the store's bucket this store was made equal to.
	seen uint64
}

// ErrNoStoreOnBus is returned (wrapped) by StandBy for a bus that keeps no store: the embedded
// bus, whose store is the state directory beside it, and which one watch serves.
var ErrNoStoreOnBus = errors.New("the bus keeps no store to stand by on")

// StandBy joins the bus m names as the controller, with the password store holds, and binds the
// store's copy there and the leases. A copy of another store is refused (accounts.ErrNotManager).
func StandBy(ctx context.Context, m *model.Mesh, store *state.Store) (*Standby, error) {
	if m.Bus.Embedded() {
		return nil, ErrNoStoreOnBus
	}
	conn, t, err := joinAsStore(ctx, m, store)
	if err != nil {
		return nil, err
	}
	s := &Standby{store: store, conn: conn, target: t}
	if err := s.bind(ctx, max(m.Bus.Replicas, 1)); err != nil {
		conn.Close()
		return nil, err
	}
	return s, nil
}

func (s *Standby) bind(ctx context.Context, replicas int) error {
	var err error
	if s.js, err = jetstream.New(s.conn.Conn); err != nil {
		return err
	}
	if s.kv, _, err = bindReplica(ctx, s.store, s.js, replicas, s.target); err != nil {
		return err
	}
	s.leases, err = jsapi.RetryCallIf(ctx, func(ctx context.Context) (*replica.Leases, error) { return replica.OpenLeases(ctx, s.js, replicas) }, jsapi.Placing)
	return err
}

// Target is the bus the standby is on.
func (s *Standby) Target() busclient.Target { return s.target }

// Close lets the connection go, and with it any lease taken on it that was not let go first.
func (s *Standby) Close() { s.conn.Close() }

// Lead asks for the lead as h; a *replica.HeldError names who holds it.
func (s *Standby) Lead(ctx context.Context, h replica.Holder) (*replica.Lease, error) {
	return s.leases.Acquire(ctx, replica.LeaderKey, h)
}

// Leader is who leads now, and when the bus last took its renewal; ok is false when nobody does.
func (s *Standby) Leader(ctx context.Context) (h replica.Holder, renewed time.Time, ok bool, err error) {
	return s.leases.Read(ctx, replica.LeaderKey)
}

// Behind is how many messages the store's bucket took since this store was last made equal to
// it: 0 when the store is current.
func (s *Standby) Behind(ctx context.Context) (uint64, error) {
	last, err := s.lastSeq(ctx)
	if err != nil {
		return 0, err
	}
	return last - min(last, s.seen), nil
}

func (s *Standby) lastSeq(ctx context.Context) (uint64, error) {
	st, err := jsapi.RetryCall(ctx, func(ctx context.Context) (jetstream.Stream, error) { return s.js.Stream(ctx, render.StateStream) })
	if err != nil {
		return 0, fmt.Errorf("reading the store's bucket on the bus at %s: %w", s.target.Address(), err)
	}
	return st.CachedInfo().State.LastSeq, nil
}

// Refresh makes the store equal to its copy on the bus, when the bucket took anything since
// the last refresh (one stream info otherwise), and reports whether the store changed.
func (s *Standby) Refresh(ctx context.Context) (bool, error) {
	// The sequence first, the content after: what is read is at least as new as the mark.
	last, err := s.lastSeq(ctx)
	if err != nil {
		return false, err
	}
	if last == s.seen {
		return false, nil
	}
	records, err := s.kv.ReadAll(ctx)
	if err != nil {
		return false, fmt.Errorf("reading the store kept on the bus at %s: %w", s.target.Address(), err)
	}
	if len(records) == 0 {
		// Nothing kept yet (a leader that has not written): nothing to be equal to.
		s.seen = last
		return false, nil
	}
	changed, err := s.store.Refresh(ctx, records)
	if err != nil {
		return false, err
	}
	s.seen = last
	return changed, nil
}
