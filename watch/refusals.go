package watch

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/explain"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/state"
)

// refusalInterval is how long one group of refusals stays quiet in the log after it was
// logged: a principal retrying a refused request every second would otherwise fill the log
// with one line. Every refusal is counted all the same.
const refusalInterval = time.Minute

// maxRefusalGroups bounds the groups of refusals remembered: a principal trying subjects at
// random must not grow watch's memory without end. Beyond it a refusal of a new group is
// counted, not logged, until older groups have been quiet for an interval.
const maxRefusalGroups = 1000

// maxExplainedPerInterval bounds the refusals explained an interval. Each piece of advice is
// tried on a copy of the description, validated and derived — tens of milliseconds on a mesh of
// thousands of instances — and a principal refused subjects at random must not have watch spend
// its cores on advice. Past the bound a group is logged without advice, and explained when it
// is logged again, in a later interval.
const maxExplainedPerInterval = 100

// recordPace is the least time between two passes of the recorder: refusals that come
// faster are added up in memory and written together, so a flood of them costs the store a
// write per group a second, never one per refusal.
const recordPace = time.Second

// refusals counts, explains and records what the embedded bus refused, by group (explain's
// Group: principal, operation, the rule the subject falls under, queue group), so that a
// client whose inbox prefix is not set, refused a new random subject on every connection, is
// one line a minute and one row of `meshctl status`, not one per connection. The server calls
// refused on its own goroutines, as it logs each violation.
type refusals struct {
	log      *slog.Logger
	total    *prometheus.CounterVec
	interval time.Duration
	// mesh is the description the bus carries, for the advice; nil until the first reconcile.
	mesh atomic.Pointer[model.Mesh]
	// pending wakes the recorder goroutine: a store write must not hold up the server's
	// client, so refused only adds to its group and signals.
	pending chan struct{}

	mu     sync.Mutex
	groups map[explain.Group]*refusalGroup
	// explained counts the refusals explained since explaining, the interval's start.
	explaining time.Time
	explained  int
}

// refusalGroup is what one group's refusals came to.
type refusalGroup struct {
	first, last, logged time.Time
	subject             string // the latest refused
	advice              string // as last logged; "" until the first log has it
	since               int64  // refused again since it was last logged
	unrecorded          int64  // refused since the recorder last wrote the group
}

func newRefusals(log *slog.Logger, reg prometheus.Registerer) *refusals {
	r := &refusals{
		log: log,
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshctl_permission_refusals_total",
			Help: "What the embedded bus refused a principal, by user and direction (publish or subscribe; a refused reply subject counts as a publish).",
		}, []string{"user", "direction"}),
		interval: refusalInterval,
		pending:  make(chan struct{}, 1),
		groups:   map[explain.Group]*refusalGroup{},
	}
	reg.MustRegister(r.total)
	return r
}

// serverLog is the embedded bus's logger, reporting refusals to r. The generation principal's
// refused logins are meshctl's own proof polling for a reload to take, not an error.
func (r *refusals) serverLog() *bus.ServerLog {
	return &bus.ServerLog{Log: r.log, OnRefusal: r.refused, OwnLogins: []string{accounts.GenerationUser}}
}

func direction(op string) string {
	if op == busclient.OpSubscribe {
		return "subscribe"
	}
	return "publish"
}

// refused counts p in its group and, unless the group was logged less than an interval ago,
// logs it with what the description would have to say to grant it; the recorder writes the
// group's count for `meshctl status` either way.
func (r *refusals) refused(p busclient.PermissionError) {
	r.total.WithLabelValues(p.User, direction(p.Op)).Inc()
	now := time.Now()
	key := explain.GroupOf(p)
	r.mu.Lock()
	g := r.groups[key]
	if g == nil {
		if len(r.groups) >= maxRefusalGroups {
			r.forgetQuiet(now)
		}
		if len(r.groups) >= maxRefusalGroups {
			r.mu.Unlock()
			return
		}
		g = &refusalGroup{first: now}
		r.groups[key] = g
	}
	g.last, g.subject = now, p.Subject
	if !g.logged.IsZero() && now.Sub(g.logged) < r.interval {
		g.since++
		g.unrecorded++
		r.mu.Unlock()
		r.wake()
		return
	}
	again := g.since
	g.logged, g.since = now, 0
	if now.Sub(r.explaining) >= r.interval {
		r.explaining, r.explained = now, 0
	}
	afford := r.explained < maxExplainedPerInterval
	if afford {
		r.explained++
	}
	r.mu.Unlock()

	// Explained outside the lock: the advice is checked against a copy of the description,
	// validated and derived, which must not hold up the server's other clients.
	advice := r.explain(p, afford)
	attrs := []any{"user", p.User, "op", p.Op, "subject", p.Subject}
	if key.Rule != p.Subject {
		attrs = append(attrs, "rule", key.Rule)
	}
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
	r.mu.Lock()
	g.advice = advice.Text
	g.unrecorded++
	r.mu.Unlock()
	r.wake()
}

// explain is the advice for p against the description the bus carries, when the interval's
// bound affords it.
func (r *refusals) explain(p busclient.PermissionError, afford bool) explain.Advice {
	m := r.mesh.Load()
	switch {
	case m == nil:
		return explain.Advice{Text: "no description has been reconciled yet to explain it"}
	case !afford:
		return explain.Advice{Text: fmt.Sprintf("not explained: %d kinds of refusal were explained in the last %s; this one is when it is logged next", maxExplainedPerInterval, r.interval)}
	}
	return explain.Refusal(m, p)
}

// forgetQuiet drops the groups refused last an interval ago or more whose refusals are all
// written. Called with mu held.
func (r *refusals) forgetQuiet(now time.Time) {
	for k, g := range r.groups {
		if now.Sub(g.last) >= r.interval && g.unrecorded == 0 {
			delete(r.groups, k)
		}
	}
}

func (r *refusals) wake() {
	select {
	case r.pending <- struct{}{}:
	default:
	}
}

// record writes the groups' refusals into the store, for `meshctl status`, at most once a
// recordPace, until ctx ends; then it writes what is left.
func (r *refusals) record(ctx context.Context, st *state.Store) {
	paced(ctx, r.pending, func(ctx context.Context) { r.write(ctx, st) })
}

// paced calls write each time pending says there is something to write, at most once a
// recordPace, until ctx ends; then once more, bounded, for what is left. It is the loop of
// watch's recorders, which keep the store's writes off the goroutine that hears the bus.
func paced(ctx context.Context, pending <-chan struct{}, write func(context.Context)) {
	var next time.Time // the earliest the next write may start
	for {
		select {
		case <-ctx.Done():
		case <-pending:
			if wait := time.Until(next); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
				case <-t.C:
				}
				t.Stop()
			}
		}
		if ctx.Err() != nil {
			// Bounded, so that a store another process holds does not hold up the stop.
			last, cancel := context.WithTimeout(context.Background(), time.Second)
			write(last)
			cancel()
			return
		}
		write(ctx)
		next = time.Now().Add(recordPace)
	}
}

// write records each group's refusals not yet written, as one row per group.
func (r *refusals) write(ctx context.Context, st *state.Store) {
	r.mu.Lock()
	var recs []state.Refusal
	for k, g := range r.groups {
		if g.unrecorded == 0 || g.advice == "" {
			continue // the refusal being logged writes it, once it has its advice
		}
		recs = append(recs, state.Refusal{User: k.User, Op: k.Op, Rule: k.Rule, Subject: g.subject, Queue: k.Queue,
			Advice: g.advice, Count: g.unrecorded, FirstAt: g.first, LastAt: g.last})
		g.unrecorded = 0
	}
	r.mu.Unlock()
	for _, rec := range recs {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := st.RecordRefusal(wctx, rec); err != nil {
			r.log.Warn("a refusal could not be recorded for meshctl status", "error", err)
		}
		cancel()
	}
}
