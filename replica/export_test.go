package replica

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// OpenLeasesTTL is OpenLeases with a bucket whose TTL is ttl: a test of a lapse waits a
// short one out, not LeaseTTL.
func OpenLeasesTTL(ctx context.Context, js jetstream.JetStream, replicas int, ttl time.Duration) (*Leases, error) {
	return openLeases(ctx, js, replicas, ttl)
}

// Freeze stops the lease's renewals as a holder frozen (SIGSTOP) or dead would: it keeps
// counting itself the holder until Held finds its last renewal too old.
func (l *Lease) Freeze() {
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.done
}

// Thaw is the frozen holder's first renewal once it runs again.
func (l *Lease) Thaw() error { return l.renew(context.Background()) }

// LoseARenewalsAnswer stores a renewal of the lease as keep does, and drops the bus's answer,
// as a connection lost between the two would (the bus stopping): the key holds the holder's
// value at a revision the holder never heard of.
func (l *Lease) LoseARenewalsAnswer(ctx context.Context) error {
	l.renewing.Lock()
	defer l.renewing.Unlock()
	l.mu.Lock()
	rev := l.rev
	l.mu.Unlock()
	_, err := l.ls.kv.Update(ctx, l.key, l.value, rev)
	return err
}
