package replica_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/bus/bustest"
	"github.com/meshbus/meshctl/internal/testnats"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/replica"
	"github.com/meshbus/meshctl/state"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testnats.RemoveBuiltServer()
	os.Exit(code)
}

// testContext bounds a whole test, made once it runs (after its t.Parallel()): a bound on a
// hang, not a measurement. A cluster test takes half a minute on a quiet machine, and several
// times that on two cores running the whole suite under the race detector.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// connect is a JetStream client of an open test bus at urls, closed when t ends.
func connect(t *testing.T, urls string, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(urls, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// attempt is op as a condition for testwait.Until, each try bounded to ten seconds by a context
// of its own under ctx: for a cluster whose stream is between leaders. Not shorter: on a machine
// running the whole suite a read's consumer, created through a meta leader just elected, can
// take seconds, and a try cut off before it answers only leaves one more consumer for the
// server to create.
func attempt(ctx context.Context, op func(ctx context.Context) error) func() error {
	return func() error {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return op(actx)
	}
}

func records(n int, version string) []state.Record {
	out := make([]state.Record, n)
	for i := range out {
		out[i] = state.Record{Key: fmt.Sprintf("credential.p%05d", i), Value: []byte(`{"v":"` + version + `"}`)}
	}
	return out
}

func mustReadAll(ctx context.Context, t *testing.T, kv *replica.KV) []state.Record {
	t.Helper()
	got, err := kv.ReadAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// Writes, overwrites and deletions come back from ReadAll as the latest value of each key that
// is left, in key order, at thousands of records; a second Open binds the same bucket.
func TestWriteAndReadBack(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	url := bustest.StartTestBus(t, nil).URL()
	js := connect(t, url)
	if _, err := replica.Bind(ctx, js); !errors.Is(err, replica.ErrNoReplica) {
		t.Fatalf("binding a bus without the bucket: %v, want ErrNoReplica", err)
	}
	kv, err := replica.Open(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := mustReadAll(ctx, t, kv); len(got) != 0 {
		t.Fatalf("a new bucket reads %d records", len(got))
	}

	const n = 3000
	want := records(n, "1")
	start := time.Now()
	if err := kv.Write(ctx, want); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d records written in %s", n, time.Since(start))
	start = time.Now()
	got := mustReadAll(ctx, t, kv)
	t.Logf("%d records read in %s", len(got), time.Since(start))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("read back (-written +read):\n%s", diff)
	}

	// Overwrite some, delete others (one of them twice, one never written), add one whose
	// value is empty: one change, as state hands it over.
	change := []state.Record{
		{Key: "credential.p00001", Value: []byte(`{"v":"2"}`)},
		{Key: "credential.p00002"},
		{Key: "credential.p00002"},
		{Key: "credential.p02999"},
		{Key: "revocation.p00003"},
		{Key: "singleton", Value: []byte{}},
	}
	if err := kv.Write(ctx, change); err != nil {
		t.Fatal(err)
	}
	want[1].Value = []byte(`{"v":"2"}`)
	want = slices.DeleteFunc(want, func(r state.Record) bool {
		return r.Key == "credential.p00002" || r.Key == "credential.p02999"
	})
	want = append(want, state.Record{Key: "singleton", Value: []byte{}})

	for key, want := range map[string][]byte{"credential.p00001": []byte(`{"v":"2"}`), "credential.p00002": nil, "missing": nil, "singleton": {}} {
		got, err := kv.Get(ctx, key)
		if err != nil || !slices.Equal(got, want) || (got == nil) != (want == nil) {
			t.Errorf("Get(%s) = %q, %v; want %q", key, got, err, want)
		}
	}

	// Another controller opening the bus binds the same bucket and reads the same.
	again, err := replica.Open(ctx, connect(t, url), 1)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, mustReadAll(ctx, t, again)); diff != "" {
		t.Fatalf("read back through a second Open (-written +read):\n%s", diff)
	}

	// The bucket keeps one message per key, deletions included: history 1 and a purge leave
	// nothing older behind.
	s, err := js.Stream(ctx, render.StateStream)
	if err != nil {
		t.Fatal(err)
	}
	info := s.CachedInfo()
	if info.State.Msgs != n+2 || info.Config.MaxMsgsPerSubject != 1 || info.Config.MaxAge != 0 ||
		info.Config.MaxMsgSize != replica.MaxValueSize || info.Config.Storage != jetstream.FileStorage {
		t.Fatalf("the bucket holds %d messages (want %d), config %+v", info.State.Msgs, n+2, info.Config)
	}
	// ReadAll's consumers are gone once it returns.
	if info.State.Consumers != 0 {
		t.Fatalf("%d consumers left on the bucket", info.State.Consumers)
	}

	// A bucket deleted under the replica is said, not read as an empty store.
	if err := js.DeleteKeyValue(ctx, render.StateBucket); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.ReadAll(ctx); !errors.Is(err, replica.ErrNoReplica) {
		t.Fatalf("reading a deleted bucket: %v, want ErrNoReplica", err)
	}
}

// clusterJS lets one user with every permission into the MESH account of every server of c,
// and is JetStream as that user on the cluster: the tests of durability are not about who may
// reach the buckets (the host matrix is).
func clusterJS(ctx context.Context, t *testing.T, c *bustest.TestCluster) jetstream.JetStream {
	t.Helper()
	for _, srv := range c.Servers {
		conf := "accounts { MESH { jetstream: enabled, users: [{user: ctl, password: pw}] } }\n"
		if err := os.WriteFile(srv.AccountsFile, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	reloaded := time.Now()
	for _, srv := range c.Servers {
		if err := bus.PIDFileReloader(srv.PIDFile).Reload(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, srv := range c.Servers {
		testwait.Until(t, "server "+srv.Name+" reloading", func() error {
			at, err := srv.ConfigLoadTime()
			if err == nil && at.Before(reloaded.Truncate(time.Second)) {
				err = fmt.Errorf("its configuration was last loaded at %s", at)
			}
			return err
		})
	}
	var urls []string
	for _, srv := range c.Servers {
		urls = append(urls, srv.URL)
	}
	login := nats.UserInfo("ctl", "pw")
	var js jetstream.JetStream
	// The servers take the new users one after another; asked until one lets the user in. A
	// server that has taken them may not yet have enabled JetStream for the account
	// ("JetStream not enabled for account"): asked until the account answers too.
	// Each ask is bounded on its own: a request no server answers yet (the meta group still
	// electing) would otherwise wait out the test's whole context.
	testwait.Until(t, "the cluster letting the user into its JetStream", attempt(ctx, func(ctx context.Context) error {
		nc, err := nats.Connect(strings.Join(urls, ","), login, nats.MaxReconnects(-1))
		if err != nil {
			return err
		}
		if js, err = jetstream.New(nc); err != nil {
			t.Fatal(err)
		}
		if _, err = js.AccountInfo(ctx); err != nil {
			nc.Close()
			return err
		}
		t.Cleanup(nc.Close)
		return nil
	}))
	return js
}

// On a three-server cluster the bucket has three replicas, and every record Write reported
// written is read back after the stream's leader is stopped; writing goes on under the new
// leader. An existing R1 bucket is raised to the mesh's replicas by Open.
func TestAcknowledgedRecordsSurviveTheLeader(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	c := bustest.StartTestCluster(t, 3)
	js := clusterJS(ctx, t, c)
	if _, err := replica.Open(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	kv, err := replica.Open(ctx, js, 3)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, render.StateStream)
	if err != nil {
		t.Fatal(err)
	}
	if r := s.CachedInfo().Config.Replicas; r != 3 {
		t.Fatalf("the bucket has %d replicas after Open with 3", r)
	}
	want := records(500, "1")
	// Right after R1→R3 the new replicas may still be catching up (docs/nats-behaviour.md,
	// "Clusters"); a write is tried again until the stream takes it.
	testwait.Until(t, "the bucket taking the write", attempt(ctx, func(ctx context.Context) error { return kv.Write(ctx, want) }))

	// Every replica current before the leader goes: a replica the R1→R3 change is still
	// catching up (a busy machine takes seconds) leaves the other two without a peer able to
	// serve, however many of them hold every acknowledged record.
	var info *jetstream.StreamInfo
	testwait.Until(t, "every replica of the bucket current", attempt(ctx, func(ctx context.Context) (err error) {
		if info, err = s.Info(ctx); err != nil {
			return err
		}
		if info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 2 {
			return fmt.Errorf("the bucket's stream has no leader and two replicas yet: %+v", info.Cluster)
		}
		for _, p := range info.Cluster.Replicas {
			if !p.Current || p.Lag > 0 {
				return fmt.Errorf("replica %s is not current yet (lag %d)", p.Name, p.Lag)
			}
		}
		return nil
	}))
	leader := info.Cluster.Leader
	for _, srv := range c.Servers {
		if srv.Name == leader {
			srv.Stop()
		}
	}
	t.Logf("stopped %s, the bucket's leader", leader)
	// Until the remaining two elect a leader, the stream does not answer.
	var got []state.Record
	testwait.Until(t, "reading the bucket under its new leader", attempt(ctx, func(ctx context.Context) (err error) {
		got, err = kv.ReadAll(ctx)
		return err
	}))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("after the leader stopped (-written +read):\n%s", diff)
	}
	more := []state.Record{{Key: "credential.p00000"}, {Key: "credential.zzz", Value: []byte("{}")}}
	testwait.Until(t, "the bucket taking a write under its new leader", attempt(ctx, func(ctx context.Context) error { return kv.Write(ctx, more) }))
	want = append(want[1:], more[1])
	if diff := cmp.Diff(want, mustReadAll(ctx, t, kv)); diff != "" {
		t.Fatalf("after a write under the new leader (-written +read):\n%s", diff)
	}
}

// A JetStream API that answers nobody for a moment — a server that has let the reader in at a
// reload but does not serve the account's JetStream yet, a consumer placed on a server whose
// interest has not reached this one — is asked again within the read's bound, at each of
// ReadAll's calls and not only its first. Here the reader reaches JetStream through mappings
// the test adds as the read goes: stream info only, until the read has asked for its consumer
// twice; then consumer creates, until it has pulled from it twice; then the rest.
func TestReadAllAsksAgainWhileTheAPIAnswersNobody(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	e := bustest.StartTestBus(t, nil)
	kv, err := replica.Open(ctx, connect(t, e.URL()), 1)
	if err != nil {
		t.Fatal(err)
	}
	want := records(10, "1")
	if err := kv.Write(ctx, want); err != nil {
		t.Fatal(err)
	}

	const prefix = "$JS.LATE.API"
	acc := e.Server().GlobalAccount()
	serve := func(api ...string) {
		t.Helper()
		for _, a := range api {
			if err := acc.AddMapping(prefix+"."+a+".>", "$JS.API."+a+".>"); err != nil {
				t.Fatal(err)
			}
		}
	}
	serve("STREAM.INFO")
	nc, err := nats.Connect(e.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.NewWithAPIPrefix(nc, prefix)
	if err != nil {
		t.Fatal(err)
	}
	late, err := replica.Bind(ctx, js)
	if err != nil {
		t.Fatal(err)
	}

	type result struct {
		records []state.Record
		err     error
	}
	done := make(chan result, 1)
	sent := func(what string, n uint64) {
		t.Helper()
		from := nc.Stats().OutMsgs
		testwait.Until(t, what, func() error {
			select {
			case r := <-done:
				t.Fatalf("the read ended while the API answered nobody: %d records, %v", len(r.records), r.err)
			default:
			}
			if sent := nc.Stats().OutMsgs - from; sent < n {
				return fmt.Errorf("%d requests sent", sent)
			}
			return nil
		})
	}
	go func() {
		got, err := late.ReadAll(ctx)
		done <- result{got, err}
	}()
	// A stream info, then two consumer creates: the first was answered by nobody.
	sent("the read to ask for its consumer a second time", 3)
	serve("CONSUMER.CREATE")
	// At most two creates (one sent before the mapping, one after), then two pulls: the
	// first was answered by nobody.
	sent("the read to pull a second time", 4)
	serve("CONSUMER.MSG.NEXT", "CONSUMER.INFO", "CONSUMER.DELETE")
	r := <-done
	if r.err != nil {
		t.Fatalf("the read failed once the API answered: %v", r.err)
	}
	if diff := cmp.Diff(want, r.records); diff != "" {
		t.Fatalf("read back (-written +read):\n%s", diff)
	}
}
