package watch

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshbus/meshctl/state"
)

// Dead letters.
//
// A message its consumer delivered max_deliver times, none of them acknowledged, is never
// delivered again: on a work queue it stays in the stream, owed to nobody. The server says so
// once, in an advisory on `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<consumer>`,
// which watch hears on its connection beside the drift advisories (advisory.go). Each is
// counted per consumer in the store, where `meshctl status` reads it, logged once, and exported
// as meshctl_dead_letters_total; a message announced twice is counted once (the store tells).

// maxDeliveriesAdvisory is the part of the server's advisory watch reads
// (JSConsumerDeliveryExceededAdvisory in nats-server's jetstream_events.go).
type maxDeliveriesAdvisory struct {
	Type       string `json:"type"`
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// maxDeliveriesType is the advisory's schema type.
const maxDeliveriesType = "io.nats.jetstream.advisory.v1.max_deliver"

// isMaxDeliveries reports whether subject is a max-deliveries advisory's.
func isMaxDeliveries(subject string) bool {
	return strings.HasPrefix(subject, "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.")
}

// deadLetters counts the dead letters the bus announces. The listener's goroutine only adds
// what it heard and signals; the recorder's goroutine writes them to the store, and logs and
// counts those the store had not counted yet, so that a store write never holds up the
// subscription.
type deadLetters struct {
	log     *slog.Logger
	total   *prometheus.CounterVec
	pending chan struct{}

	mu    sync.Mutex
	heard []state.DeadLetter
}

func newDeadLetters(log *slog.Logger, reg prometheus.Registerer) *deadLetters {
	d := &deadLetters{
		log: log,
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshctl_dead_letters_total",
			Help: "Messages a consumer delivered max_deliver times without an acknowledgement, after which the server delivers them no more, by stream and consumer; it starts from the count in the state store, as meshctl status shows it.",
		}, []string{"stream", "consumer"}),
		pending: make(chan struct{}, 1),
	}
	reg.MustRegister(d.total)
	return d
}

// hear takes one advisory's payload.
func (d *deadLetters) hear(data []byte) {
	const unread = "a max-deliveries advisory watch cannot read was not counted as a dead letter"
	var a maxDeliveriesAdvisory
	switch err := json.Unmarshal(data, &a); {
	case err != nil:
		d.log.Warn(unread, "error", err)
		return
	case a.Type != maxDeliveriesType || a.Stream == "" || a.Consumer == "":
		d.log.Warn(unread, "type", a.Type, "stream", a.Stream, "consumer", a.Consumer)
		return
	}
	d.mu.Lock()
	d.heard = append(d.heard, state.DeadLetter{Stream: a.Stream, Consumer: a.Consumer, StreamSeq: a.StreamSeq, Deliveries: a.Deliveries, At: time.Now()})
	d.mu.Unlock()
	select {
	case d.pending <- struct{}{}:
	default:
	}
}

// record counts in the store what was heard, at most once a recordPace, until ctx ends; then
// it writes what is left. It starts the metric from the counts the store holds.
func (d *deadLetters) record(ctx context.Context, st *state.Store) {
	// Read even when ctx has ended already: what is written at the end counts from it.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	counts, err := st.DeadLetters(rctx)
	cancel()
	if err != nil {
		d.log.Warn("the dead letters counted so far could not be read; the metric counts from zero", "error", err)
	} else {
		for _, c := range counts {
			d.total.WithLabelValues(c.Stream, c.Consumer).Add(float64(c.Count))
		}
	}
	paced(ctx, d.pending, func(ctx context.Context) { d.write(ctx, st) })
}

// write counts what was heard since the last write, and logs and counts in the metric each
// letter the store counted. When the store cannot be written, every letter heard is logged and
// counted all the same: a dead letter is never lost in silence, if perhaps said twice.
func (d *deadLetters) write(ctx context.Context, st *state.Store) {
	d.mu.Lock()
	heard := d.heard
	d.heard = nil
	d.mu.Unlock()
	if len(heard) == 0 {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	counted, err := st.RecordDeadLetters(wctx, heard)
	cancel()
	if err != nil {
		d.log.Warn("dead letters could not be counted for meshctl status", "error", err)
		counted = heard
	}
	for _, l := range counted {
		d.log.Warn("a dead letter: the consumer delivered the message as often as its max_deliver allows and it was never acknowledged; the server will not deliver it again",
			"stream", l.Stream, "consumer", l.Consumer, "stream_seq", l.StreamSeq, "deliveries", l.Deliveries)
		d.total.WithLabelValues(l.Stream, l.Consumer).Inc()
	}
}
