package watch

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/explain"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/state"
)

// refusalInterval is how long one distinct refusal stays quiet in the log after it was logged:
// a principal retrying a refused request every second would otherwise fill the log with one
// line. Every refusal is counted all the same.
const refusalInterval = time.Minute

// maxDistinctRefusals bounds the distinct refusals remembered between two logs of each: a
// principal trying subjects at random must not grow watch's memory without end. Beyond it a
// new kind is counted, not logged, until older ones have been quiet for an interval.
const maxDistinctRefusals = 1000

// refusals counts, explains and records what the embedded bus refused. The server calls refused
// on its own goroutines, as it logs each violation.
type refusals struct {
	log      *slog.Logger
	total    *prometheus.CounterVec
	interval time.Duration
	// mesh is the description the bus carries, for the advice; nil until the first reconcile.
	mesh atomic.Pointer[model.Mesh]
	// records are handed to the recorder goroutine: a store write must not hold up the
	// server's client, and a full queue drops the record (the log and the counter have it).
	records chan state.Refusal

	mu   sync.Mutex
	seen map[bus.PermissionError]*seenRefusal
}

type seenRefusal struct {
	first, logged time.Time
	since         int64 // refused again since it was last logged
}

func newRefusals(log *slog.Logger, reg prometheus.Registerer) *refusals {
	r := &refusals{
		log: log,
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshctl_permission_refusals_total",
			Help: "What the embedded bus refused a principal, by user and direction (publish or subscribe; a refused reply subject counts as a publish).",
		}, []string{"user", "direction"}),
		interval: refusalInterval,
		records:  make(chan state.Refusal, 64),
		seen:     map[bus.PermissionError]*seenRefusal{},
	}
	reg.MustRegister(r.total)
	return r
}

// serverLog is the embedded bus's logger, reporting refusals to r. The generation principal's
// refused logins are meshctl's own proof polling for a reload to take, not an error.
func (r *refusals) serverLog() *bus.ServerLog {
	return &bus.ServerLog{Log: r.log, OnRefusal: r.refused, OwnLogins: []string{reconcile.GenerationUser}}
}

func direction(op string) string {
	if op == bus.OpSubscribe {
		return "subscribe"
	}
	return "publish"
}

// refused counts p and, unless the same refusal was logged less than an interval ago, logs it
// with what the description would have to say to grant it, and hands it to the recorder.
func (r *refusals) refused(p bus.PermissionError) {
	r.total.WithLabelValues(p.User, direction(p.Op)).Inc()
	now := time.Now()
	r.mu.Lock()
	s := r.seen[p]
	switch {
	case s != nil && now.Sub(s.logged) < r.interval:
		s.since++
		r.mu.Unlock()
		return
	case s == nil:
		if len(r.seen) >= maxDistinctRefusals {
			for k, v := range r.seen {
				if now.Sub(v.logged) >= r.interval {
					delete(r.seen, k)
				}
			}
		}
		if len(r.seen) >= maxDistinctRefusals {
			r.mu.Unlock()
			return
		}
		s = &seenRefusal{first: now}
		r.seen[p] = s
	}
	again := s.since
	s.logged, s.since = now, 0
	r.mu.Unlock()

	advice := explain.Advice{Text: "no description has been reconciled yet to explain it"}
	if m := r.mesh.Load(); m != nil {
		advice = explain.Refusal(m, p)
	}
	attrs := []any{"user", p.User, "op", p.Op, "subject", p.Subject}
	if p.Queue != "" {
		attrs = append(attrs, "queue", p.Queue)
	}
	if advice.Grantable {
		attrs = append(attrs, "fix", advice.Text)
	} else {
		attrs = append(attrs, "why", advice.Text)
	}
	if again > 0 {
		attrs = append(attrs, "refused_again", again)
	}
	r.log.Warn("refused: "+p.Error()+"; "+advice.Text, attrs...)
	select {
	case r.records <- state.Refusal{User: p.User, Op: p.Op, Subject: p.Subject, Queue: p.Queue, Advice: advice.Text,
		Count: again + 1, FirstAt: s.first, LastAt: now}:
	default:
	}
}

// record writes the refusals handed over into the store, for `meshctl status`, until ctx ends.
func (r *refusals) record(ctx context.Context, st *state.Store) {
	for {
		select {
		case <-ctx.Done():
			return
		case rec := <-r.records:
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if err := st.RecordRefusal(wctx, rec); err != nil {
				r.log.Warn("a refusal could not be recorded for meshctl status", "error", err)
			}
			cancel()
		}
	}
}
