package render

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/model"
)

// Every stream carries its settings: the mesh's own streams theirs, each seat's queue the
// seat's over the mesh's default; every host's consumer its module's or seat's, while the
// control plane's consumers keep meshctl's own.
func TestStreamsAndConsumersCarryTheirSettings(t *testing.T) {
	t.Parallel()
	d := Derive(mustLoad(t, "../model/testdata/valid-jetstream-settings"))
	streams := map[string]jetstream.StreamConfig{}
	for _, s := range d.Streams {
		streams[s.Name] = s
	}
	for name, want := range map[string]jetstream.StreamConfig{
		StreamControl:             {MaxBytes: 16 * model.MiB, MaxMsgSize: 64 << 10, Storage: jetstream.FileStorage, Discard: jetstream.DiscardOld, Replicas: 1},
		StreamEvents:              {MaxBytes: 10e9, MaxAge: 72 * time.Hour, MaxMsgs: 1000000, Storage: jetstream.FileStorage, Discard: jetstream.DiscardNew, Replicas: 1},
		StreamNodes:               {Storage: jetstream.MemoryStorage, Discard: jetstream.DiscardOld, Replicas: 1},
		SeatStreamName("mailer"):  {MaxBytes: 2 * model.GiB, Storage: jetstream.FileStorage, Discard: jetstream.DiscardNew, Replicas: 1},
		SeatStreamName("printer"): {MaxBytes: model.MiB, Storage: jetstream.FileStorage, Discard: jetstream.DiscardOld, Replicas: 1},
	} {
		got := streams[name]
		if got.MaxBytes != want.MaxBytes || got.MaxAge != want.MaxAge || got.MaxMsgs != want.MaxMsgs || got.MaxMsgSize != want.MaxMsgSize ||
			got.Storage != want.Storage || got.Discard != want.Discard || got.Replicas != want.Replicas {
			t.Errorf("%s: max_bytes %d max_age %s max_msgs %d max_msg_size %d storage %s discard %s replicas %d; want %+v",
				name, got.MaxBytes, got.MaxAge, got.MaxMsgs, got.MaxMsgSize, got.Storage, got.Discard, got.Replicas, want)
		}
	}
	// CONTROL and NODES keep their own per-subject bounds beside the settings.
	if streams[StreamControl].MaxMsgsPerSubject != ControlPerSubject || streams[StreamNodes].MaxMsgsPerSubject != 1 {
		t.Errorf("the per-subject bounds are lost: CONTROL %d, NODES %d", streams[StreamControl].MaxMsgsPerSubject, streams[StreamNodes].MaxMsgsPerSubject)
	}

	consumers := map[string]jetstream.ConsumerConfig{}
	for _, c := range d.Consumers {
		consumers[c.Stream+"/"+c.Name()] = c.Config
	}
	type redelivery struct {
		ackWait                   time.Duration
		maxDeliver, maxAckPending int
		backoff                   []time.Duration
	}
	for id, want := range map[string]redelivery{
		"SEAT_MAILER/SEAT_MAILER_worker":   {10 * time.Second, 5, 500, []time.Duration{10 * time.Second, time.Minute, 10 * time.Minute}},
		"SEAT_PRINTER/SEAT_PRINTER_worker": {time.Minute, 10, 500, nil},
		"EVENTS/one_audit":                 {time.Minute, 10, 500, nil},
		// The control plane's own: whatever the mesh says.
		"CONTROL/controller": {30 * time.Second, -1, 0, nil},
		"NODES/one":          {30 * time.Second, -1, 0, nil},
	} {
		got, ok := consumers[id]
		if !ok {
			t.Errorf("no consumer %s", id)
			continue
		}
		if got.AckWait != want.ackWait || got.MaxDeliver != want.maxDeliver || got.MaxAckPending != want.maxAckPending || !slices.Equal(got.BackOff, want.backoff) {
			t.Errorf("%s: ack_wait %s max_deliver %d max_ack_pending %d backoff %v; want %+v", id, got.AckWait, got.MaxDeliver, got.MaxAckPending, got.BackOff, want)
		}
	}
}

// The footprint sums every stream's byte limit, on disk and in memory apart, and a stream
// without one makes it unbounded, by name.
func TestFootprint(t *testing.T) {
	t.Parallel()
	quick := mustLoad(t, "../examples/quickstart")
	f := FootprintOf(DeriveStreams(quick))
	want := uint64(model.DefaultControlMaxBytes + model.DefaultEventsMaxBytes + model.DefaultNodesMaxBytes + int64(len(quick.Seats))*model.DefaultSeatMaxBytes)
	if f.File != want || f.Memory != 0 || !f.Bounded() {
		t.Errorf("the quickstart's footprint: %+v, want %d bytes on disk", f, want)
	}
	if got := f.String(); !strings.HasPrefix(got, "this mesh may hold up to ") || !strings.HasSuffix(got, " on disk on each server") {
		t.Errorf("the sentence: %q", got)
	}
	if !reflect.DeepEqual(DeriveStreams(quick), Derive(quick).Streams) {
		t.Error("DeriveStreams derives other streams than Derive")
	}

	f = FootprintOf(DeriveStreams(mustLoad(t, "../model/testdata/valid-jetstream-settings")))
	if f.File != uint64(16*model.MiB+10e9+2*model.GiB+model.MiB) || f.Memory != 0 || !slices.Equal(f.Unlimited, []string{StreamNodes}) {
		t.Errorf("footprint %+v", f)
	}
	if got := f.String(); !strings.Contains(got, "unbounded") || !strings.Contains(got, "NODES has no byte limit") {
		t.Errorf("an unbounded footprint says %q", got)
	}
}
