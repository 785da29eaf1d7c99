package reconcile

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/jsapi"
	"github.com/meshbus/meshctl/plan"
)

// losingAPI is the real API of a real server, except that the consumer named lose is lost
// right after the server acknowledged its creation, as one created while the server was
// killed was: the next times times (a negative times: every time).
type losingAPI struct {
	jsapi.API
	lose  string
	times atomic.Int64
}

func (a *losingAPI) CreateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (*jetstream.ConsumerInfo, error) {
	info, err := a.API.CreateConsumer(ctx, stream, cfg)
	if err != nil || cfg.Durable != a.lose || a.times.Load() == 0 {
		return info, err
	}
	a.times.Add(-1)
	return info, a.API.DeleteConsumer(ctx, stream, cfg.Durable)
}

// listCounting counts the consumer lists asked for, and the name lists.
type listCounting struct {
	jsapi.API
	n, names atomic.Int64
}

func (a *listCounting) ListConsumers(ctx context.Context, stream string) ([]*jetstream.ConsumerInfo, error) {
	a.n.Add(1)
	return a.API.ListConsumers(ctx, stream)
}

func (a *listCounting) ConsumerNames(ctx context.Context, stream string) ([]string, error) {
	a.names.Add(1)
	return a.API.ConsumerNames(ctx, stream)
}

// misanswering is the real API of a real server, except that its answer to the creation of
// the consumer named differs from what the server created: another description.
type misanswering struct {
	jsapi.API
	named string
}

func (a *misanswering) CreateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (*jetstream.ConsumerInfo, error) {
	info, err := a.API.CreateConsumer(ctx, stream, cfg)
	if err != nil || cfg.Durable != a.named {
		return info, err
	}
	told := *info
	told.Config.Description = "not what was asked for"
	return &told, nil
}

// A first apply creates whole streams of consumers; its verification reads those streams'
// consumer names, and takes each created consumer as the server's answer to its creation
// described it, rather than having the server list every consumer's config and state again.
func TestAFirstApplyIsVerifiedByNameAndTheServersAnswers(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, quickMesh)
	s := f.connect(ctx)
	real := s.API
	reads := &listCounting{API: real}
	s.API = reads
	res, _, err := f.apply(ctx, s, RunOptions{})
	s.API = real
	if err != nil {
		t.Fatal(err)
	}
	withConsumers := map[string]bool{}
	for _, c := range res.Plan.Changes {
		if c.Kind == plan.KindConsumer {
			if c.Action != plan.Create {
				t.Fatalf("a first apply planned %s", c.ID())
			}
			withConsumers[c.Stream] = true
		}
	}
	if len(withConsumers) == 0 {
		t.Fatal("the mesh's first apply created no consumer")
	}
	if n := reads.names.Load(); n != int64(len(withConsumers)) {
		t.Errorf("the verification named the consumers of %d streams; want the %d it created consumers in", n, len(withConsumers))
	}
	if n := reads.n.Load(); n != 0 {
		t.Errorf("the first apply listed consumers %d times; want none (no stream existed to plan from, and its own are read by name)", n)
	}
	f.mustConverge(ctx, s)
}

// The answer is what the verification compares: an answer that is not what the plan asked
// for is applied once more, and then the bus is read in full, as the server serves it.
func TestAnAnswerUnlikeThePlanIsAppliedAgainAndReadInFull(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, quickMesh)
	s := f.connect(ctx)
	real := s.API
	reads := &listCounting{API: real}
	s.API = &misanswering{API: reads, named: "beta_postman"}
	_, _, err := f.apply(ctx, s, RunOptions{})
	s.API = real
	if err != nil {
		t.Fatalf("an apply whose answer differed from what the server created: %v", err)
	}
	if !strings.Contains(f.log.String(), "(consumer EVENTS/beta_postman); applying them once more") {
		t.Errorf("the apply did not apply again the consumer whose answer differed:\n%s", f.log.String())
	}
	if reads.n.Load() == 0 {
		t.Error("after applying again, the verification did not list the consumers as the server serves them")
	}
	f.mustConverge(ctx, s)
}

// An apply claims success only for what the bus, read again, shows: a consumer the server
// acknowledged and lost is created once more; one it loses again is named in the failure.
func TestAnApplyIsVerifiedByReadingTheBusAgain(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, quickMesh)
	s := f.connect(ctx)
	real := s.API
	lossy := &losingAPI{API: real, lose: "beta_postman"}
	lossy.times.Store(1)
	s.API = lossy
	if _, _, err := f.apply(ctx, s, RunOptions{}); err != nil {
		t.Fatalf("an apply whose consumer was lost once: %v", err)
	}
	if !strings.Contains(f.log.String(), "applying them once more") {
		t.Error("the apply did not say it applied again what the bus did not show")
	}
	s.API = real
	f.mustConverge(ctx, s)

	// Lost every time: the apply fails naming it, and the history says so.
	if err := f.js(s).DeleteConsumer(ctx, "EVENTS", "beta_postman"); err != nil {
		t.Fatal(err)
	}
	lists := &listCounting{API: real}
	always := &losingAPI{API: lists, lose: "beta_postman"}
	always.times.Store(-1 << 40)
	s.API = always
	_, _, err := f.apply(ctx, s, RunOptions{})
	s.API = real
	// The plan lists each of the four streams' consumers once; the verifications read the
	// one consumer changed on its own.
	if n := lists.n.Load(); n != 4 {
		t.Errorf("the apply of one consumer listed consumers %d times; want the plan's 4 and no more", n)
	}
	if !errors.Is(err, ErrNotConverged) || !strings.Contains(err.Error(), "consumer EVENTS/beta_postman") {
		t.Fatalf("an apply whose consumer is always lost: %v; want ErrNotConverged naming it", err)
	}
	hist, herr := f.store.History(ctx, 0)
	if herr != nil || !strings.HasPrefix(hist[0].Outcome, "failed") {
		t.Fatalf("the history records %+v %v; want the failure", hist, herr)
	}
}

// A server killed while it created a consumer leaves the consumer's meta.inf without its
// meta.sum (nats-server writes them one after the other: filestore.go writeConsumerMeta).
// The server restarted skips that consumer, and creating it again served it from memory
// only — the old meta.inf was kept and meta.sum never written — so the next apply claimed
// it and every restart lost it again. The embedded bus removes what a killed server left
// half-written before it starts, and the consumer is created whole.
func TestAConsumerHalfWrittenByAKilledServerIsCreatedWhole(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, quickMesh)
	s := f.connect(ctx)
	f.mustApply(ctx, s)
	s.Close()
	sum := filepath.Join(f.stateDi, "bus", "jetstream", "jetstream", "MESH", "streams", "EVENTS", "obs", "beta_postman", "meta.sum")
	if err := os.Remove(sum); err != nil {
		t.Fatalf("making the consumer's store half-written, as a kill leaves it: %v", err)
	}

	s = f.connect(ctx)
	res := f.mustApply(ctx, s)
	if len(res.Plan.Changes) != 1 || res.Plan.Changes[0].ID() != "consumer EVENTS/beta_postman" {
		t.Fatalf("the apply after the kill planned %s; want the consumer the server skipped", ids(res.Plan.Changes))
	}
	s.Close()
	// Read by the bus started afresh: the consumer was stored whole this time.
	f.mustConverge(ctx, f.connect(ctx))
}
