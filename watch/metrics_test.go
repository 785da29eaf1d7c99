package watch

import (
	"testing"

	"github.com/meshbus/meshctl/controller"
)

// /healthz answers for the controller too: a bus in sync with the controller off it enrols,
// records and declares nothing. A reconcile's problem is said first; a controller still joining
// for the first time is not held against watch.
func TestHealthzAnswersForTheController(t *testing.T) {
	t.Parallel()
	inSync := &health{ok: true, state: healthStates[OutcomeNoop]}
	failing := &health{state: healthStates[OutcomeError]}
	for _, c := range []struct {
		name   string
		h      *health
		ctl    *controller.Health
		ok     bool
		answer string
	}{
		{"no controller yet", inSync, nil, true, healthStates[OutcomeNoop]},
		{"the controller joining", inSync, &controller.Health{}, true, healthStates[OutcomeNoop]},
		{"the controller on the bus", inSync, &controller.Health{Joined: true, Connected: true}, true, healthStates[OutcomeNoop]},
		{"the controller off the bus", inSync, &controller.Health{Joined: true}, false, controllerOff},
		{"both failing", failing, &controller.Health{Joined: true}, false, healthStates[OutcomeError]},
	} {
		if got := answer(c.h, c.ctl); got.ok != c.ok || got.state != c.answer {
			t.Errorf("%s: %+v; want ok %v, %q", c.name, got, c.ok, c.answer)
		}
	}
}
