package model_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meshbus/meshctl/model"
)

func TestSizesReadAsTheyAreWritten(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{
		"4096B": 4096, "64MiB": 64 << 20, "1GiB": 1 << 30, "1 GiB": 1 << 30, "10GB": 10e9, "2TiB": 2 << 40, "1PiB": 1 << 50,
	} {
		got, err := model.ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
		// What a plan prints reads back as the same size.
		if back, err := model.ParseSize(model.FormatSize(got)); err != nil || back != got {
			t.Errorf("FormatSize(%d) = %q, which reads back as %d, %v", got, model.FormatSize(got), back, err)
		}
	}
	for _, in := range []string{"", "1", "1G", "1gib", "1.5GiB", "-1GiB", "1GiB ", "99999999999999999999B", "9000000PB"} {
		if got, err := model.ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
	for n, want := range map[int64]string{64 << 20: "64MiB", 10e9: "10GB", 1536 << 10: "1536KiB", 1000: "1KB", 1001: "1001B", model.Unlimited: "unlimited"} {
		if got := model.FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
	for n, want := range map[uint64]string{0: "0 B", 1000: "1000 B", 1 << 30: "1 GiB", 1408 << 20: "1.4 GiB", 12 << 30: "12 GiB"} {
		if got := model.HumanSize(n); got != want {
			t.Errorf("HumanSize(%d) = %q, want %q", n, got, want)
		}
	}
}

// Without a word about them, every stream is bounded in bytes: the defaults the README and
// the schema state, and the consumers' the server's own.
func TestTheDefaultsBoundEveryStream(t *testing.T) {
	t.Parallel()
	m, err := model.Parse([]model.File{{Name: "mesh.yaml", Data: []byte("nodes: [{name: one}]\nseats: [{name: mailer, accepts: [send]}]\nmodules: [{name: postman, on: [one], claims: [mailer]}]\n")}})
	if err != nil {
		t.Fatal(err)
	}
	s := m.Bus.Streams
	for what, got := range map[string]model.StreamSettings{"control": s.Control, "events": s.Events, "nodes": s.Nodes, "seats": s.Seats, "seat mailer": m.Seats[0].Stream} {
		if got.MaxBytes <= 0 || got.Storage != model.StorageFile || got.Replicas != 1 {
			t.Errorf("%s: %+v, want a byte limit, file storage, one replica", what, got)
		}
	}
	if s.Events.MaxBytes != model.GiB || s.Events.MaxAge != 7*24*time.Hour || s.Control.MaxBytes != 64*model.MiB ||
		s.Nodes.MaxBytes != 256*model.MiB || s.Seats.MaxBytes != 64*model.MiB || s.Seats.Discard != model.DiscardNew {
		t.Errorf("the defaults moved from what the README states: %+v", s)
	}
	if c := m.Modules[0].Consumer; c.AckWait != 30*time.Second || c.MaxDeliver != model.Unlimited || c.MaxAckPending != 0 || c.Backoff != nil {
		t.Errorf("the consumer's defaults are not the server's: %+v", c)
	}
}

// A seat's and a module's own settings win over the mesh's, key by key; what they leave out
// is the mesh's.
func TestOverridesAreKeyByKey(t *testing.T) {
	t.Parallel()
	m, err := model.Load("testdata/valid-jetstream-settings")
	if err != nil {
		t.Fatal(err)
	}
	mailer, _ := m.Seat("mailer")
	if mailer.Stream.MaxBytes != 2*model.GiB || mailer.Stream.Discard != model.DiscardNew || mailer.Stream.MaxAge != 0 {
		t.Errorf("mailer's queue: %+v", mailer.Stream)
	}
	if c := mailer.Consumer; c.AckWait != 10*time.Second || c.MaxDeliver != 5 || c.MaxAckPending != 500 || len(c.Backoff) != 3 {
		t.Errorf("mailer's worker: the backoff's first step is its ack wait, the rest the mesh's: %+v", c)
	}
	printer, _ := m.Seat("printer")
	if printer.Stream != m.Bus.Streams.Seats {
		t.Errorf("printer says nothing, yet its queue is %+v, not the mesh's %+v", printer.Stream, m.Bus.Streams.Seats)
	}
	if c := m.Modules[0].Consumer; c.AckWait != time.Minute || c.MaxDeliver != model.Unlimited || c.MaxAckPending != model.Unlimited {
		t.Errorf("postman's consumer: %+v", c)
	}
}

// Units, ranges and the rules between two settings are the loader's to check; the schema states
// the units and ranges too, so an editor flags them while typing.
func TestSettingsUnitsAndRanges(t *testing.T) {
	t.Parallel()
	s := compileSchema(t, model.Schema())
	const head = "nodes: [{name: one}]\nbus:\n  jetstream:\n"
	for _, c := range []struct {
		yaml   string
		loader string // "" when the loader accepts it
		schema bool   // whether the schema refuses it too
	}{
		{"    streams: {events: {max_bytes: 1GiB, max_age: 72h}}", "", false},
		{"    streams: {events: {max_bytes: 1073741824}}", "", false},
		{"    streams: {events: {max_bytes: unlimited, max_msgs: unlimited}}", "", false},
		{"    consumers: {ack_wait: 1m30s, max_ack_pending: 100, max_deliver: 4}", "", false},
		{"    consumers: {ack_wait: 10s, backoff: [10s, 1m], max_deliver: unlimited}", "", false},
		{"    streams: {events: {max_bytes: 1G}}", "must be a size with a unit", true},
		{"    streams: {events: {max_bytes: 512}}", "must be between 1KiB and 1PiB", true},
		{"    streams: {events: {max_bytes: 2PiB}}", "must be between 1KiB and 1PiB", false},
		{"    streams: {events: {max_age: 7d}}", "must be a Go duration", true},
		{"    streams: {events: {max_msgs: 0}}", "must be at least 1", true},
		{"    streams: {events: {replicas: 0}}", "must be at least 1", true},
		{"    streams: {events: {storage: disk}}", "must be file or memory", true},
		{"    streams: {events: {discard: never}}", "must be old or new", true},
		{"    consumers: {ack_wait: unlimited}", "must be a Go duration", true},
		{"    consumers: {max_deliver: -1}", "must be at least 1, or unlimited", true},
		{"    consumers: {backoff: 10s}", "must be a list of Go durations", true},
		{"    streams: {events: {max_bytes: 1MiB, max_msg_size: 2MiB}}", "larger than max_bytes", false},
		{"    consumers: {ack_wait: 5s, backoff: [10s]}", "its first step is the ack wait", false},
		{"    consumers: {max_deliver: 1, backoff: [10s, 1m]}", "fewer than backoff's 2 steps", false},
	} {
		data := []byte(head + c.yaml + "\n")
		_, err := model.Parse([]model.File{{Name: "mesh.yaml", Data: data}})
		switch {
		case c.loader == "" && err != nil:
			t.Errorf("%s: the loader refuses it: %v", c.yaml, err)
		case c.loader != "" && (!errors.Is(err, model.ErrInvalid) || !strings.Contains(err.Error(), c.loader)):
			t.Errorf("%s: the loader says %v, want a problem saying %q", c.yaml, err, c.loader)
		case c.loader != "" && !strings.HasPrefix(err.Error(), "mesh.yaml:4:"):
			t.Errorf("%s: the problem is not placed on its line: %v", c.yaml, err)
		}
		if serr := validateYAML(s, data); (serr != nil) != c.schema {
			t.Errorf("%s: the schema's verdict is %v, want refused=%v", c.yaml, serr, c.schema)
		}
	}
}
