package bus

import (
	"slices"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Stopping a bus for a process that exits right after.
//
// A clean stop of nats-server takes about 10 ms per file-backed consumer, a minute at 6,000, and
// saves only what the server has not yet written: consumers' delivery and ack state, which only
// another client can have changed (docs/nats-behaviour.md, "What is on disk, and stopping a
// server"). So a process about to exit skips it when the server's own counters show that no
// connection but meshctl's was ever made: every connection it accepted (Varz.TotalConnections)
// is in Connz, open or closed, as an authorized user of meshctl's or one that failed to
// authenticate, on a server that requires authentication. Totals that do not add up (Connz keeps
// only the last MaxClosedClients closed connections), or a server with a cluster, routes, leaf
// nodes or gateways, get the clean stop; the check is made again once the server refuses new
// clients.

// StopForExit stops the bus for a process that exits right after it returns. When only
// connections of the users in own were ever made to it (the rule above), it returns true at
// once: the server refuses new clients, bus.json and the control socket are gone, and the
// server goes on stopping in the background while the state directory stays locked, until it
// has stopped or the process has exited, whichever comes first. Otherwise it calls slow (to say
// that stopping takes a while), then stops the bus as Shutdown does, and returns false. Shutdown
// after it waits until the server has stopped.
func (e *Embedded) StopForExit(own []string, slow func()) (fast bool) {
	e.stopOnce.Do(func() {
		total, ok := onlyConnectionsOf(e.srv, own)
		if !ok {
			slow()
			e.stop()
			return
		}
		go e.stop()
		// Shutdown stops accepting clients before it stops JetStream: a client that connects
		// later is counted in TotalConnections but closed at once.
		for deadline := time.Now().Add(5 * time.Second); e.srv.Running() && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		if again, ok := onlyConnectionsOf(e.srv, own); e.srv.Running() || !ok || again != total {
			slow()
			<-e.stopped
			return
		}
		e.removeRecord()
		if e.control != nil {
			e.control.close()
		}
		fast = true
	})
	return fast
}

// onlyConnectionsOf reports whether every client connection srv ever accepted is one of the
// users in own, or was closed before it authenticated, and how many it accepted.
func onlyConnectionsOf(srv *server.Server, own []string) (total uint64, ok bool) {
	if srv.JetStreamIsClustered() || srv.NumRoutes() > 0 || srv.NumLeafNodes() > 0 || srv.NumOutboundGateways() > 0 {
		return 0, false
	}
	// A connection just closed is out of the open list a moment before the server records it
	// among the closed (saveClosedClient runs in a goroutine of its own), and a login being
	// refused is open, under the user it claims, until the server has closed it: so what does
	// not settle is read again for a while. Totals that never add up are connections the server
	// no longer remembers.
	for deadline := time.Now().Add(accountingWait); ; time.Sleep(5 * time.Millisecond) {
		v, err := srv.Varz(nil)
		if err != nil {
			return 0, false
		}
		total = v.TotalConnections
		if !v.AuthRequired {
			// Anyone gets in, under any user name it claims.
			return total, false
		}
		c, err := srv.Connz(&server.ConnzOptions{State: server.ConnAll, Username: true, Limit: int(total) + 1})
		if err != nil {
			return total, false
		}
		settled := uint64(c.Total) == total && len(c.Conns) == c.Total
		for _, ci := range c.Conns {
			switch {
			case ownOrRefused(ci, own):
			case ci.Stop == nil && ci.Account == "":
				// Open and still in the global account every connection starts in: its
				// login is not decided yet (or it is a user of no account, which the
				// deadline then counts as a client).
				settled = false
			default:
				return total, false // another client, let in: it may have used the bus
			}
		}
		if settled {
			return total, true
		}
		if time.Now().After(deadline) {
			return total, false
		}
	}
}

// accountingWait bounds how long onlyConnectionsOf waits for the server's connection counts to
// add up: recording a closed connection is a moment's work, but a loaded machine may delay it;
// counts that never add up (more connections than the server remembers) are rare enough that
// waiting this long first costs nothing that matters beside the clean stop that follows.
const accountingWait = 3 * time.Second

// ownOrRefused reports whether ci is a connection of one of the users in own, or one closed
// because it failed to authenticate (whatever user it claimed), which did nothing on the bus.
func ownOrRefused(ci *server.ConnInfo, own []string) bool {
	if ci.Stop != nil && (ci.Reason == server.AuthenticationViolation.String() ||
		ci.Reason == server.AuthenticationTimeout.String()) {
		return true
	}
	return ci.AuthorizedUser != "" && slices.Contains(own, ci.AuthorizedUser)
}
