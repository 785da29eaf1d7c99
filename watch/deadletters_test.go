package watch

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshbus/meshctl/state"
)

// maxDeliveries is the server's advisory of a message past its consumer's max_deliver, as
// nats-server 2.15 sends it.
func maxDeliveries(stream, consumer string, seq, deliveries uint64) []byte {
	return fmt.Appendf(nil, `{"type":%q,"id":"x","timestamp":"2026-12-01T08:00:00Z","stream":%q,"consumer":%q,"stream_seq":%d,"deliveries":%d}`,
		maxDeliveriesType, stream, consumer, seq, deliveries)
}

// deadLetterCount is meshctl_dead_letters_total for stream/consumer in reg, -1 when absent.
func deadLetterCount(t *testing.T, reg *prometheus.Registry, stream, consumer string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "meshctl_dead_letters_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["stream"] == stream && labels["consumer"] == consumer {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

// Without a bus: a message announced twice, in one batch or in two, is one dead letter — one
// line of the log, one in the metric, one in the store. An advisory that is not one is warned
// of, not counted. A watch started again starts the metric from the store's count.
func TestADeadLetterIsCountedAndLoggedOnce(t *testing.T) {
	t.Parallel()
	logs := &capturedLog{t: t}
	log := slog.New(slog.NewTextHandler(logs, nil))
	reg := prometheus.NewRegistry()
	d := newDeadLetters(log, reg)
	st, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()

	d.hear(maxDeliveries("SEAT_MAILER", "SEAT_MAILER_worker", 4, 3))
	d.hear(maxDeliveries("SEAT_MAILER", "SEAT_MAILER_worker", 4, 3))
	d.write(ctx, st)
	d.hear(maxDeliveries("SEAT_MAILER", "SEAT_MAILER_worker", 4, 3))
	d.hear(maxDeliveries("SEAT_MAILER", "SEAT_MAILER_worker", 5, 3))
	d.hear([]byte(`{"type":"io.nats.jetstream.advisory.v1.nak"}`))
	d.write(ctx, st)

	if n := len(logs.lines("a dead letter", "stream_seq=4")); n != 1 {
		t.Errorf("message 4 was logged %d times as a dead letter, want once", n)
	}
	if n := len(logs.lines("a dead letter", "stream_seq=5")); n != 1 {
		t.Errorf("message 5 was logged %d times as a dead letter, want once", n)
	}
	if n := len(logs.lines("cannot read")); n != 1 {
		t.Errorf("the advisory of another type was warned of %d times, want once", n)
	}
	if got := deadLetterCount(t, reg, "SEAT_MAILER", "SEAT_MAILER_worker"); got != 2 {
		t.Errorf("meshctl_dead_letters_total = %v, want 2", got)
	}
	counts, err := st.DeadLetters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != 1 || counts[0].Count != 2 || counts[0].LastStreamSeq != 5 {
		t.Errorf("the store counts %+v, want 2 for SEAT_MAILER_worker, the latest message 5", counts)
	}

	// Started again: the metric says what the store counted before any new letter.
	reg = prometheus.NewRegistry()
	d = newDeadLetters(log, reg)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.record(rctx, st)
	}()
	d.hear(maxDeliveries("SEAT_MAILER", "SEAT_MAILER_worker", 6, 3))
	stop()
	<-done
	if got := deadLetterCount(t, reg, "SEAT_MAILER", "SEAT_MAILER_worker"); got != 3 {
		t.Errorf("meshctl_dead_letters_total after a restart and one more = %v, want 3", got)
	}
}
