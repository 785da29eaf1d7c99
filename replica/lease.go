package replica

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/internal/backoff"
	"github.com/meshbus/meshctl/render"
)

// Leases on the bus: which `meshctl watch` leads (LeaderKey), and who holds the apply lock
// (LockKey), kept in a KV bucket of their own (render.LeaseBucket) whose TTL is LeaseTTL.
//
// A lease is a key created only where none is (nats.go's Create: a publish expecting the key's
// subject to hold no message), renewed by a put that expects the revision the holder last wrote
// (Update), and let go by a delete expecting it too. Every step is one message on the bucket's
// stream, decided by the stream's leader in the order the stream takes them, so two contenders
// never both hold a key: the second's expectation fails (err 10071, wrong last sequence).
//
// A holder that dies lets go by the server's clock, not its own: the bucket's TTL is its
// stream's MaxAge, and the server removes a message the TTL after it stored it. A key not
// renewed for the TTL is gone, and the next to Create it holds it. On a cluster the age is the
// stored message's timestamp, replicated with it, so a leader change of the stream neither
// extends nor shortens a lease; a lost server takes no lease with it (the stream has the bus's
// replicas, as the store's bucket does).
//
// The holder's side is the other half: it counts itself the holder only while its last renewal
// the server took is less than heldFor old by its own monotonic clock, and past that only once
// the bucket took a renewal expecting its revision (Held). A holder frozen (SIGSTOP, a long GC,
// a VM paused) past its lease finds, the moment it runs again, that its renewal is refused — a
// lapsed key, or another's — and that it holds nothing. It stops, and asks again.

// LeaseTTL is how long a lease outlives its holder's last renewal: the bucket's TTL.
const LeaseTTL = 10 * time.Second

// renewEvery is how often a holder renews a lease of ttl: five times a TTL, so that a bus slow
// to answer one renewal, or a stream electing a leader, costs no lease.
func renewEvery(ttl time.Duration) time.Duration { return ttl / 5 }

// heldFor is how long after its last renewal a holder of a lease of ttl counts itself the
// holder without asking the bus (Held): three quarters of the TTL, the rest a margin for a
// change checked just before it to reach the server.
func heldFor(ttl time.Duration) time.Duration { return ttl * 3 / 4 }

// The leases' keys.
const (
	// LeaderKey is held by the `meshctl watch` that leads: the one whose controller answers
	// the nodes and whose reconciles run. The others stand by.
	LeaderKey = "leader"
	// LockKey is the apply lock on the bus: held for one reconcile by whoever runs it, the
	// leading watch or a one-shot apply (from CI, after a merge).
	LockKey = "lock"
)

// Holder says who holds a lease, in its value.
type Holder struct {
	// Store is the identity of the holder's state store, Copy which copy of it (state's
	// CopyID): copies restored from the bus share the identity.
	Store string `json:"store"`
	Copy  string `json:"copy,omitempty"`
	Host  string `json:"host"`
	PID   int    `json:"pid"`
	// Role is what holds it: "watch", "apply", "credentials".
	Role string `json:"role"`
	// Since is when the holder took it, by the holder's clock.
	Since time.Time `json:"since"`
}

// Me is the Holder this process is, for a copy of a store and a role.
func Me(store, copyID, role string) Holder {
	host, _ := os.Hostname()
	return Holder{Store: store, Copy: copyID, Host: host, PID: os.Getpid(), Role: role, Since: time.Now().UTC()}
}

func (h Holder) String() string {
	return fmt.Sprintf("meshctl %s on %s (pid %d, state store %s) since %s", h.Role, h.Host, h.PID, h.Store, h.Since.Format(time.RFC3339))
}

// same reports whether h and o are the same holding: a holder renewing finds itself.
func (h Holder) same(o Holder) bool {
	return h.Store == o.Store && h.Copy == o.Copy && h.Host == o.Host && h.PID == o.PID && h.Role == o.Role && h.Since.Equal(o.Since)
}

// ErrHeld is returned (as a *HeldError) by Acquire when another holds the lease.
var ErrHeld = errors.New("held by another")

// HeldError names who holds a lease that was asked for.
type HeldError struct {
	Key    string
	Holder Holder
}

func (e *HeldError) Error() string {
	if e.Holder == (Holder{}) {
		return fmt.Sprintf("the %s on the bus was let go as it was asked for: ask again", leaseName(e.Key))
	}
	return fmt.Sprintf("the %s on the bus is held by %s", leaseName(e.Key), e.Holder)
}

func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// leaseName says what a key is, for a message.
func leaseName(key string) string {
	switch key {
	case LeaderKey:
		return "lead of the mesh"
	case LockKey:
		return "apply lock"
	}
	return "lease " + key
}

// ErrLost is returned (wrapped) by Held once a lease is no longer this holder's.
var ErrLost = errors.New("the lease on the bus is lost")

// Leases is the bucket of the leases.
type Leases struct {
	kv jetstream.KeyValue
	// ttl is the bucket's TTL, and the one the holders' renewals keep to: LeaseTTL, but for a
	// test of the lapse, which need not wait ten seconds for each.
	ttl time.Duration
}

func leaseConfig(replicas int, ttl time.Duration) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      render.LeaseBucket,
		Description: "meshctl: which watch leads, and who holds the apply lock; written by the controller alone",
		History:     1,
		TTL:         ttl,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	}
}

// OpenLeases binds the bucket of the leases, creating it when the bus has none, and updating it
// to the bus's replicas as Open does the store's. Its TTL is LeaseTTL.
func OpenLeases(ctx context.Context, js jetstream.JetStream, replicas int) (*Leases, error) {
	return openLeases(ctx, js, replicas, LeaseTTL)
}

func openLeases(ctx context.Context, js jetstream.JetStream, replicas int, ttl time.Duration) (*Leases, error) {
	kv, err := ensureBucket(ctx, js, leaseConfig(replicas, ttl), "the bucket of leases")
	if err != nil {
		return nil, err
	}
	return &Leases{kv: kv, ttl: ttl}, nil
}

// Read returns who holds key now, and when the server last took its renewal; ok is false when
// nobody does.
func (ls *Leases) Read(ctx context.Context, key string) (h Holder, renewed time.Time, ok bool, err error) {
	e, err := ls.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Holder{}, time.Time{}, false, nil
	}
	if err != nil {
		return Holder{}, time.Time{}, false, fmt.Errorf("reading the %s on the bus: %w", leaseName(key), err)
	}
	if err := json.Unmarshal(e.Value(), &h); err != nil {
		return Holder{}, time.Time{}, false, fmt.Errorf("reading the %s on the bus: its value is not a holder: %w", leaseName(key), err)
	}
	return h, e.Created(), true, nil
}

// Acquire takes key for h, or returns a *HeldError naming who holds it. The lease is kept —
// renewed in the background — until Release; Held says whether it still is.
func (ls *Leases) Acquire(ctx context.Context, key string, h Holder) (*Lease, error) {
	value, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	asked := time.Now()
	rev, err := ls.kv.Create(ctx, key, value)
	if errors.Is(err, jetstream.ErrKeyExists) {
		e, rerr := ls.kv.Get(ctx, key)
		if errors.Is(rerr, jetstream.ErrKeyNotFound) {
			// Let go between the two calls: asked again by the caller.
			return nil, &HeldError{Key: key}
		}
		if rerr != nil {
			return nil, fmt.Errorf("reading the %s on the bus: %w", leaseName(key), rerr)
		}
		var other Holder
		if err := json.Unmarshal(e.Value(), &other); err != nil {
			return nil, fmt.Errorf("reading the %s on the bus: its value is not a holder: %w", leaseName(key), err)
		}
		if !other.same(h) {
			return nil, &HeldError{Key: key, Holder: other}
		}
		// This holder's own: a Create asked again after its answer was lost. Counted from
		// when this call began, as a renewal is.
		rev = e.Revision()
	} else if err != nil {
		return nil, fmt.Errorf("taking the %s on the bus: %w", leaseName(key), err)
	}
	l := &Lease{ls: ls, key: key, holder: h, value: value, rev: rev, renewed: asked,
		lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go l.keep()
	return l, nil
}

// AcquireWaiting is Acquire, waiting while another holds key until it is let go or lapses, or
// ctx ends. notice is told once who holds it when it must wait (nil: not told).
func (ls *Leases) AcquireWaiting(ctx context.Context, key string, h Holder, notice func(*HeldError)) (*Lease, error) {
	told := false
	for {
		l, err := ls.Acquire(ctx, key, h)
		var held *HeldError
		if !errors.As(err, &held) {
			return l, err
		}
		if !told && notice != nil {
			notice(held)
			told = true
		}
		if !backoff.Sleep(ctx, acquireEvery) {
			return nil, fmt.Errorf("waiting for the %s: %w (%w)", leaseName(key), ctx.Err(), held)
		}
	}
}

// acquireEvery is how often AcquireWaiting asks again.
const acquireEvery = 250 * time.Millisecond

// Lease is a key of the bucket of leases held by this process.
type Lease struct {
	ls     *Leases
	key    string
	holder Holder
	value  []byte

	renewing sync.Mutex // held for the whole of a renewal

	mu      sync.Mutex
	rev     uint64    // the revision this holder last wrote
	renewed time.Time // when the renewal the server took last was sent, by the monotonic clock
	err     error     // why the lease is lost; nil while held

	lost       chan struct{} // closed once lost
	stop, done chan struct{}
	stopOnce   sync.Once
}

// Key is the lease's key.
func (l *Lease) Key() string { return l.key }

// Holder is who holds it: this process.
func (l *Lease) Holder() Holder { return l.holder }

// Held returns nil while the lease is this holder's, and an error wrapping ErrLost when it is
// not, or may not be.
//
// Within heldFor of the last renewal the server took, the holder knows it holds the lease: the
// server lets it lapse no sooner than the TTL after storing that renewal, which was sent after
// the time counted from. Past that, it may have lapsed, and Held renews it there and then: a
// renewal the bucket takes, expecting the revision this holder last wrote, proves that nobody
// took it since and that it did not lapse (a lapsed key has no revision to match). A renewal
// refused loses the lease for good (Lost is closed); one the bus did not answer is said as
// lost this once, and Held asks again next time. ctx bounds that renewal.
func (l *Lease) Held(ctx context.Context) error {
	l.mu.Lock()
	err, fresh := l.err, time.Since(l.renewed) < heldFor(l.ls.ttl)
	since := time.Since(l.renewed)
	l.mu.Unlock()
	if err != nil || fresh {
		return err
	}
	if err := l.renew(ctx); err != nil {
		if errors.Is(err, ErrLost) {
			return err
		}
		return fmt.Errorf("%w: the %s was not renewed for %s, and the bus does not answer: %w", ErrLost, leaseName(l.key), since.Round(time.Millisecond), err)
	}
	return nil
}

// Lost is closed once the lease is lost for good.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

func (l *Lease) loseLocked(err error) {
	if l.err == nil {
		l.err = err
		close(l.lost)
	}
}

// keep renews the lease five times a TTL (renewEvery) until Release, or until it is lost.
func (l *Lease) keep() {
	defer close(l.done)
	t := time.NewTicker(renewEvery(l.ls.ttl))
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		if err := l.renew(context.Background()); err != nil {
			if errors.Is(err, ErrLost) {
				return
			}
			// A bus slow to answer, a stream electing its leader: the next tick asks again,
			// and Held says when it has been too long.
		}
	}
}

// renew puts the holder's value again, expecting the revision it last wrote.
func (l *Lease) renew(ctx context.Context) error {
	// One renewal at a time: two sent with the same revision would have the bus refuse the
	// second, and the holder take its own renewal for another's.
	l.renewing.Lock()
	defer l.renewing.Unlock()
	l.mu.Lock()
	rev, err := l.rev, l.err
	l.mu.Unlock()
	if err != nil {
		return err
	}
	sent := time.Now()
	ctx, cancel := context.WithTimeout(ctx, renewEvery(l.ls.ttl))
	defer cancel()
	next, err := l.ls.kv.Update(ctx, l.key, l.value, rev)
	if wrongRevision(err) {
		// A renewal the bus stored but whose answer was lost (the bus stopping mid-renewal)
		// left this holder's own value at a later revision: renewed on from it, expecting
		// that one. Another's value, or none (lapsed), loses the lease below.
		if e, gerr := l.ls.kv.Get(ctx, l.key); gerr == nil && e.Revision() > rev && bytes.Equal(e.Value(), l.value) {
			next, err = l.ls.kv.Update(ctx, l.key, l.value, e.Revision())
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		if wrongRevision(err) {
			l.loseLocked(fmt.Errorf("%w: the %s was taken by another since this holder last renewed it", ErrLost, leaseName(l.key)))
			return l.err
		}
		return err
	}
	if l.err == nil {
		l.rev, l.renewed = next, sent
	}
	return nil
}

// Release stops renewing the lease and lets it go, if it is still this holder's: a delete that
// expects the revision it last wrote, so that it never deletes another's.
func (l *Lease) Release(ctx context.Context) {
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.done
	l.renewing.Lock()
	defer l.renewing.Unlock()
	l.mu.Lock()
	rev, held := l.rev, l.err == nil
	l.loseLocked(fmt.Errorf("%w: the %s was let go", ErrLost, leaseName(l.key)))
	l.mu.Unlock()
	if held {
		// Failing leaves the key to lapse within the TTL.
		_ = l.ls.kv.Delete(ctx, l.key, jetstream.LastRevision(rev))
	}
}

// wrongRevision reports whether err is the server's refusal of a write whose expected last
// sequence did not hold: err 10071, or 10164 as a replicated stream answers it.
func wrongRevision(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists)
}
