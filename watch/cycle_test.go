package watch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/reconcile"
)

// A cycle stopped by its connection dropping fails with reconcile's ErrBusLost, naming the bus
// and what stopped, the same error an apply whose connection did not come back fails with;
// and where the reconcile's own error says so already, the line says it once.
func TestALostConnectionIsTheOneErrBusLostSaidOnce(t *testing.T) {
	t.Parallel()
	sess := &reconcile.Session{Target: busclient.Target{URL: "nats://admin:hunter2@127.0.0.1:4222"}}
	gaveUp := fmt.Errorf("%w (%s) and did not come back within 5s: 1 of 3 change(s) were made, 2 were not",
		reconcile.ErrBusLost, sess.Target.Address())
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"a request cut off", fmt.Errorf("reading the bus: %w", context.Canceled),
			"the connection to the bus was lost (nats://127.0.0.1:4222): reading the bus: context canceled"},
		{"an apply that gave up", gaveUp, gaveUp.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := reconcile.CycleResult{Session: sess, Reconciled: true, Lost: true}
			outcome, err := (&loop{}).outcome(context.Background(), nil, res, tc.err)
			if outcome != OutcomeError {
				t.Errorf("outcome %s; want %s", outcome, OutcomeError)
			}
			if !errors.Is(err, reconcile.ErrBusLost) || !errors.Is(err, tc.err) {
				t.Errorf("error %v; want reconcile.ErrBusLost wrapping the reconcile's error", err)
			}
			if err == nil || err.Error() != tc.want {
				t.Errorf("error %q;\nwant  %q", err, tc.want)
			}
			if n := strings.Count(fmt.Sprint(err), "was lost"); n != 1 {
				t.Errorf("error %q says the connection was lost %d times", err, n)
			}
		})
	}
}
