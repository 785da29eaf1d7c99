package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/internal/printable"
	"github.com/meshbus/meshctl/state"
)

// take settles one delivery from CONTROL, and logs it once: a message let go says why, each
// value it carried quoted (printable.Quote), so that what a node sent cannot forge a log line or
// fill the log.
func (l *loop) take(ctx context.Context, m jetstream.Msg) {
	kind, node := Classify(m.Subject())
	subject := m.Subject() // a subject Classify accepted is one render spells: safe to show
	var s Settle
	switch kind {
	case KindReport:
		s = l.report(ctx, node, m)
	case KindEnrol:
		s = l.enrol(ctx, node, m)
	default:
		subject = printable.Quote(subject)
		s = Settle{Verb: Term, Reason: "not a subject the mesh derives for CONTROL"}
	}
	l.settle(ctx, m, s)
	l.mu.Lock()
	l.lastTaken = time.Now()
	l.mu.Unlock()
	ev := Event{Kind: kind, Node: node, Subject: m.Subject(), Settle: s}
	attrs := []any{"subject", subject, "settled", string(s.Verb), "why", s.Reason}
	switch s.Verb {
	case Term:
		l.log.Warn("controller: let a message go", attrs...)
	case Nak:
		l.log.Warn("controller: holding a message the store did not take", append(attrs, "again_in", s.Delay)...)
	default:
		l.log.Info("controller: took a message", attrs...)
	}
	if l.cfg.Observe != nil {
		l.cfg.Observe(ev)
	}
}

// settle tells the server what became of a delivery. An ack waits for the server's word, so
// that "recorded" means "left the work queue"; a failed one is delivered again and recorded
// again, which a report's last-per-node row takes without harm.
func (l *loop) settle(ctx context.Context, m jetstream.Msg, s Settle) {
	var err error
	switch s.Verb {
	case Ack:
		actx, cancel := context.WithTimeout(ctx, l.cfg.StoreTimeout)
		err = m.DoubleAck(actx)
		cancel()
	case Nak:
		err = m.NakWithDelay(s.Delay)
	case Term:
		err = m.Term()
	}
	if err != nil {
		l.log.Error("controller: settling a message failed; the server delivers it again after the ack wait",
			"subject", m.Subject(), "settle", string(s.Verb), "error", err)
	}
}

// published is when the bus took m, or now for a message without JetStream metadata.
func published(m jetstream.Msg) time.Time {
	if meta, err := m.Metadata(); err == nil {
		return meta.Timestamp
	}
	return time.Now()
}

// generation is the generation last declared to node, read from the store once.
func (l *loop) generation(ctx context.Context, node string) (uint64, error) {
	if l.declared == nil {
		sctx, cancel := l.storeCtx(ctx)
		defer cancel()
		g, err := l.cfg.Store.Generations(sctx)
		if err != nil {
			return 0, err
		}
		l.declared = g
	}
	return l.declared[node], nil
}

// report records node's report when it is about the declaration last made to the node.
func (l *loop) report(ctx context.Context, node string, m jetstream.Msg) Settle {
	declared, err := l.generation(ctx, node)
	if err != nil {
		return l.window.After(err, published(m), time.Now())
	}
	r, err := JudgeReport(node, m.Data(), declared)
	switch {
	case errors.Is(err, ErrSuperseded):
		// Settled, not acted on: what it says is about what the node no longer runs.
		return Settle{Verb: Ack, Reason: err.Error()}
	case err != nil:
		return Settle{Verb: Term, Reason: err.Error()}
	}
	sctx, cancel := l.storeCtx(ctx)
	defer cancel()
	stored := l.kept(ctx, l.cfg.Store.RecordReport(sctx, state.Report{Node: node, Generation: r.Generation, Applied: r.Applied,
		Failed: r.Failed, ReportedAt: published(m)}))
	s := l.window.After(stored, published(m), time.Now())
	if s.Verb == Ack {
		s.Reason = fmt.Sprintf("recorded node %s's report of generation %d (%d applied, %d failed)", node, r.Generation, len(r.Applied), len(r.Failed))
	}
	return s
}

// heard keeps a node's heartbeat, as the last heard from it.
func (l *loop) heard(m *nats.Msg) {
	kind, node := Classify(m.Subject)
	if kind != KindHeartbeat {
		return
	}
	hb, err := JudgeHeartbeat(m.Data)
	if err != nil {
		l.log.Warn("controller: let a heartbeat go", "subject", m.Subject, "why", err.Error())
		if l.cfg.Observe != nil {
			l.cfg.Observe(Event{Kind: KindHeartbeat, Node: node, Subject: m.Subject, Settle: Settle{Verb: Term, Reason: err.Error()}})
		}
		return
	}
	l.mu.Lock()
	l.beats[node] = Seen{At: time.Now(), Generation: hb.Generation}
	l.mu.Unlock()
	if l.cfg.Observe != nil {
		l.cfg.Observe(Event{Kind: KindHeartbeat, Node: node, Subject: m.Subject, Settle: Settle{Reason: "heard"}})
	}
}
