package reconcile

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/jsapi"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// A converged diff or apply on the embedded bus a `meshctl watch` serves is mostly two
// waits and one piece of work: the controller's login, which the server checks with bcrypt
// (a millisecond at the default cost, a tenth of a second at cost 11), the listing of the
// bus, and the loading of the description. Neither wait needs the description — the bus's
// address is in STATE/bus/bus.json, the password in STATE/controller.password — so both are
// started before it is read, on the server's core while the load takes meshctl's: the login
// always, and the listing where reading the bus then is what the command would do anyway. A
// diff takes no lock and changes nothing, so it lists at once; an apply reads the bus only
// under the apply lock, so it lists early only when it got the lock at once (startApply).
//
// It is only a head start. The session uses the connection only when it goes to the very
// bus the predial reached, as the controller with the password the store vouches for, and
// the listing only with that connection, for its first plan; anything else (an external
// bus, a bus that moved, a password rotated, a description that turns out invalid)
// discards them.

// Predial is a connection to the embedded bus started ahead of Connect; nil when there is
// nothing to start (no bus served from the state directory, no controller password yet).
type Predial struct {
	url, password string
	done          chan struct{}
	conn          *busclient.Conn
	err           error
	once          sync.Once
	taken         bool // the session took the connection

	// With a listing: the bus as read on the connection, once listed is closed.
	list     bool
	listed   chan struct{}
	live     plan.Live
	listErr  error
	listOnce sync.Once
}

// StartPredial starts the controller's connection to the embedded bus another meshctl
// process serves from stateDir, reading only bus.json and the controller's password file.
func StartPredial(ctx context.Context, stateDir string) *Predial {
	return startPredial(ctx, stateDir, false)
}

// StartPredialAndList is StartPredial, and reads the bus's streams and consumers on the
// connection as soon as it is up: for a read-only plan (diff).
func StartPredialAndList(ctx context.Context, stateDir string) *Predial {
	return startPredial(ctx, stateDir, true)
}

func startPredial(ctx context.Context, stateDir string, list bool) *Predial {
	url, _, ok := bus.RunningEmbeddedProcess(stateDir)
	if !ok {
		return nil
	}
	return predialTo(ctx, stateDir, url, list)
}

// predialTo starts the predial to the bus at url, served from stateDir.
func predialTo(ctx context.Context, stateDir, url string, list bool) *Predial {
	password, err := state.ReadControllerPassword(stateDir)
	if err != nil {
		return nil
	}
	p := &Predial{url: url, password: password, done: make(chan struct{}), list: list, listed: make(chan struct{})}
	go func() {
		defer close(p.listed)
		p.conn, p.err = dialController(ctx, busclient.Target{URL: url}, password)
		close(p.done)
		if p.err != nil || !list {
			return
		}
		api, err := jsapi.New(p.conn.Conn)
		if err != nil {
			p.listErr = err
			return
		}
		p.live, p.listErr = readBus(ctx, api, nil, nil)
	}()
	return p
}

// startApply gives an apply on the embedded bus a `meshctl watch` serves from stateDir its
// head start: the controller's connection, and, when the apply lock is free at once, the lock
// (the cycle's, CycleOptions.Predial) and the reading of the bus under it, all while the
// description loads. The bus is read only under the lock, as every apply reads it; a lock
// another meshctl holds is left to the apply's own wait or refusal, with the connection alone
// started. It is nil where no bus is served from stateDir, and l left as it was; the caller
// closes the predial and releases l.
func startApply(ctx context.Context, stateDir string, l *cycleLock, notice func(string)) *Predial {
	url, _, served := bus.RunningEmbeddedProcess(stateDir)
	if !served {
		return nil
	}
	if err := l.acquire(ctx, stateDir, false, notice); err != nil {
		return predialTo(ctx, stateDir, url, false)
	}
	return predialTo(ctx, stateDir, url, true)
}

// listing returns the bus as the predial read it, when the session took its connection and
// it listed the bus; ok is false otherwise, and after the first call.
func (p *Predial) listing() (live plan.Live, ok bool, err error) {
	if p == nil || !p.list {
		return plan.Live{}, false, nil
	}
	p.listOnce.Do(func() {
		if !p.taken {
			return
		}
		<-p.listed
		live, ok, err = p.live, true, p.listErr
	})
	return live, ok, err
}

// dialController connects as the controller the way a session does: reconnecting for as
// long as it takes, through authorization errors too, so that a config an operator breaks
// and mends, or a bus restarting, does not leave a watch with a dead connection.
func dialController(ctx context.Context, t busclient.Target, password string) (*busclient.Conn, error) {
	return busclient.Dial(ctx, t, busclient.Credential{User: render.ControllerUser, Password: password},
		nats.MaxReconnects(-1), nats.IgnoreAuthErrorAbort())
}

// take returns the connection when it reached the bus at url as the controller with
// password, and nil otherwise (closing it). A Predial is taken at most once.
func (p *Predial) take(url, password string) *busclient.Conn {
	if p == nil {
		return nil
	}
	var conn *busclient.Conn
	p.once.Do(func() {
		<-p.done
		if p.err != nil {
			return
		}
		if p.url != url || p.password != password || p.conn.IsClosed() {
			p.conn.Close()
			return
		}
		conn, p.taken = p.conn, true
	})
	return conn
}

// Close discards the connection if no session took it.
func (p *Predial) Close() { p.take("", "") }
