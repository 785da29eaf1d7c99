package reconcile

import (
	"fmt"
	"strings"
	"testing"

	"github.com/meshbus/meshctl/plan"
)

// filterMesh is quickMesh with shop emitting four events and postman following the first n
// of them: its consumer on EVENTS has n filter subjects (none at all for n = 0: then it has
// no consumer).
func filterMesh(n int) string {
	events := []string{"shop/order.placed", "shop/order.paid", "shop/order.sent", "shop/order.lost"}
	m := strings.Replace(quickMesh, "emits: [order.placed]", "emits: [order.placed, order.paid, order.sent, order.lost]", 1)
	follows := "    follows: [" + strings.Join(events[:n], ", ") + "]\n"
	if n == 0 {
		follows = ""
	}
	return strings.Replace(m, "    follows: [shop/order.placed]\n", follows, 1)
}

// A consumer's filters change from any count to any other in one apply, each apply on a
// bus started afresh as a one-shot `meshctl apply` starts the embedded one: nats-server
// answers the first update of a consumer it restored with the config it restored (see
// jsapi's upsertConsumer), and nats.go took that answer for a server without multiple filters.
func TestAConsumersFiltersChangeInEveryDirectionInOneApply(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, filterMesh(1))
	first := f.connect(ctx)
	f.mustApply(ctx, first)
	first.Close()
	from := 1
	for _, to := range []int{2, 3, 1, 3, 2, 0, 2, 1, 0, 1} {
		t.Run(fmt.Sprintf("%d→%d", from, to), func(t *testing.T) {
			f.write(filterMesh(to))
			s := f.connect(ctx)
			// Stopped before the next subtest starts one on the same state directory.
			defer s.Close()
			res, _, err := f.apply(ctx, s, RunOptions{})
			if err != nil {
				t.Fatalf("from %d to %d filter(s): %v", from, to, err)
			}
			if res.Plan.Empty() {
				t.Fatalf("from %d to %d filter(s) planned nothing", from, to)
			}
			f.mustConverge(ctx, s)
		})
		from = to
	}
	// Read back by a bus started afresh: what was applied is what the server keeps.
	s := f.connect(ctx)
	p, err := s.Plan(ctx, f.mesh(), plan.Options{})
	if err != nil || !p.Empty() {
		t.Fatalf("after a restart the plan is not empty: %v %v", p.Summary(), err)
	}
}
