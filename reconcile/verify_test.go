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
)

// losingAPI is the real API of a real server, except that the consumer named lose is lost
// right after the server acknowledged its creation, as one created while the server was
// killed was: the next times times (a negative times: every time).
type losingAPI struct {
	API
	lose  string
	times atomic.Int64
}

func (a *losingAPI) CreateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) error {
	if err := a.API.CreateConsumer(ctx, stream, cfg); err != nil || cfg.Durable != a.lose || a.times.Load() == 0 {
		return err
	}
	a.times.Add(-1)
	return a.API.DeleteConsumer(ctx, stream, cfg.Durable)
}

// listCounting counts the consumer lists asked for.
type listCounting struct {
	API
	n atomic.Int64
}

func (a *listCounting) ListConsumers(ctx context.Context, stream string) ([]*jetstream.ConsumerInfo, error) {
	a.n.Add(1)
	return a.API.ListConsumers(ctx, stream)
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
