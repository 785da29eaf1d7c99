package reconcile

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// A converged diff or apply on the embedded bus a `meshctl watch` serves is mostly two
// waits and one piece of work: the controller's login, which the server checks with bcrypt
// (a millisecond at the default cost, a tenth of a second at cost 11), the listing of the
// bus, and the loading of the description. The login needs nothing of the description — the bus's address is in
// STATE/bus/bus.json and the password in STATE/controller.password — so it is started
// before the description is read, on the server's core while the load takes meshctl's.
//
// It is only a head start. The session uses the connection only when it goes to the very
// bus the predial reached, as the controller with the password the store vouches for;
// anything else (an external bus, a bus that moved, a password minted anew, a description
// that turns out invalid) discards it.

// Predial is a connection to the embedded bus started ahead of Connect; nil when there is
// nothing to start (no bus served from the state directory, no controller password yet).
type Predial struct {
	url, password string
	done          chan struct{}
	conn          *bus.Conn
	err           error
	once          sync.Once
}

// StartPredial starts the controller's connection to the embedded bus another meshctl
// process serves from stateDir, reading only bus.json and the controller's password file.
func StartPredial(ctx context.Context, stateDir string) *Predial {
	url, _, ok := bus.RunningEmbeddedProcess(stateDir)
	if !ok {
		return nil
	}
	password, err := state.ReadControllerPassword(stateDir)
	if err != nil {
		return nil
	}
	p := &Predial{url: url, password: password, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.conn, p.err = dialController(ctx, bus.Target{URL: url}, password)
	}()
	return p
}

// dialController connects as the controller the way a session does: reconnecting for as
// long as it takes, through authorization errors too, so that a config an operator breaks
// and mends, or a bus restarting, does not leave a watch with a dead connection.
func dialController(ctx context.Context, t bus.Target, password string) (*bus.Conn, error) {
	return bus.Dial(ctx, t, bus.Credential{User: render.ControllerUser, Password: password},
		nats.MaxReconnects(-1), nats.IgnoreAuthErrorAbort())
}

// take returns the connection when it reached the bus at url as the controller with
// password, and nil otherwise (closing it). A Predial is taken at most once.
func (p *Predial) take(url, password string) *bus.Conn {
	if p == nil {
		return nil
	}
	var conn *bus.Conn
	p.once.Do(func() {
		<-p.done
		if p.err != nil {
			return
		}
		if p.url != url || p.password != password || p.conn.IsClosed() {
			p.conn.Close()
			return
		}
		conn = p.conn
	})
	return conn
}

// Close discards the connection if no session took it.
func (p *Predial) Close() { p.take("", "") }
