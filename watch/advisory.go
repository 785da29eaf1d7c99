package watch

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/render"
)

// TriggerAdvisory is the server's own word, a JetStream advisory, that a stream or consumer
// of the mesh was deleted or a stream's config changed: drift, healed within a debounce
// rather than at the next resync. The resync stays the safety net for what no advisory
// tells (a consumer's config changed in place, the accounts file edited, an advisory lost
// while the connection was down).
const TriggerAdvisory = TriggerController << 1

// advisorySubjects are the controller's grants (render) that watch listens on: those of drift,
// and those of dead letters (deadletters.go).
var advisorySubjects = []string{render.StreamDeletedAdvisories, render.StreamUpdatedAdvisories, render.ConsumerDeletedAdvisories,
	render.MaxDeliveriesAdvisories}

// maxAdvisoryDebounce bounds the debounce of what the bus announces: a hand's deletions
// arrive within milliseconds of each other, not over the seconds an editor or a `git pull`
// takes, so a long --debounce for the tree does not hold a heal back.
const maxAdvisoryDebounce = 250 * time.Millisecond

// ownGrace is how long after a reconcile the advisories naming what it changed are taken for
// its own: the server sends an advisory on its own queue, a moment after it answered the
// request that caused it. An object changed by hand again within it waits for the resync.
const ownGrace = 2 * time.Second

// heardObject is the stream, or consumer of a stream, an advisory named, and whether it
// was deleted (else its config was updated).
type heardObject struct {
	stream, consumer string
	deleted          bool
}

func (o heardObject) String() string {
	what := "updated"
	if o.deleted {
		what = "deleted"
	}
	if o.consumer == "" {
		return "stream " + o.stream + " " + what
	}
	return "consumer " + o.stream + "/" + o.consumer + " " + what
}

// objectOf reads an advisory's subject: `$JS.EVENT.ADVISORY.STREAM.<action>.<stream>` or
// `$JS.EVENT.ADVISORY.CONSUMER.<action>.<stream>.<consumer>` (names hold no dot).
func objectOf(subject string) (heardObject, bool) {
	t := strings.Split(subject, ".")
	if len(t) < 6 || (t[4] != "DELETED" && t[4] != "UPDATED") {
		return heardObject{}, false
	}
	deleted := t[4] == "DELETED"
	switch {
	case len(t) == 6 && t[3] == "STREAM":
		return heardObject{stream: t[5], deleted: deleted}, true
	case len(t) == 7 && t[3] == "CONSUMER":
		return heardObject{stream: t[5], consumer: t[6], deleted: deleted}, true
	}
	return heardObject{}, false
}

// heardQueue is what the listeners heard since the loop last took it. Their goroutines only
// add and signal; the loop decides.
type heardQueue struct {
	signal chan struct{}
	mu     sync.Mutex
	items  []heardObject
}

func (q *heardQueue) add(o heardObject) {
	q.mu.Lock()
	q.items = append(q.items, o)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

func (q *heardQueue) take() []heardObject {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items = nil
	return items
}

// advisoryListener holds watch's subscriptions to the advisories on one connection.
type advisoryListener struct {
	nc       *nats.Conn
	dead     *deadLetters
	subs     []*nats.Subscription
	wg       sync.WaitGroup
	lost     atomic.Bool // a subscription ended: refused after a reload, say
	stopping atomic.Bool
}

// subscribeTimeout bounds the round trip that makes the subscriptions live.
const subscribeTimeout = 5 * time.Second

// listenAdvisories subscribes on nc and adds what it hears to q, or of dead letters to dead. It returns once the server
// has taken the subscriptions, so that nothing changed from then on goes unheard; an error
// wrapping nats.ErrPermissionViolation when the server refused one (an accounts config from
// before the grant, not yet reloaded).
func listenAdvisories(ctx context.Context, nc *nats.Conn, q *heardQueue, dead *deadLetters) (*advisoryListener, error) {
	a := &advisoryListener{nc: nc, dead: dead}
	var subs []*nats.Subscription
	fail := func(err error) (*advisoryListener, error) {
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
		return nil, err
	}
	for _, subject := range advisorySubjects {
		// Synchronous subscriptions: their reads return the server's refusal of them
		// (PermissionErrOnSubscribe), which a callback never hears.
		sub, err := nc.SubscribeSync(subject)
		if err != nil {
			return fail(err)
		}
		subs = append(subs, sub)
	}
	fctx, fcancel := context.WithTimeout(ctx, subscribeTimeout)
	defer fcancel()
	if err := nc.FlushWithContext(fctx); err != nil {
		return fail(err)
	}
	for _, sub := range subs {
		// The server's refusal came before the flush's answer, so a read says so at once.
		switch m, err := sub.NextMsg(time.Nanosecond); {
		case errors.Is(err, nats.ErrPermissionViolation):
			return fail(err)
		case err == nil:
			a.hear(m, q)
		}
	}
	a.subs = subs
	for _, sub := range subs {
		a.wg.Add(1)
		go a.read(sub, q)
	}
	return a, nil
}

// read hears one subscription until it ends. NextMsg, not NextMsgWithContext: only NextMsg
// returns, while it waits, the server's refusal of a subscription it already had (a reload
// that took the grant away); stop ends the wait by unsubscribing.
func (a *advisoryListener) read(sub *nats.Subscription, q *heardQueue) {
	defer a.wg.Done()
	for {
		m, err := sub.NextMsg(time.Hour)
		switch {
		case errors.Is(err, nats.ErrTimeout):
			continue
		case err != nil:
			if !a.stopping.Load() {
				a.lost.Store(true)
			}
			return
		}
		a.hear(m, q)
	}
}

func (a *advisoryListener) hear(m *nats.Msg, q *heardQueue) {
	if isMaxDeliveries(m.Subject) {
		a.dead.hear(m.Data)
		return
	}
	if o, ok := objectOf(m.Subject); ok {
		q.add(o)
	}
}

func (a *advisoryListener) stop() {
	a.stopping.Store(true)
	for _, sub := range a.subs {
		_ = sub.Unsubscribe()
	}
	a.wg.Wait()
}

// ownChanges is what a reconcile changed, for telling its advisories from drift: each
// stream and consumer its plan deleted or replaced (the server announces a deletion), a
// stream's consumers with it (the server drops them along), and each stream it updated. An
// object it created is not among them: a deletion of that is someone else's.
type ownChanges struct {
	objects map[heardObject]bool
	streams map[string]bool // deleted or replaced
	until   time.Time
}

func ownChangesOf(p *plan.Plan, now time.Time) ownChanges {
	o := ownChanges{objects: map[heardObject]bool{}, streams: map[string]bool{}, until: now.Add(ownGrace)}
	if p == nil {
		return o
	}
	for _, c := range p.Changes {
		gone := c.Action == plan.Delete || c.Action == plan.Replace
		switch {
		case c.Kind == plan.KindStream && gone:
			o.objects[heardObject{stream: c.Name, deleted: true}] = true
			o.streams[c.Name] = true
		case c.Kind == plan.KindStream && c.Action == plan.Update:
			o.objects[heardObject{stream: c.Name}] = true
		case c.Kind == plan.KindConsumer && gone:
			o.objects[heardObject{stream: c.Stream, consumer: c.Name, deleted: true}] = true
		}
	}
	return o
}

// mine reports whether the reconcile o describes made the change an advisory heard at now
// names.
func (o ownChanges) mine(h heardObject, now time.Time) bool {
	if now.After(o.until) {
		return false
	}
	return o.objects[h] || (h.consumer != "" && h.deleted && o.streams[h.stream])
}

// hearing is the loop's side of the advisories, owned by the loop's goroutine but for
// queue, which the listeners add to, and warned, which the reconcile goroutine owns.
type hearing struct {
	queue    *heardQueue
	debounce *time.Timer
	burst    time.Time     // first drift heard that the debounce waits out; zero when none
	held     []heardObject // heard while a reconcile ran: judged when it ends, against what it changed
	own      ownChanges
	warned   bool
	// onHeard, when set, is told how each advisory was judged (tests).
	onHeard func(o heardObject, own bool)
}

func newHearing(onHeard func(heardObject, bool)) *hearing {
	return &hearing{queue: &heardQueue{signal: make(chan struct{}, 1)}, debounce: stoppedTimer(), onHeard: onHeard}
}

// heard takes what the listeners heard: held while a reconcile runs, judged otherwise.
func (l *loop) heard(running bool) {
	for _, o := range l.hearing.queue.take() {
		if running {
			l.hearing.held = append(l.hearing.held, o)
		} else {
			l.judge(o)
		}
	}
}

// judge ignores an advisory of the last reconcile's own change, and debounces a reconcile
// for any other: a hand's `nats stream rm` of several objects makes one.
func (l *loop) judge(o heardObject) {
	h := l.hearing
	own := h.own.mine(o, time.Now())
	if h.onHeard != nil {
		h.onHeard(o, own)
	}
	if own {
		return
	}
	l.log.Debug("the bus says an object changed", "object", o.String())
	now := time.Now()
	if h.burst.IsZero() {
		h.burst = now
	}
	d := min(l.cfg.Debounce, maxAdvisoryDebounce)
	h.debounce.Reset(max(min(d, time.Until(h.burst.Add(maxDebounceFactor*d))), 0))
}

// afterCycle judges what was heard while the reconcile ran against what it changed.
func (l *loop) afterCycle(r cycleResult) {
	h := l.hearing
	h.own = ownChangesOf(r.cycle.Plan, time.Now())
	held := append(h.held, h.queue.take()...)
	h.held = nil
	for _, o := range held {
		l.judge(o)
	}
}

// listen makes sure the connection's advisories are heard, on the reconcile's goroutine:
// before a reconcile reads the bus, so that nothing changed after the read goes unheard, and
// after it (afterApply), when the accounts config it just made live is the first to grant them.
func (l *loop) listen(ctx context.Context, c *connection, afterApply bool) {
	nc := c.sess.Conn.Conn
	if c.heard != nil && c.heard.nc == nc && !c.heard.lost.Load() {
		return
	}
	if c.heard != nil {
		c.heard.stop()
		c.heard = nil
	}
	a, err := listenAdvisories(ctx, nc, l.hearing.queue, l.deadLetters)
	if err != nil {
		if afterApply && !l.hearing.warned {
			l.hearing.warned = true
			l.log.Warn("cannot hear the bus's advisories: drift is healed at the resync, not at once, until the accounts config in use grants them",
				"error", err)
		}
		return
	}
	c.heard = a
}
