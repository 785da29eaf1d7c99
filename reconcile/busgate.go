package reconcile

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// ErrBusLost is the one error for a connection to the bus that was lost. An apply returns it
// (wrapped) when the connection dropped and did not come back in time: the apply stopped
// sending and says what it did and did not. watch wraps a cycle's error with it when the
// cycle stopped because its connection dropped (CycleResult.Lost).
var ErrBusLost = errors.New("the connection to the bus was lost")

// busReturnWait is how long an apply whose connection dropped waits for the bus to come
// back before it gives up. A server restarted by its supervisor is back within a few
// seconds; one that was killed is not, and an apply that went on sending would wait out
// every call's timeout in turn — minutes, with a line per call.
const busReturnWait = 5 * time.Second

// busGate lets an apply's calls through while the connection is up. When it drops, the
// calls in flight are cancelled (their replies went with the connection), no new call is
// sent, and each waits for the connection to come back, at most busReturnWait after the
// drop; a call cut off by the drop is sent again once the bus is back.
type busGate struct {
	nc       *nats.Conn
	addr     string // the bus's address, for the error
	statuses chan nats.Status
	finished chan struct{}

	mu     sync.Mutex
	up     bool
	closed bool          // nats.go gave up on the connection: it does not come back
	drops  int           // drops seen, so a call can tell it was cut off
	lost   time.Time     // when the connection last dropped
	drop   chan struct{} // closed at the next drop
	back   chan struct{} // closed when the connection is up again
}

// watchBus starts following the status of nc, connected to the bus at addr; stop ends it.
func watchBus(nc *nats.Conn, addr string) *busGate {
	g := &busGate{nc: nc, addr: addr, finished: make(chan struct{}), drop: make(chan struct{}), back: make(chan struct{})}
	g.statuses = nc.StatusChanged(nats.CONNECTED, nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED)
	// A change before the listener was registered is not sent on the channel.
	g.set(nc.Status())
	go func() {
		defer close(g.finished)
		for st := range g.statuses {
			g.set(st)
		}
	}()
	return g
}

func (g *busGate) set(st nats.Status) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch st {
	case nats.CONNECTED:
		if !g.up {
			g.up = true
			close(g.back)
		}
	case nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED:
		g.closed = g.closed || st == nats.CLOSED
		if g.up || g.lost.IsZero() {
			g.up = false
			g.drops++
			g.lost = time.Now()
			close(g.drop)
			g.drop = make(chan struct{})
			g.back = make(chan struct{})
		}
	}
}

// stop ends following the connection and waits for the goroutine it started.
func (g *busGate) stop() {
	g.nc.RemoveStatusListener(g.statuses)
	<-g.finished
}

// call runs do while the connection is up. A call the drop of the connection cut off is
// sent again once the bus is back when resend is set: streams' and consumers' calls are
// idempotent (a create of what exists with the same config succeeds, a delete of what is
// gone is the goal reached). It returns ErrBusLost when the bus did not come back in time.
func (g *busGate) call(ctx context.Context, resend bool, do func(context.Context) error) error {
	for {
		g.mu.Lock()
		up, closed, drops, lost, drop, back := g.up, g.closed, g.drops, g.lost, g.drop, g.back
		g.mu.Unlock()
		if !up {
			if closed {
				return ErrBusLost
			}
			wait := time.NewTimer(time.Until(lost.Add(busReturnWait)))
			select {
			case <-back:
				wait.Stop()
				continue
			case <-wait.C:
				return ErrBusLost
			case <-ctx.Done():
				wait.Stop()
				return ctx.Err()
			}
		}
		cctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-drop:
				cancel()
			case <-cctx.Done():
			}
		}()
		err := do(cctx)
		cancel()
		g.mu.Lock()
		cut := g.drops != drops
		g.mu.Unlock()
		if err == nil || !cut {
			return err
		}
		if !resend {
			// What the call did is unknown (the accounts config may be on disk and not
			// reloaded): the next apply plans from what is there.
			return ErrBusLost
		}
	}
}
