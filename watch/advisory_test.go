package watch

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/state"
)

// Drift made by hand is healed as soon as the server says so, not at the next resync (an hour
// here): a consumer deleted, a stream's config changed, a stream deleted.
func TestDriftIsHealedFromTheBusAdvisories(t *testing.T) {
	t.Parallel()
	h := startWatch(t, quickstart(t))
	h.waitFor(0, "applying the quickstart at start", is(TriggerStart, OutcomeOK))
	js := h.controller(h.busURL())
	ctx := context.Background()

	mark := h.mark()
	deleted := time.Now()
	if err := js.DeleteConsumer(ctx, "EVENTS", "beta_postman"); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "recreating EVENTS/beta_postman", func() error {
		if !hasConsumer(t, js, "EVENTS", "beta_postman") {
			return errors.New("still missing")
		}
		return nil
	})
	t.Logf("a consumer deleted by hand was back after %s", time.Since(deleted).Round(time.Millisecond))
	c := h.waitFor(mark, "healing the deleted consumer", func(c Cycle) bool {
		return is(TriggerAdvisory, OutcomeOK)(c) && planned(c, "create consumer EVENTS/beta_postman")
	})
	if c.Drift != 1 {
		t.Errorf("the reconcile counted %d change(s) as drift; want 1", c.Drift)
	}

	mark = h.mark()
	s, err := js.Stream(ctx, "SEAT_MAILER")
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.Description = "edited by hand"
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	h.waitFor(mark, "healing the edited stream", func(c Cycle) bool {
		return is(TriggerAdvisory, OutcomeOK)(c) && planned(c, "update stream SEAT_MAILER")
	})

	mark = h.mark()
	if err := js.DeleteStream(ctx, "NODES"); err != nil {
		t.Fatal(err)
	}
	h.waitFor(mark, "healing the deleted stream", func(c Cycle) bool {
		return is(TriggerAdvisory, OutcomeOK)(c) && planned(c, "create stream NODES")
	})
	if _, err := js.Stream(ctx, "NODES"); err != nil {
		t.Errorf("NODES after the heal: %v", err)
	}
}

// The advisories of watch's own changes are not drift: a reconcile deleting a consumer and
// updating a stream hears them and reconciles no more, so a converged bus stays quiet.
func TestItsOwnChangesAdvisoriesCauseNoReconcile(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var judged []string
	heard := make(chan struct{}, 16)
	h := startWatch(t, quickstart(t), func(c *Config) {
		c.onHeard = func(o heardObject, own bool) {
			mu.Lock()
			defer mu.Unlock()
			if own {
				judged = append(judged, "own "+o.String())
			} else {
				judged = append(judged, "drift "+o.String())
			}
			heard <- struct{}{}
		}
	})
	h.waitFor(0, "applying the quickstart at start", is(TriggerStart, OutcomeOK))
	h.write("audit.yaml", auditModule)
	h.waitFor(0, "applying the audit module", func(c Cycle) bool {
		return is(TriggerFiles, OutcomeOK)(c) && planned(c, "create consumer EVENTS/alpha_audit")
	})

	// Taken away again, with the events' retention changed: a consumer deletion and a
	// stream update, each announced by the server.
	mark := h.mark()
	if err := os.Remove(filepath.Join(h.dir, "audit.yaml")); err != nil {
		t.Fatal(err)
	}
	h.write("bus.yaml", "bus:\n  listen: 127.0.0.1:0\n  events_max_age: 48h\n")
	applied := h.waitFor(mark, "deleting the audit consumer and updating EVENTS", func(c Cycle) bool {
		return is(TriggerFiles, OutcomeOK)(c) && planned(c, "delete consumer EVENTS/alpha_audit")
	})
	if !planned(applied, "update stream EVENTS") {
		t.Fatalf("the edit did not update EVENTS: %s", describeCycles([]Cycle{applied}))
	}
	want := map[string]bool{"own consumer EVENTS/alpha_audit deleted": true, "own stream EVENTS updated": true}
	deadline := time.After(waitLimit)
	for {
		mu.Lock()
		got := append([]string(nil), judged...)
		mu.Unlock()
		for _, j := range got {
			if !want[j] {
				t.Fatalf("judged %q; want only %v", j, want)
			}
		}
		if len(got) >= len(want) {
			break
		}
		select {
		case <-heard:
		case <-deadline:
			t.Fatalf("heard %v after %s; want %v", got, waitLimit, want)
		}
	}
	for _, c := range h.since(mark) {
		if c.Trigger.Has(TriggerAdvisory) {
			t.Errorf("its own changes caused a reconcile: %s", describeCycles([]Cycle{c}))
		}
	}
}

func TestOwnChangesCoverAStreamsConsumers(t *testing.T) {
	now := time.Now()
	p := &plan.Plan{Changes: []plan.Change{
		{Kind: plan.KindStream, Name: "SEAT_OLD", Action: plan.Delete},
		{Kind: plan.KindStream, Name: "EVENTS", Action: plan.Update},
		{Kind: plan.KindStream, Name: "SEAT_NEW", Action: plan.Create},
		{Kind: plan.KindConsumer, Stream: "EVENTS", Name: "a_b", Action: plan.Delete},
		{Kind: plan.KindConsumer, Stream: "EVENTS", Name: "e_f", Action: plan.Create},
	}}
	own := ownChangesOf(p, now)
	for _, c := range []struct {
		o    heardObject
		at   time.Time
		mine bool
	}{
		{heardObject{stream: "SEAT_OLD", deleted: true}, now, true},
		{heardObject{stream: "SEAT_OLD", consumer: "SEAT_OLD_worker", deleted: true}, now, true}, // dropped with its stream
		{heardObject{stream: "EVENTS"}, now, true},
		{heardObject{stream: "EVENTS", deleted: true}, now, false}, // updated, not deleted
		{heardObject{stream: "EVENTS", consumer: "a_b", deleted: true}, now, true},
		{heardObject{stream: "EVENTS", consumer: "c_d", deleted: true}, now, false}, // an updated stream keeps its consumers
		{heardObject{stream: "EVENTS", consumer: "e_f", deleted: true}, now, false}, // created, then deleted by someone else
		{heardObject{stream: "SEAT_NEW", deleted: true}, now, false},
		{heardObject{stream: "NODES", deleted: true}, now, false},
		{heardObject{stream: "EVENTS"}, now.Add(ownGrace + time.Millisecond), false},
	} {
		if got := own.mine(c.o, c.at); got != c.mine {
			t.Errorf("mine(%s) = %v; want %v", c.o, got, c.mine)
		}
	}
	for subject, want := range map[string]heardObject{
		"$JS.EVENT.ADVISORY.STREAM.DELETED.NODES":            {stream: "NODES", deleted: true},
		"$JS.EVENT.ADVISORY.STREAM.UPDATED.SEAT_MAILER":      {stream: "SEAT_MAILER"},
		"$JS.EVENT.ADVISORY.CONSUMER.DELETED.EVENTS.a_b":     {stream: "EVENTS", consumer: "a_b", deleted: true},
		"$JS.EVENT.ADVISORY.CONSUMER.DELETED.EVENTS.a_b.too": {},
		"$JS.EVENT.ADVISORY.STREAM.CREATED.NODES":            {},
	} {
		got, ok := objectOf(subject)
		if ok != (want != heardObject{}) || got != want {
			t.Errorf("objectOf(%s) = %v, %v; want %v", subject, got, ok, want)
		}
	}
}

// An accounts config without the advisory grants (one from before them, or edited by hand)
// makes the server refuse watch's subscriptions; the reconcile that makes the rendered config
// live again is followed by subscribing anew, so drift is heard again without a restart.
func TestAdvisoriesAreHeardAgainOnceTheGrantIsLive(t *testing.T) {
	t.Parallel()
	h := startWatch(t, quickstart(t))
	h.waitFor(0, "applying the quickstart at start", is(TriggerStart, OutcomeOK))
	js := h.controller(h.busURL())

	path := filepath.Join(h.stateDir, "bus", "accounts.conf")
	rendered, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	without := string(rendered)
	for _, s := range advisorySubjects {
		without = strings.Replace(without, strconv.Quote(s)+", ", "", 1)
	}
	if without == string(rendered) {
		t.Fatal("the rendered accounts config grants no advisory")
	}
	mark := h.mark()
	writeFile(t, path, without)
	h.hup <- syscall.SIGHUP
	h.waitFor(mark, "making the rendered accounts config live again", func(c Cycle) bool {
		return is(TriggerSignal, OutcomeOK)(c) && planned(c, "update accounts config")
	})

	deleted := time.Now()
	if err := js.DeleteConsumer(context.Background(), "EVENTS", "beta_postman"); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "recreating EVENTS/beta_postman", func() error {
		if !hasConsumer(t, js, "EVENTS", "beta_postman") {
			return errors.New("still missing")
		}
		return nil
	})
	t.Logf("a consumer deleted by hand was back after %s", time.Since(deleted).Round(time.Millisecond))
}

// Drift heard while another applier holds the apply lock (its own stream updates, say) is
// reconciled once that applier is done, from the description as it is then: watch waits
// for the lock before it loads the description, rather than loading it beside the other
// applier's work and reconciling what it said before that applier finished.
func TestDriftHeardUnderAnotherAppliersLockIsReconciledFromTheDescriptionAfterIt(t *testing.T) {
	t.Parallel()
	waiting := make(chan struct{})
	var once sync.Once
	h := startWatch(t, quickstart(t), func(c *Config) {
		c.Debounce = time.Hour // the edit below is applied by the advisory's reconcile, or not at all
		c.Logger = slog.New(noticing{Handler: c.Logger.Handler(), prefix: "waiting for the apply lock", seen: func() {
			once.Do(func() { close(waiting) })
		}})
	})
	h.waitFor(0, "applying the quickstart at start", is(TriggerStart, OutcomeOK))
	js := h.controller(h.busURL())
	ctx := context.Background()

	lock, err := state.AcquireLock(ctx, h.stateDir, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	mark := h.mark()
	if err := js.DeleteConsumer(ctx, "EVENTS", "beta_postman"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-waiting:
	case <-time.After(waitLimit):
		t.Fatal("watch heard the deletion but did not wait for the apply lock")
	}
	// The other applier's description: it adds a module before it lets the lock go.
	h.write("audit.yaml", auditModule)
	if err := lock.Unlock(); err != nil {
		t.Fatal(err)
	}
	c := h.waitFor(mark, "the reconcile of the deletion", is(TriggerAdvisory, OutcomeOK))
	for _, want := range []string{"create consumer EVENTS/beta_postman", "create consumer EVENTS/alpha_audit"} {
		if !planned(c, want) {
			t.Errorf("the reconcile after the lock was let go did not plan %q: %s", want, describeCycles([]Cycle{c}))
		}
	}
	if !hasConsumer(t, js, "EVENTS", "alpha_audit") {
		t.Error("EVENTS/alpha_audit of the description as it was when the lock was let go is not on the bus")
	}
}

// noticing is a log handler that calls seen for every record whose message starts with prefix,
// from the logger it was given and every logger derived from it.
type noticing struct {
	slog.Handler
	prefix string
	seen   func()
}

func (n noticing) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, n.prefix) {
		n.seen()
	}
	return n.Handler.Handle(ctx, r)
}

func (n noticing) WithAttrs(attrs []slog.Attr) slog.Handler {
	n.Handler = n.Handler.WithAttrs(attrs)
	return n
}

func (n noticing) WithGroup(name string) slog.Handler {
	n.Handler = n.Handler.WithGroup(name)
	return n
}
