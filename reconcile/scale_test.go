package reconcile

import (
	"bytes"
	"os"
	"testing"

	"github.com/meshbus/meshctl/bench/meshgen"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/render"
)

// scaleTestInstances sizes the counted scale test: large enough that every kind of object
// and reference of a real mesh is there (fleet modules, seats held and handed over, renamed
// seats), small enough that the server's stop — about 10 ms per consumer, one after
// another — keeps the test to seconds.
const scaleTestInstances = 300

// On a generated mesh, a converged apply costs the read and nothing else, and a merge that
// changes one module makes exactly the calls that module needs. Counted, not timed: the
// timings are docs/BENCHMARKS.md's.
func TestAtScaleAnApplyMakesOnlyTheCallsItsChangeNeeds(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	g := meshgen.Scaled(scaleTestInstances)
	g.Listen = "127.0.0.1:-1"
	f := newFixture(t, "")
	if err := g.Write(f.dir); err != nil {
		t.Fatal(err)
	}
	s := f.connect(ctx)
	first := f.mustApply(ctx, s)
	d := render.Derive(f.mesh())
	if sum := first.Plan.Summary(); sum.Create != len(d.Streams)+len(d.Consumers) {
		t.Fatalf("the first apply planned %+v for %d streams and %d consumers", sum, len(d.Streams), len(d.Consumers))
	}

	// Converged: no mutating call, the accounts file neither rewritten nor reloaded.
	before := accountsState(t, s)
	loaded := s.Embedded.ConfigLoadTime()
	res, counting, err := f.apply(ctx, s, RunOptions{RecordNoop: true})
	if err != nil || !res.Plan.Empty() || res.Applied != 0 {
		t.Fatalf("a converged apply planned %d change(s), applied %d: %v", len(res.Plan.Changes), res.Applied, err)
	}
	if n := counting.Mutations.Load(); n != 0 {
		t.Fatalf("a converged apply made %d mutating call(s)", n)
	}
	if after := accountsState(t, s); after != before {
		t.Fatal("a converged apply rewrote the accounts config")
	}
	if !s.Embedded.ConfigLoadTime().Equal(loaded) {
		t.Fatal("a converged apply reloaded the bus")
	}
	// The read is one stream list and one consumer list per owned stream.
	if n := counting.Reads.Load(); n != int64(1+len(d.Streams)) {
		t.Errorf("a converged apply made %d read(s), want %d", n, 1+len(d.Streams))
	}

	// One module, on one node, follows one more event: its consumer's filters and its
	// user's grants change, nothing else.
	touched := g
	touched.Touched = 1
	if err := touched.Write(f.dir); err != nil {
		t.Fatal(err)
	}
	res, counting, err = f.apply(ctx, s, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var consumer, accounts *plan.Change
	for i, c := range res.Plan.Changes {
		switch {
		case c.Kind == plan.KindConsumer && c.Action == plan.Update:
			consumer = &res.Plan.Changes[i]
		case c.Kind == plan.KindAccounts && c.Action == plan.Update:
			accounts = &res.Plan.Changes[i]
		}
	}
	if len(res.Plan.Changes) != 2 || consumer == nil || accounts == nil {
		t.Fatalf("one module following one more event planned %d change(s), want one consumer update and the accounts", len(res.Plan.Changes))
	}
	if consumer.Stream != render.StreamEvents || len(consumer.Fields) != 1 || consumer.Fields[0].Field != "filter_subjects" {
		t.Errorf("the consumer change is %s %+v, want its filters on EVENTS", consumer.ID(), consumer.Fields)
	}
	if len(accounts.Users) != 1 || len(accounts.Users[0].SubscribeAdded) != 1 ||
		len(accounts.Users[0].PublishAdded)+len(accounts.Users[0].PublishRemoved)+len(accounts.Users[0].SubscribeRemoved) != 0 {
		t.Errorf("the accounts change is %+v, want one user gaining one subscription", accounts.Users)
	}
	if got := counting.ConsumerMutations.Load(); got != 1 {
		t.Errorf("the change made %d consumer call(s), want 1", got)
	}
	if got := counting.StreamMutations.Load(); got != 0 {
		t.Errorf("the change made %d stream call(s), want 0", got)
	}
	if accountsState(t, s) == before || !s.Embedded.ConfigLoadTime().After(loaded) {
		t.Error("the accounts change was not written and reloaded")
	}
	f.mustConverge(ctx, s)
}

// accountsFile is what a reader can tell of the accounts file: its bytes and when it was
// last written.
type accountsFile struct {
	data    string
	modTime int64
}

func accountsState(t *testing.T, s *Session) accountsFile {
	t.Helper()
	data, err := os.ReadFile(s.Accounts.Path)
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(s.Accounts.Path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Count(data, []byte("{ user: ")) < scaleTestInstances {
		t.Fatalf("the accounts file holds fewer users than the mesh has instances")
	}
	return accountsFile{data: string(data), modTime: info.ModTime().UnixNano()}
}
