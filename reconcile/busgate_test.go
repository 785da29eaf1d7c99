package reconcile

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/bus/bustest"
	"github.com/meshbus/meshctl/internal/testwait"
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

// A server that goes away mid-apply stops the apply at once with one line saying what was done
// and what was not, instead of every remaining call (sixty consumers) waiting out its timeout
// one after another. The test allows it a minute: far above the moment the loss takes to be
// seen on a slow machine, far below the calls' timeouts added up.
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
	if took > testwait.Limit {
		t.Errorf("the apply took %s to fail after the server stopped: its calls waited out their timeouts", took)
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "change(s) were made") {
		t.Errorf("the failure is not one line saying what was done: %q", msg)
	}
	if lines > 0 {
		t.Errorf("the progress reported %d failed call(s); want the one error alone", lines)
	}
}

// A bus that comes back within busReturnWait: the call made while it was down is held, not
// sent into the reconnect buffer or failed, and goes through once the bus is back.
func TestACallWaitsForABusThatComesBack(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	e := bustest.StartTestBus(t, nil)
	u, err := url.Parse(e.URL())
	if err != nil {
		t.Fatal(err)
	}
	stateDir := filepath.Dir(filepath.Dir(e.AccountsFile()))
	nc, err := nats.Connect(e.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	gate := watchBus(nc, e.URL())
	defer gate.stop()

	e.Shutdown()
	// The call starts once the gate has seen the drop, and so must wait for the return.
	testwait.Until(t, "the connection seeing the server stop", func() bool { return !nc.IsConnected() })
	result := make(chan error, 1)
	go func() {
		result <- gate.call(ctx, true, func(ctx context.Context) error {
			_, err := js.AccountInfo(ctx)
			return err
		})
	}()
	back, err := bus.StartEmbedded(ctx, bus.EmbeddedOptions{StateDir: stateDir, Listen: u.Host})
	if err != nil {
		t.Fatalf("starting the bus again on %s: %v", u.Host, err)
	}
	defer back.Shutdown()
	if err := <-result; err != nil {
		t.Fatalf("a call made while the bus was down, which came back: %v", err)
	}
}
