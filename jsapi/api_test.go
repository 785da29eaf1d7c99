package jsapi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/bus/bustest"
)

// testContext bounds a whole test, made once it runs (after its t.Parallel()): a bound on a
// hang, not a measurement.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// openAPI is the API over a connection to a bus of the test's own, open and with JetStream.
func openAPI(t *testing.T) API {
	t.Helper()
	b := bustest.StartTestBus(t, nil)
	nc, err := nats.Connect(b.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	api, err := New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return api
}

// A consumer list longer than a page is handed over page by page, each consumer once, with
// the metadata it was created with: the pages after the first are asked for together, and the
// consumers of a page share the metadata they repeat.
func TestAConsumerListIsHandedOverWholeInPages(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	api := openAPI(t)
	if err := api.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	// Three pages of 256; runs of equal metadata, some crossing a page's end.
	const n = 2*256 + 10
	want := map[string]map[string]string{}
	for i := range n {
		name := fmt.Sprintf("c%04d", i)
		want[name] = map[string]string{"run": fmt.Sprint(i / 100)}
		cfg := jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy, Metadata: want[name]}
		if _, err := api.CreateConsumer(ctx, "S", cfg); err != nil {
			t.Fatal(err)
		}
	}
	pages := 0
	got := map[string]map[string]string{}
	err := EachConsumerPage(ctx, api, "S", func(total int, infos []*jetstream.ConsumerInfo) {
		pages++
		if total != n {
			t.Errorf("page %d says the list holds %d consumers; it holds %d", pages, total, n)
		}
		for _, c := range infos {
			if _, twice := got[c.Name]; twice {
				t.Errorf("consumer %s was handed over twice", c.Name)
			}
			got[c.Name] = c.Config.Metadata
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if pages != 3 {
		t.Errorf("the list came in %d pages; want 3 of at most 256", pages)
	}
	// The server adds metadata of its own (its version): the run is the test's.
	if !maps.EqualFunc(got, want, func(a, b map[string]string) bool { return a["run"] == b["run"] }) {
		t.Errorf("the pages handed over %d consumers, not the %d created with their metadata", len(got), n)
	}
	names, err := api.ConsumerNames(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(slices.Sorted(slices.Values(names)), slices.Sorted(maps.Keys(want))) {
		t.Errorf("ConsumerNames named %d consumers, not the %d created", len(names), n)
	}
}

// What Stored.Size says of each message sums to the bytes the stream itself counts, on file
// and in memory, for messages with and without headers: a count of what lowered limits
// discard rests on it.
func TestStoredSizesSumToTheStreamsBytes(t *testing.T) {
	t.Parallel()
	for _, storage := range []jetstream.StorageType{jetstream.FileStorage, jetstream.MemoryStorage} {
		t.Run(storage.String(), func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			api := openAPI(t)
			if err := api.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Storage: storage}); err != nil {
				t.Fatal(err)
			}
			for i := range 20 {
				msg := nats.NewMsg(fmt.Sprintf("s.%d", i))
				msg.Data = []byte(fmt.Sprintf("message %d", i*i))
				if i%3 == 0 {
					msg.Header.Set("Trace", fmt.Sprint(i))
				}
				if _, err := api.Publish(ctx, msg); err != nil {
					t.Fatal(err)
				}
			}
			var sum, count uint64
			for seq := uint64(0); ; {
				m, err := api.NextStored(ctx, "S", seq)
				if errors.Is(err, ErrNoMessage) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				sum += m.Size(storage)
				count++
				seq = m.Seq + 1
			}
			info, err := api.StreamInfo(ctx, "S")
			if err != nil {
				t.Fatal(err)
			}
			if count != info.State.Msgs || sum != info.State.Bytes {
				t.Errorf("read %d messages of %d bytes; the stream holds %d of %d bytes", count, sum, info.State.Msgs, info.State.Bytes)
			}
		})
	}
}

// Once owned says this process no longer owns the bus, a guarded API sends no mutating call,
// and still reads.
func TestAGuardedAPIChangesNothingOnceNotOwned(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	bare := openAPI(t)
	lost := errors.New("the apply lock was lost")
	var owner error
	api := Guarded(bare, func() error { return owner })
	if err := api.CreateStream(ctx, jetstream.StreamConfig{Name: "KEPT", Subjects: []string{"kept.>"}}); err != nil {
		t.Fatalf("creating a stream while owned: %v", err)
	}
	owner = lost
	if err := api.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); !errors.Is(err, lost) {
		t.Errorf("creating a stream once not owned: %v; want it refused", err)
	}
	if err := api.DeleteStream(ctx, "KEPT"); !errors.Is(err, lost) {
		t.Errorf("deleting a stream once not owned: %v; want it refused", err)
	}
	if _, err := api.Publish(ctx, nats.NewMsg("kept.1")); !errors.Is(err, lost) {
		t.Errorf("publishing once not owned: %v; want it refused", err)
	}
	streams, err := api.ListStreams(ctx)
	if err != nil {
		t.Fatalf("listing once not owned: %v; a read asks nothing", err)
	}
	if len(streams) != 1 || streams[0].Config.Name != "KEPT" || streams[0].State.Msgs != 0 {
		t.Errorf("the bus holds %d stream(s); want KEPT alone, empty, as before the lock was lost", len(streams))
	}
}

// On a cluster a call is asked again while an answer says a leader is being elected, and only
// then: any other error is the call's answer at once.
func TestOnlyALeaderChangeIsAskedAgain(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	for _, c := range []struct {
		code     jetstream.ErrorCode
		failures int
		calls    int
		fails    bool
	}{
		{code: 10008, failures: 2, calls: 3},              // temporarily unavailable
		{code: 10009, failures: 1, calls: 2},              // can not handle request
		{code: 10059, failures: 2, calls: 1, fails: true}, // stream not found
	} {
		calls := 0
		_, err := RetryCall(ctx, func(context.Context) (int, error) {
			if calls++; calls <= c.failures {
				return 0, &jetstream.APIError{ErrorCode: c.code}
			}
			return calls, nil
		})
		if calls != c.calls {
			t.Errorf("error %d: called %d times; want %d", c.code, calls, c.calls)
		}
		if (err != nil) != c.fails {
			t.Errorf("error %d: the call returned %v", c.code, err)
		}
	}
}
