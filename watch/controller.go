package watch

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/controller"
	"github.com/meshbus/meshctl/reconcile"
)

// TriggerController is the controller asking for the credentials it minted or revoked (an
// enrolled node's, a declared instance's, an enrolment identity locked again) to be made live:
// one reconcile renders the accounts config from the store and reloads it.
const TriggerController = triggerReload << 1

// controllerSide is the controller loop watch runs beside the reconcile loop, on the bus the
// reconcile loop connected to. It is started once a reconcile has connected, and started anew
// when the bus it was on changed or the session came back with a controller credential minted
// since.
type controllerSide struct {
	ctrl     *controller.Controller
	target   busclient.Target
	password string
	cancel   context.CancelFunc
	done     chan struct{}
}

func (c *controllerSide) stop() {
	c.cancel()
	<-c.done
}

// withController hands the controller the description a reconcile just brought the bus to,
// starting the controller first when there is none on this bus. It runs on the loop's goroutine.
func (l *loop) withController(ctx context.Context, r cycleResult) {
	if r.conn == nil || (r.cycle.Outcome != OutcomeOK && r.cycle.Outcome != OutcomeNoop) || r.conn.mesh == nil {
		return
	}
	target := r.conn.sess.Target
	if l.ctl != nil && l.ctl.target != target {
		l.ctl.stop()
		l.ctl = nil
	}
	if l.ctl != nil && r.conn.dialled && !r.conn.mesh.Bus.JWT() {
		// The session logged in afresh: with a credential rotated since (in another
		// terminal), the controller would knock with the old one for as long as it runs.
		if password, err := l.store.StoredControllerPassword(ctx); err == nil && password != l.ctl.password {
			l.log.Info("the controller's credential was rotated: restarting the controller loop with it")
			l.ctl.stop()
			l.ctl = nil
		}
	}
	r.conn.dialled = false
	if l.ctl == nil {
		var password, creds string
		if r.conn.mesh.Bus.JWT() {
			// The creds the session minted and keeps current: a jwt store has no password.
			creds = filepath.Join(l.store.Dir(), reconcile.ControllerCredsFile)
		} else {
			var err error
			if password, err = l.store.ControllerPassword(ctx, l.cfg.Cost); err != nil {
				l.log.Error("the controller cannot start: its credential is unreadable", "error", err)
				return
			}
		}
		c := controller.New(controller.Config{
			Target: target, Password: password, Creds: creds, Store: l.store, Cost: l.cfg.Cost, Sync: l.syncForController,
			Bound: l.cfg.ControllerBound, Retry: l.cfg.ControllerRetry, Logger: l.log, Observe: l.cfg.OnController,
		})
		cctx, cancel := context.WithCancel(ctx)
		side := &controllerSide{ctrl: c, target: target, password: password, cancel: cancel, done: make(chan struct{})}
		go func() {
			defer close(side.done)
			c.Run(cctx)
		}()
		l.ctl = side
		l.metrics.controller.Store(c)
	}
	l.ctl.ctrl.Mesh(r.conn.mesh)
}

// errStopping answers a controller's request for a reconcile that watch will no longer run.
var errStopping = errors.New("watch is stopping")

// syncForController is the controller's Sync: it asks the loop for a reconcile and waits for
// one that started after the asking to finish. It runs on the controller's goroutine.
func (l *loop) syncForController(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case l.syncs <- reply:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// answerSyncs tells the controller's waiters how the reconcile they waited for ended.
func answerSyncs(waiters []chan error, c Cycle) {
	var err error
	switch c.Outcome {
	case OutcomeOK, OutcomeNoop:
	case OutcomeError, OutcomeRefused, OutcomeInvalid:
		err = c.Err
		if err == nil {
			err = errors.New("the reconcile ended " + string(c.Outcome))
		}
	}
	for _, w := range waiters {
		w <- err
	}
}

// StaleAfter is how long a node may stay silent before it counts as stale, in the metrics and
// in `meshctl status`: three heartbeats of the agent's default interval.
const StaleAfter = 30 * time.Second

// heartbeatCollector exports what the controller knows of the live mesh, read at each scrape:
// the last heartbeat of each node and how many nodes have gone silent (heartbeats are kept in
// memory only, so these say what this watch heard since it started), and each seat's waiting
// work and whether its worker is bound, read from the bus on the controller's connection; and
// the controller's own health, which the reconciles' metrics do not show: whether it is on the
// bus, and when it last took a message.
type heartbeatCollector struct{ m *metrics }

var (
	lastHeartbeatDesc = prometheus.NewDesc("meshctl_controller_node_last_heartbeat_timestamp_seconds",
		"Unix time of the last heartbeat the controller heard from each node since watch started.", []string{"node"}, nil)
	staleNodesDesc = prometheus.NewDesc("meshctl_controller_stale_nodes",
		"Nodes heard since watch started whose last heartbeat is older than 30s (three of the agent's default interval).", nil, nil)
	seatWaitingDesc = prometheus.NewDesc("meshctl_controller_seat_work_waiting",
		"Work in each seat's queue: not yet delivered, or delivered and not yet acknowledged.", []string{"seat"}, nil)
	seatBoundDesc = prometheus.NewDesc("meshctl_controller_seat_worker_bound",
		"1 when the seat's holder is at work on its worker (a subscription takes its deliveries, or a pull request waits on it), else 0.", []string{"seat"}, nil)
	connectedDesc = prometheus.NewDesc("meshctl_controller_connected",
		"1 while the controller loop is on the bus, else 0 (joining, or joining again after losing its connection).", nil, nil)
	lastTakenDesc = prometheus.NewDesc("meshctl_controller_last_message_timestamp_seconds",
		"Unix time of the last report or enrolment request the controller took from CONTROL; absent before the first.", nil, nil)
)

// scrapeTimeout bounds reading the seats' queues from the bus at a scrape.
const scrapeTimeout = 2 * time.Second

func (c heartbeatCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- lastHeartbeatDesc
	ch <- staleNodesDesc
	ch <- seatWaitingDesc
	ch <- seatBoundDesc
	ch <- connectedDesc
	ch <- lastTakenDesc
}

func (c heartbeatCollector) Collect(ch chan<- prometheus.Metric) {
	var beats map[string]controller.Seen
	if ctrl := c.m.controller.Load(); ctrl != nil {
		health := ctrl.Health()
		connected := 0.0
		if health.Connected {
			connected = 1
		}
		ch <- prometheus.MustNewConstMetric(connectedDesc, prometheus.GaugeValue, connected)
		if !health.LastTaken.IsZero() {
			ch <- prometheus.MustNewConstMetric(lastTakenDesc, prometheus.GaugeValue, float64(health.LastTaken.UnixNano())/1e9)
		}
		beats = ctrl.Heartbeats()
		ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
		// A bus that does not answer leaves the seats out of this scrape rather than failing it.
		seats, _ := ctrl.SeatWork(ctx)
		cancel()
		for _, s := range seats {
			bound := 0.0
			if s.Bound {
				bound = 1
			}
			ch <- prometheus.MustNewConstMetric(seatWaitingDesc, prometheus.GaugeValue, float64(s.Waiting), s.Seat)
			ch <- prometheus.MustNewConstMetric(seatBoundDesc, prometheus.GaugeValue, bound, s.Seat)
		}
	}
	stale := 0
	for node, s := range beats {
		ch <- prometheus.MustNewConstMetric(lastHeartbeatDesc, prometheus.GaugeValue, float64(s.At.UnixNano())/1e9, node)
		if time.Since(s.At) > StaleAfter {
			stale++
		}
	}
	ch <- prometheus.MustNewConstMetric(staleNodesDesc, prometheus.GaugeValue, float64(stale))
}
