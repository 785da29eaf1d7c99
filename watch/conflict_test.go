package watch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/reconcile"
)

// An object meshctl does not own blocks only what depends on it: watch heals everything
// else, and reports the conflict every cycle, in the log and as a metric.
func TestAConflictIsReportedEveryCycleWhileEverythingElseIsHealed(t *testing.T) {
	t.Parallel()
	addr := make(chan string, 1)
	h := startWatch(t, quickstart(t), func(c *Config) {
		c.MetricsAddr = "127.0.0.1:0"
		c.metricsReady = func(a string) { addr <- a }
	})
	base := "http://" + <-addr
	h.waitFor(0, "applying the quickstart at start", is(TriggerStart, OutcomeOK))
	js := h.controller(h.busURL())
	ctx := context.Background()

	// The seat's work queue replaced by someone else's stream of the same name, and a
	// consumer deleted elsewhere.
	if err := js.DeleteStream(ctx, "SEAT_MAILER"); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "SEAT_MAILER", Subjects: []string{"someone.elses.>"}}); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteConsumer(ctx, "EVENTS", "beta_postman"); err != nil {
		t.Fatal(err)
	}
	mark := h.mark()
	h.hup <- syscall.SIGHUP
	c := h.waitFor(mark, "healing around the conflict", is(TriggerSignal, OutcomeConflict))
	if !errors.Is(c.Err, reconcile.ErrConflict) || !planned(c, "create consumer EVENTS/beta_postman") {
		t.Fatalf("the cycle: %s; want ErrConflict and the consumer recreated", describeCycles([]Cycle{c}))
	}
	if !hasConsumer(t, js, "EVENTS", "beta_postman") {
		t.Error("EVENTS/beta_postman was not healed beside the conflict")
	}

	mark = h.mark()
	h.hup <- syscall.SIGHUP
	h.waitFor(mark, "reporting the conflict again", is(TriggerSignal, OutcomeConflict))
	_, metrics := get(t, base+"/metrics")
	if !strings.Contains(metrics, "meshctl_watch_conflicts 1") {
		t.Errorf("/metrics lacks %q", "meshctl_watch_conflicts 1")
	}
	// Every cycle counts it: the two signalled here, and any the bus's advisories of the
	// replaced stream started beside them.
	const counter = `meshctl_watch_reconciles_total{outcome="conflict"} `
	var conflicts int
	if i := strings.Index(metrics, counter); i < 0 {
		t.Errorf("/metrics lacks %q", counter)
	} else if _, err := fmt.Sscanf(metrics[i+len(counter):], "%d", &conflicts); err != nil || conflicts < 2 {
		t.Errorf("/metrics counts %d conflict cycle(s) (%v); want at least the 2 signalled", conflicts, err)
	}
	// /healthz says the state; the objects are named in the log (any local user can ask
	// /healthz, so it quotes nothing).
	if code, body := get(t, base+"/healthz"); code == 200 || !strings.HasPrefix(body, "conflict:") {
		t.Errorf("/healthz with a conflict: %d %q; want 503 saying it is a conflict", code, body)
	}
}

// A description cut down to almost nothing would delete most of the mesh: watch refuses it
// every cycle and deletes nothing.
func TestWatchNeverAppliesAMassDeletion(t *testing.T) {
	t.Parallel()
	h := startWatch(t, quickstart(t))
	h.waitFor(0, "applying the quickstart at start", is(TriggerStart, OutcomeOK))
	mark := h.mark()
	h.write("mesh.yaml", "nodes:\n  - name: alpha\n")
	c := h.waitFor(mark, "refusing the mass deletion", is(TriggerFiles, OutcomeRefused))
	if !errors.Is(c.Err, reconcile.ErrBlocked) || c.Plan.MassDelete == nil || c.Applied != 0 {
		t.Fatalf("the cycle: %s; want a mass deletion refused", describeCycles([]Cycle{c}))
	}
	if !hasConsumer(t, h.controller(h.busURL()), "EVENTS", "beta_postman") {
		t.Error("the refused mass deletion deleted EVENTS/beta_postman")
	}
}
