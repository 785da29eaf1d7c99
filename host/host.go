package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/meshbus/meshctl/busclient"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Host is one principal's connection to the bus: the connection, which reports what the server
// refused it, and JetStream over it.
type Host struct {
	conn    *busclient.Conn
	js      jetstream.JetStream
	user    string
	address string

	closed chan struct{} // closed when the connection is

	// checking serialises Check: a refusal is reported per connection, not per operation, so
	// two operations checked at once could each be blamed for the other's.
	checking sync.Mutex
}

// Join connects to the bus as the membership's principal. It dials with busclient.Dial: the
// address, user and secret (a password, an nkey seed that signs the server's challenge, or that
// and its user JWT in operator mode) as separate fields joined once, the certificate pinned by
// the membership's fingerprint when it has one, and the inbox prefix `_INBOX.<user>` — the only
// inbox the user is granted, so that every reply, JetStream's included, lands where it may be
// heard. opts are passed on (a reconnect policy, a name); Dial sets the credential, the inbox
// prefix and the error handler after them, so they cannot be lost.
//
// An address without a scheme is taken as nats://. Errors name the address and user, never the
// password or seed.
func Join(ctx context.Context, m Membership, opts ...nats.Option) (*Host, error) {
	return join(ctx, m, busclient.Credential{User: m.User, Password: m.Password, Seed: m.Seed, JWT: m.JWT}, opts...)
}

// JoinFile joins as the membership in the file at path (ReadMembershipFile) says. An
// operator-mode membership (a user JWT and its seed) is read from the file again at every
// reconnect, as nats.go reads a creds file: the servers read a user's permissions only at
// connect, so a new credential for changed permissions is taken by reconnecting, which the
// revocation of the old one forces. The agent writes a module instance's new membership over
// its file, and the host takes it with no restart. Until the file holds a credential the
// servers take, the host keeps trying, at the reconnect policy opts set, rather than giving
// up after two refusals as nats.go otherwise does. The address and servers are read once.
func JoinFile(ctx context.Context, path string, opts ...nats.Option) (*Host, error) {
	m, err := ReadMembershipFile(path)
	if err != nil {
		return nil, err
	}
	if m.JWT == "" {
		return Join(ctx, m, opts...)
	}
	cred := busclient.Credential{User: m.User, Refresh: func() (string, string, error) {
		now, err := ReadMembershipFile(path)
		if err != nil {
			return "", "", err
		}
		if now.User != m.User {
			return "", "", fmt.Errorf("%s now holds %s's membership, not %s's", path, now.User, m.User)
		}
		if now.JWT == "" {
			return "", "", fmt.Errorf("%s now holds no user JWT: the bus's auth changed, so restart the host", path)
		}
		return now.JWT, now.Seed, nil
	}}
	return join(ctx, m, cred, append([]nats.Option{nats.IgnoreAuthErrorAbort()}, opts...)...)
}

func join(ctx context.Context, m Membership, cred busclient.Credential, opts ...nats.Option) (*Host, error) {
	t := targetOf(m)
	h := &Host{user: m.User, address: t.Address(), closed: make(chan struct{})}
	// After the caller's options, so it chains their closed handler rather than losing it;
	// busclient.Dial chains this one in turn.
	opts = append(opts[:len(opts):len(opts)], h.onClosed)
	conn, err := busclient.Dial(ctx, t, cred, opts...)
	if err != nil {
		return nil, fmt.Errorf("joining the bus: %w", err)
	}
	js, err := jetstream.New(conn.Conn)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("joining the bus at %s as %q: %w", t.Address(), m.User, err)
	}
	h.conn, h.js = conn, js
	return h, nil
}

// onClosed is a nats.Option that closes h.closed when the connection closes, calling any closed
// handler set before it.
func (h *Host) onClosed(o *nats.Options) error {
	prev := o.ClosedCB
	var once sync.Once
	o.ClosedCB = func(nc *nats.Conn) {
		once.Do(func() { close(h.closed) })
		if prev != nil {
			prev(nc)
		}
	}
	return nil
}

// Conn is the connection, for what this package does not wrap. Its Violations channel is read
// by Check: a caller reading it too takes refusals Check would otherwise report (use
// LastViolation or WaitViolation instead, which do not consume).
func (h *Host) Conn() *busclient.Conn { return h.conn }

// JetStream is JetStream over the connection. A host may bind and acknowledge its own
// consumers and publish what it is granted; every stream and consumer call beyond that is
// the controller's and is refused.
func (h *Host) JetStream() jetstream.JetStream { return h.js }

// User is the principal this host joined as.
func (h *Host) User() string { return h.user }

// Address is the bus's address, without credentials.
func (h *Host) Address() string { return h.address }

// Close disconnects at once; deliveries not yet acknowledged are redelivered to whoever binds
// the consumer next, after its ack wait.
func (h *Host) Close() { h.conn.Close() }

// Drain stops taking deliveries, lets the handlers finish those already received, flushes what
// they published and closes the connection, waiting until it is closed or ctx ends.
func (h *Host) Drain(ctx context.Context) error {
	if err := h.conn.Drain(); err != nil {
		return fmt.Errorf("leaving the bus at %s: %w", h.address, err)
	}
	select {
	case <-h.closed:
		return nil
	case <-ctx.Done():
		h.conn.Close()
		return fmt.Errorf("leaving the bus at %s: %w", h.address, ctx.Err())
	}
}

// settleTimeout bounds, separately, the round trip that tells Check whether the server refused
// what an operation sent, and the wait for the record of a refusal it knows is on its way (which
// takes microseconds: the error handler's goroutine has it queued).
const settleTimeout = 2 * time.Second

// Check runs op and reports a permission violation it caused as the error: a *busclient.PermissionError
// naming the user, the operation and the subject, instead of the timeout or "no responders" a
// refusal otherwise looks like to the client (docs/nats-behaviour.md, "Inboxes and refusals").
//
// op gets a context that Check cancels as soon as a refusal arrives, so a refused request does
// not wait out its timeout. When op returns first, Check flushes the connection: the server
// answers a ping only after everything sent before it, so once the pong is in, any refusal of
// what op sent has reached the client. Only if the server did refuse something does it wait, for
// the connection's error handler, which records the refusal on its own goroutine moments later.
// An operation the server took therefore costs one round trip and no waiting. The round trip is
// made even when ctx has ended, for an op that timed out may have timed out because it was
// refused.
//
// Checks on one Host run one at a time; a refusal caused meanwhile by something else on the
// connection (a handler acknowledging on its own goroutine) is reported by whichever Check is
// running.
func (h *Host) Check(ctx context.Context, op func(ctx context.Context) error) error {
	h.checking.Lock()
	defer h.checking.Unlock()

	violations := h.conn.Violations()
	// Refusals reported before op started are not op's.
drain:
	for {
		select {
		case _, ok := <-violations:
			if !ok {
				break drain
			}
		default:
			break drain
		}
	}
	before, recorded := h.conn.LastError(), h.conn.LastViolation()

	opCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- op(opCtx) }()

	var opErr error
	select {
	case v, ok := <-violations:
		if ok {
			cancel()
			<-done
			return v
		}
		opErr = <-done // the connection closed: op fails on its own
	case opErr = <-done:
	}
	if v := h.refusedSince(ctx, before, recorded); v != nil {
		return v
	}
	return opErr
}

// refusedSince flushes the connection and returns the refusal the server reported after before
// was the connection's last error and recorded its last recorded refusal, or nil when there was
// none.
func (h *Host) refusedSince(ctx context.Context, before error, recorded *busclient.PermissionError) *busclient.PermissionError {
	ctx = context.WithoutCancel(ctx)
	fctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	if err := h.conn.FlushWithContext(fctx); err != nil {
		// Closed or unreachable: the caller's own error says so better than a guess here.
		return nil
	}
	// nats.go sets the last error when it reads the server's -ERR, before it reads the pong
	// that ended the flush; the error handler that turns it into a PermissionError runs later.
	now := h.conn.LastError()
	if now == before || !errors.Is(now, nats.ErrPermissionViolation) {
		return nil
	}
	wait := time.NewTimer(settleTimeout)
	defer wait.Stop()
	select {
	case v, ok := <-h.conn.Violations():
		if ok {
			return v
		}
	case <-wait.C:
	}
	// Someone else read the channel first; the connection still remembers the refusal.
	if v := h.conn.LastViolation(); v != recorded {
		return v
	}
	return nil
}
