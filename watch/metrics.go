package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/meshbus/meshctl/controller"
)

// metrics are watch's Prometheus metrics, in a registry of their own: the global one would
// carry whatever any imported library registers, and two Runs in one process (tests) would
// collide on it.
type metrics struct {
	reg          *prometheus.Registry
	reconciles   *prometheus.CounterVec
	duration     prometheus.Histogram
	applied      prometheus.Counter
	drift        prometheus.Counter
	invalidTrees prometheus.Counter
	lastSuccess  prometheus.Gauge
	conflicts    prometheus.Gauge

	health atomic.Pointer[health]
	// controller is the controller loop watch runs, for what it heard; nil until it starts.
	controller atomic.Pointer[controller.Controller]
}

// health is what /healthz answers: the state the last reconcile left, never its problems'
// text. Any local user can ask /healthz, and a problem quotes the description back — where a
// file is a symlink to a secret, the secret. The problems go to the log and to the state
// file (StateFileName, 0600) that meshctl status reads.
type health struct {
	ok    bool
	state string
}

// healthStates are /healthz's answers, one per outcome: fixed sentences, nothing quoted.
var healthStates = map[Outcome]string{
	OutcomeOK:       "ok: the last reconcile applied its changes; the bus is in sync",
	OutcomeNoop:     "ok: the bus is in sync",
	OutcomeInvalid:  "invalid: the description does not validate; nothing was applied and the last good state stays live (the problems are in watch's log and in meshctl status)",
	OutcomeRefused:  "refused: the plan would lose data or delete most of the mesh; nothing was applied (the reason is in watch's log, in meshctl status and in meshctl diff)",
	OutcomeConflict: "conflict: objects meshctl does not own are in the way; they and what depends on them are left alone, everything else was applied (they are named in watch's log, in meshctl status and in meshctl diff)",
	OutcomeError:    "error: the last reconcile failed, or left a server not serving the accounts config, and is retried (the reason is in watch's log and in meshctl status)",
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshctl_watch_reconciles_total",
			Help: "Reconciles by outcome: ok (changes applied), noop (in sync), invalid (the description does not validate), refused (data at stake, or most of the mesh deleted), conflict (everything applied but the objects in conflict), error (the bus unreachable, an apply failed, or a server not serving the accounts config).",
		}, []string{"outcome"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "meshctl_watch_reconcile_duration_seconds",
			Help: "How long a reconcile took, from loading the description to recording the outcome.",
			// From a converged read of a small mesh to a first apply of thousands of consumers.
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}),
		applied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshctl_watch_changes_applied_total",
			Help: "Changes applied to the bus (streams, consumers, the accounts config).",
		}),
		drift: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshctl_watch_drift_changes_total",
			Help: "Changes planned by a reconcile that no file change caused (an advisory of the bus, resync, SIGHUP, or their retry): drift made behind watch's back.",
		}),
		invalidTrees: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshctl_watch_invalid_trees_total",
			Help: "Changes of the description (or starts) that left it invalid; resyncs of the same invalid tree are not counted again.",
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshctl_watch_last_success_timestamp_seconds",
			Help: "Unix time of the last reconcile that left the bus in sync (ok or noop).",
		}),
		conflicts: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshctl_watch_conflicts",
			Help: "Objects in conflict in the last reconcile's plan: same-named objects meshctl does not own, left alone with what depends on them.",
		}),
	}
	m.reg.MustRegister(m.reconciles, m.duration, m.applied, m.drift, m.invalidTrees, m.lastSuccess, m.conflicts,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(heartbeatCollector{m})
	// Every outcome from zero, so a rate over a counter that has not moved yet is 0, not absent.
	for _, o := range outcomes {
		m.reconciles.WithLabelValues(string(o))
	}
	m.health.Store(&health{state: "starting: no reconcile has finished yet"})
	return m
}

// observe records a finished reconcile.
func (m *metrics) observe(c Cycle) {
	m.reconciles.WithLabelValues(string(c.Outcome)).Inc()
	m.duration.Observe(c.Duration.Seconds())
	m.applied.Add(float64(c.Applied))
	m.drift.Add(float64(c.Drift))
	if c.Outcome == OutcomeInvalid && c.Trigger.Has(TriggerStart|TriggerFiles) {
		m.invalidTrees.Inc()
	}
	ok := c.Outcome == OutcomeOK || c.Outcome == OutcomeNoop
	if ok {
		m.lastSuccess.SetToCurrentTime()
	}
	if c.Plan != nil {
		m.conflicts.Set(float64(len(c.Plan.Conflicts())))
	}
	m.health.Store(&health{ok: ok, state: healthStates[c.Outcome]})
}

// controllerOff is /healthz's answer while the controller loop is off the bus: the bus may be
// in sync, but no node enrols, files a report or is declared to until it is back.
const controllerOff = "controller: the controller is off the bus and joining again; meanwhile no node enrols, reports or is declared to (the reason is in watch's log)"

// answer is what /healthz says, given the last reconcile's state and the controller's health
// (nil while watch runs no controller): a reconcile's problem first, since a bus that cannot be
// reconciled is the likelier reason the controller is off it too; then the controller off the
// bus. A controller still joining for the first time is not held against watch: it is started
// once a reconcile succeeded, and joins the bus that reconcile just reached.
func answer(h *health, c *controller.Health) health {
	if h.ok && c != nil && c.Joined && !c.Connected {
		return health{state: controllerOff}
	}
	return *h
}

// healthz answers 200 when the last reconcile left the bus in sync and the controller is on it,
// and 503 otherwise, with a line saying which state it is in, for a load balancer or an
// operator's curl.
func (m *metrics) healthz(w http.ResponseWriter, _ *http.Request) {
	var c *controller.Health
	if ctrl := m.controller.Load(); ctrl != nil {
		h := ctrl.Health()
		c = &h
	}
	h := answer(m.health.Load(), c)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !h.ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	fmt.Fprintln(w, h.state)
}

// metricsServer serves /metrics and /healthz until stop.
type metricsServer struct {
	addr string
	srv  *http.Server
	wg   sync.WaitGroup
}

// startMetricsServer listens before it returns, so that an address in use fails Run at
// once instead of in a log line nobody reads.
func startMetricsServer(addr string, m *metrics, log *slog.Logger) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("serving metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", m.healthz)
	s := &metricsServer{addr: ln.Addr().String(), srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			// Serve fails only on a broken listener; metrics are not worth stopping the loop.
			log.Error("the metrics server stopped", "error", err)
		}
	}()
	return s, nil
}

// stop shuts the server down, giving requests in flight a few seconds, and waits for it.
func (s *metricsServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	s.wg.Wait()
}
