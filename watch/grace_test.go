package watch

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/render"
)

// graceMesh is a seat two modules claim; holders, when not empty, names its holder.
func graceMesh(holders string) string {
	return `bus:
  listen: 127.0.0.1:0
nodes:
  - name: alpha
seats:
  - name: mailer
    accepts: [send]
modules:
  - name: courier
    on: [alpha]
    claims: [mailer]
  - name: postman
    on: [alpha]
    claims: [mailer]
` + holders
}

// After a handover the holder before may acknowledge the work it took for one ack wait; watch
// reconciles when that ends, whatever its resync interval, and the reconcile takes the grant
// away.
func TestWatchEndsAFormerHoldersGraceOnTime(t *testing.T) {
	t.Parallel()
	h := startWatch(t, map[string]string{"mesh.yaml": graceMesh("")})
	h.waitFor(0, "applying the mesh", is(TriggerStart, OutcomeOK))

	from := h.mark()
	h.write("mesh.yaml", graceMesh("holders:\n  - seat: mailer\n    node: alpha\n    module: postman\n"))
	handover := h.waitFor(from, "handing the seat over", func(c Cycle) bool {
		return c.Outcome == OutcomeOK && len(c.Plan.Holders) == 1
	})
	if handover.GraceEnds.IsZero() {
		t.Fatal("the handover's cycle does not say when the former holder's grace ends")
	}
	acks := "$JS.ACK." + render.SeatStreamName("mailer") + "." + render.WorkerConsumer("mailer") + ".>"
	if u := userOf(handover.Plan, "alpha.courier"); slices.Contains(u.PublishRemoved, acks) {
		t.Fatalf("the handover takes the former holder's acknowledgements away at once: %+v", u)
	}

	from = h.mark()
	ended := h.waitWithin(time.Until(handover.GraceEnds)+waitLimit, from, "ending the grace", is(TriggerGrace, OutcomeOK))
	if u := userOf(ended.Plan, "alpha.courier"); !slices.Equal(u.PublishRemoved, []string{acks}) {
		t.Errorf("the end of the grace takes away %v, want %s alone", u.PublishRemoved, acks)
	}
	for _, c := range h.since(from) {
		if c.Trigger.Has(TriggerResync) {
			t.Errorf("a resync ran (%s): the test's resync interval is an hour", c.Trigger)
		}
	}
	if ended.Drift != 0 || !ended.GraceEnds.IsZero() {
		t.Errorf("the grace's end counted %d changes as drift, and says another grace ends at %v", ended.Drift, ended.GraceEnds)
	}
	if !strings.Contains(ended.Trigger.String(), "grace") {
		t.Errorf("the trigger is named %q", ended.Trigger)
	}
}

// userOf is the plan's change of user, the zero UserChange when it has none.
func userOf(p *plan.Plan, user string) plan.UserChange {
	for _, c := range p.Changes {
		for _, u := range c.Users {
			if u.User == user {
				return u
			}
		}
	}
	return plan.UserChange{}
}
