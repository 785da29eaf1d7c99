package replica_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/bus/bustest"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/replica"
	"github.com/meshbus/meshctl/state"
)

// One holder at a time: a second Acquire is refused naming the first, a lease renewed past its
// TTL is still held, a released lease is taken at once, and a holder that stops renewing (dead)
// lets go by the server's clock, after which its own late renewal is refused and it counts
// itself lost. The bucket's TTL is short: the rules do not depend on its length, and the test
// waits out two of them.
func TestALeaseHasOneHolderAndLapsesWithItsHolder(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	url := bustest.StartTestBus(t, nil).URL()
	const ttl = 4 * time.Second
	ls, err := replica.OpenLeasesTTL(ctx, connect(t, url), 1, ttl)
	if err != nil {
		t.Fatal(err)
	}
	a, b := replica.Me("store-a", "copy-a", "watch"), replica.Me("store-b", "copy-b", "watch")
	b.PID++
	taken := time.Now()
	first, err := ls.Acquire(ctx, replica.LeaderKey, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Held(ctx); err != nil {
		t.Fatalf("a lease just taken: %v", err)
	}
	_, err = ls.Acquire(ctx, replica.LeaderKey, b)
	var held *replica.HeldError
	if !errors.As(err, &held) || held.Holder.Store != "store-a" || !errors.Is(err, replica.ErrHeld) {
		t.Fatalf("a second holder: %v, want held by store-a", err)
	}
	t.Log(err)
	if h, _, ok, err := ls.Read(ctx, replica.LeaderKey); err != nil || !ok || h.Store != "store-a" {
		t.Fatalf("read: %+v %v %v", h, ok, err)
	}
	// Renewed past the TTL, it is still held.
	renewedPast(ctx, t, ls, a, taken.Add(ttl))
	if err := first.Held(ctx); err != nil {
		t.Fatalf("a lease renewed past its TTL: %v", err)
	}
	if _, err := ls.Acquire(ctx, replica.LeaderKey, b); !errors.Is(err, replica.ErrHeld) {
		t.Fatalf("a renewed lease was taken: %v", err)
	}
	first.Release(ctx)
	if !errors.Is(first.Held(ctx), replica.ErrLost) {
		t.Fatal("a released lease counts itself held")
	}
	second, err := ls.Acquire(ctx, replica.LeaderKey, b)
	if err != nil {
		t.Fatalf("a released lease: %v", err)
	}
	second.Release(ctx)

	// A holder that never renews: another waits, and takes it once the server let it lapse.
	dead, err := ls.Acquire(ctx, replica.LockKey, a)
	if err != nil {
		t.Fatal(err)
	}
	dead.Freeze()
	started := time.Now()
	var notices int
	took, err := ls.AcquireWaiting(ctx, replica.LockKey, b, func(*replica.HeldError) { notices++ })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a dead holder's lease of %s was taken over after %s", ttl, time.Since(started).Round(time.Millisecond))
	if notices != 1 {
		t.Fatalf("the new holder was told %d times who held the lease, want once", notices)
	}
	if !errors.Is(dead.Held(ctx), replica.ErrLost) {
		t.Fatal("a holder frozen past its lease counts itself held")
	}
	if err := dead.Thaw(); !errors.Is(err, replica.ErrLost) {
		t.Fatalf("a frozen holder's renewal after the takeover: %v, want lost", err)
	}
	if err := took.Held(ctx); err != nil {
		t.Fatalf("the new holder lost its lease to the old one's renewal: %v", err)
	}
	took.Release(ctx)
}

// A renewal the bus stored but whose answer never came (the bus stopping mid-renewal) leaves the
// key with the holder's own value at a revision the holder did not hear of: its next renewal,
// expecting the revision before, is refused. The holder finds its own value there and renews on
// from it; it had counted itself lost, and stood by for its own lease to lapse.
func TestARenewalWhoseAnswerWasLostKeepsTheLease(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ls, err := replica.OpenLeases(ctx, connect(t, bustest.StartTestBus(t, nil).URL()), 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ls.Acquire(ctx, replica.LeaderKey, replica.Me("store-a", "copy-a", "watch"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	l.Freeze() // no renewal of keep's between the two below
	if err := l.LoseARenewalsAnswer(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Thaw(); err != nil {
		t.Fatalf("the renewal after one whose answer was lost: %v, want the lease kept", err)
	}
	if err := l.Thaw(); err != nil {
		t.Fatalf("the renewal after that: %v, want the lease kept", err)
	}
	other := replica.Me("store-b", "copy-b", "watch")
	other.PID++
	if _, err := ls.Acquire(ctx, replica.LeaderKey, other); !errors.Is(err, replica.ErrHeld) {
		t.Fatalf("a contender: %v, want held", err)
	}
}

// A writer fenced out has its writes refused whole, and the writer that fenced it out writes
// on; the fence itself is no record of the store.
func TestAFencedOutWriterIsRefused(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	url := bustest.StartTestBus(t, nil).URL()
	old, err := replica.Open(ctx, connect(t, url), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Fence(ctx, replica.Me("store-a", "copy-a", "watch")); err != nil {
		t.Fatal(err)
	}
	if err := old.Write(ctx, records(3, "old")); err != nil {
		t.Fatalf("the fencing writer: %v", err)
	}
	next, err := replica.Open(ctx, connect(t, url), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := next.Fence(ctx, replica.Me("store-a", "copy-b", "apply")); err != nil {
		t.Fatal(err)
	}
	if f, err := old.Fenced(ctx); err != nil || f.Mine || !f.OK || f.By.Role != "apply" {
		t.Fatalf("the old writer's fence: %+v (%v)", f, err)
	}
	err = old.Write(ctx, records(5, "late"))
	if !errors.Is(err, state.ErrFenced) {
		t.Fatalf("a late write of a writer fenced out: %v, want ErrFenced", err)
	}
	t.Log(err)
	if err := next.Write(ctx, records(2, "new")); err != nil {
		t.Fatalf("the new writer: %v", err)
	}
	got := mustReadAll(ctx, t, next)
	want := append(records(2, "new"), records(3, "old")[2:]...)
	if len(got) != len(want) {
		t.Fatalf("the bucket holds %v, want %v", got, want)
	}
	for i := range want {
		if got[i].Key != want[i].Key || string(got[i].Value) != string(want[i].Value) {
			t.Fatalf("the bucket holds %v, want %v (nothing of the late write)", got, want)
		}
	}
}

// On a three-server cluster the lease outlives the server that led its stream: the holder
// keeps it through the election (its renewal confirmed by the bus once the stream answers
// again), and a contender is refused before, during and after.
func TestALeaseOnAClusterOutlivesItsStreamLeader(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	c := bustest.StartTestCluster(t, 3)
	js := clusterJS(ctx, t, c)
	var ls *replica.Leases
	testwait.Until(t, "the bucket of leases opened", attempt(ctx, func(ctx context.Context) (err error) {
		ls, err = replica.OpenLeases(ctx, js, 3)
		return err
	}))
	a, b := replica.Me("store", "copy-a", "watch"), replica.Me("store", "copy-b", "watch")
	var held *replica.Lease
	testwait.Until(t, "the lead taken", attempt(ctx, func(ctx context.Context) (err error) {
		held, err = ls.Acquire(ctx, replica.LeaderKey, a)
		return err
	}))
	defer held.Release(ctx)
	var info *jetstream.StreamInfo
	testwait.Until(t, "the lease stream led, with two replicas", attempt(ctx, func(ctx context.Context) (err error) {
		info, err = leaseStreamInfo(ctx, js)
		if err == nil && (info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 2) {
			err = fmt.Errorf("the lease stream has no leader and two replicas yet: %+v", info.Cluster)
		}
		return err
	}))
	for _, srv := range c.Servers {
		if srv.Name == info.Cluster.Leader {
			srv.Stop()
		}
	}
	stopped := time.Now()
	t.Logf("stopped %s, the lease stream's leader", info.Cluster.Leader)
	testwait.Until(t, "the lease held through the election", attempt(ctx, func(ctx context.Context) error {
		if _, err := ls.Acquire(ctx, replica.LeaderKey, b); !errors.Is(err, replica.ErrHeld) {
			return fmt.Errorf("a contender during the election: %v, want held", err)
		}
		return held.Held(ctx)
	}))
	// Past the TTL, renewed under the new stream leader: still the holder's alone. The TTL is
	// the one a watch runs with: the election has to fit in it.
	renewedPast(ctx, t, ls, a, stopped.Add(replica.LeaseTTL))
	if err := held.Held(ctx); err != nil {
		t.Fatalf("the lease after its stream's leader changed: %v", err)
	}
	if _, err := ls.Acquire(ctx, replica.LeaderKey, b); !errors.Is(err, replica.ErrHeld) {
		t.Fatalf("a contender after the election: %v, want held", err)
	}
}

// renewedPast waits until the bucket holds a renewal of the leader's lease by holder stored
// after when, a time by which the lease would have lapsed unrenewed. A renewal expects the
// revision its holder last wrote, which a lapsed key no longer has, so the lease was the
// holder's all along; found lapsed or another's, the test fails.
func renewedPast(ctx context.Context, t *testing.T, ls *replica.Leases, holder replica.Holder, when time.Time) {
	t.Helper()
	testwait.Until(t, "a renewal of the lease stored after "+when.Format(time.StampMilli), attempt(ctx, func(ctx context.Context) error {
		h, renewed, ok, err := ls.Read(ctx, replica.LeaderKey)
		if err != nil {
			return err
		}
		if !ok || h.Store != holder.Store || h.Copy != holder.Copy {
			t.Fatalf("the lease its holder renews lapsed or changed hands: held %v, by %+v", ok, h)
		}
		if renewed.Before(when) {
			return fmt.Errorf("last renewed at %s", renewed.Format(time.StampMilli))
		}
		return nil
	}))
}

// leaseStreamInfo reads the lease stream's info now.
func leaseStreamInfo(ctx context.Context, js jetstream.JetStream) (*jetstream.StreamInfo, error) {
	s, err := js.Stream(ctx, render.LeaseStream)
	if err != nil {
		return nil, err
	}
	return s.Info(ctx)
}
