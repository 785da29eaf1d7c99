package reconcile

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshbus/meshctl/plan"
)

// wideMesh is quickMesh with n more modules following shop's event: n more consumers on
// EVENTS, so an apply is still sending when the test stops the server.
func wideMesh(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "  - name: reader-%02d\n    on: [alpha]\n    follows: [shop/order.placed]\n", i)
	}
	return strings.Replace(quickMesh, "controller:\n", b.String()+"controller:\n", 1)
}

// A server that goes away mid-apply stops the apply within 15 s with one line saying what
// was done and what was not, instead of every remaining call waiting out its timeout.
func TestAServerKilledMidApplyFailsFastWithOneLine(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, wideMesh(60))
	s := f.connect(ctx)
	var (
		once   sync.Once
		killed time.Time
		lines  int
	)
	_, _, err := f.apply(ctx, s, RunOptions{Progress: func(done, total int, c plan.Change, err error) {
		if err != nil {
			lines++
		}
		if c.Kind == plan.KindConsumer {
			once.Do(func() {
				killed = time.Now()
				s.Embedded.Server().Shutdown()
			})
		}
	}})
	took := time.Since(killed)
	t.Logf("the apply failed %s after the server stopped: %v", took.Round(time.Millisecond), err)
	if killed.IsZero() {
		t.Fatal("the server was never stopped")
	}
	if !errors.Is(err, ErrBusLost) {
		t.Fatalf("an apply whose server stopped: %v; want ErrBusLost", err)
	}
	if took > 15*time.Second {
		t.Errorf("the apply took %s to fail after the server stopped; want at most 15s", took)
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "change(s) were made") {
		t.Errorf("the failure is not one line saying what was done: %q", msg)
	}
	if lines > 0 {
		t.Errorf("the progress reported %d failed call(s); want the one error alone", lines)
	}
}
