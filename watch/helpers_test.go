package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/testnats"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// waitLimit is how long a test waits for a condition before it gives up. It is a failsafe,
// not a measurement: every wait ends as soon as its condition holds.
const waitLimit = testwait.Limit

// harness is one Run for one test, on a description directory and a state directory of the
// test's own, with every cycle recorded for the test to wait on.
type harness struct {
	t        *testing.T
	dir      string
	stateDir string
	hup      chan os.Signal

	cancel   context.CancelFunc
	done     chan error
	stopOnce sync.Once

	mu     sync.Mutex
	cycles []Cycle
	more   chan struct{} // closed and replaced at every cycle
}

// quickstart is the mesh the README starts from, on an embedded bus at a random port.
func quickstart(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "examples", "quickstart", "mesh.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{"mesh.yaml": string(data), "bus.yaml": "bus:\n  listen: 127.0.0.1:0\n"}
}

// auditModule adds a module following the shop's orders: consumer EVENTS/alpha_audit.
const auditModule = `modules:
  - name: audit
    on: [alpha]
    follows: [shop/order.placed]
`

// startWatch writes files into a fresh directory and runs watch on it until the test ends.
// Intervals are short, and the resync long enough not to happen unless a test shortens it.
func startWatch(t *testing.T, files map[string]string, opts ...func(*Config)) *harness {
	t.Helper()
	h := &harness{t: t, dir: t.TempDir(), stateDir: t.TempDir(), hup: make(chan os.Signal, 1), more: make(chan struct{})}
	for name, body := range files {
		h.write(name, body)
	}
	cfg := Config{
		Dir:      h.dir,
		StateDir: h.stateDir,
		Cost:     bcrypt.MinCost,
		Debounce: 100 * time.Millisecond,
		Resync:   time.Hour,
		Poll:     50 * time.Millisecond,
		RetryMin: 50 * time.Millisecond,
		RetryMax: 400 * time.Millisecond,
		Timeout:  waitLimit,
		Logger:   testLogger(t),
		Hup:      h.hup,
		OnCycle:  h.record,
	}
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan error, 1)
	go func() { h.done <- Run(ctx, cfg) }()
	t.Cleanup(h.stop)
	return h
}

// stop cancels Run and waits for it to return.
func (h *harness) stop() {
	h.stopOnce.Do(func() {
		h.cancel()
		if err := <-h.done; err != nil {
			h.t.Errorf("Run returned %v", err)
		}
	})
}

func (h *harness) record(c Cycle) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cycles = append(h.cycles, c)
	close(h.more)
	h.more = make(chan struct{})
}

// mark is the number of cycles so far: waitFor(mark, …) looks only at what comes after.
func (h *harness) mark() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.cycles)
}

// waitFor returns the first cycle from index from on that satisfies ok, waiting for it.
func (h *harness) waitFor(from int, what string, ok func(Cycle) bool) Cycle {
	h.t.Helper()
	return h.waitWithin(waitLimit, from, what, ok)
}

// waitWithin is waitFor for a cycle that comes only after something of its own takes its time:
// it gives up after limit.
func (h *harness) waitWithin(limit time.Duration, from int, what string, ok func(Cycle) bool) Cycle {
	h.t.Helper()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		for _, c := range h.cycles[min(from, len(h.cycles)):] {
			if ok(c) {
				h.mu.Unlock()
				return c
			}
		}
		more := h.more
		seen := describeCycles(h.cycles[min(from, len(h.cycles)):])
		h.mu.Unlock()
		select {
		case <-more:
		case <-deadline.C:
			h.t.Fatalf("no cycle %s after %s; saw: %s", what, limit, seen)
		}
	}
}

// since returns the cycles from index from on.
func (h *harness) since(from int) []Cycle {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Cycle(nil), h.cycles[min(from, len(h.cycles)):]...)
}

func describeCycles(cs []Cycle) string {
	if len(cs) == 0 {
		return "none"
	}
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "\n  %s: %s", c.Trigger, c.Outcome)
		if c.Plan != nil {
			fmt.Fprintf(&b, " (%s, %d applied)", c.Plan.Summary(), c.Applied)
		}
		if c.Err != nil {
			fmt.Fprintf(&b, ": %v", c.Err)
		}
	}
	return b.String()
}

func is(t Trigger, o Outcome) func(Cycle) bool {
	return func(c Cycle) bool { return c.Trigger.Has(t) && c.Outcome == o }
}

// write writes a file of the description, creating its directories.
func (h *harness) write(name, body string) {
	h.t.Helper()
	writeFile(h.t, filepath.Join(h.dir, name), body)
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// busURL is the address of the embedded bus watch serves.
func (h *harness) busURL() string {
	h.t.Helper()
	url, ok := bus.RunningEmbedded(h.stateDir)
	if !ok {
		h.t.Fatalf("no embedded bus is running from %s", h.stateDir)
	}
	return url
}

// controller connects to url as the controller, with the password watch minted in its
// state directory, as an operator in another terminal could.
func (h *harness) controller(url string) jetstream.JetStream {
	h.t.Helper()
	pw, err := os.ReadFile(filepath.Join(h.stateDir, "controller.password"))
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	c, err := busclient.Dial(ctx, busclient.Target{URL: url}, busclient.Credential{User: render.ControllerUser, Password: strings.TrimSpace(string(pw))})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(c.Close)
	js, err := jetstream.New(c.Conn)
	if err != nil {
		h.t.Fatal(err)
	}
	return js
}

// hasConsumer reports whether the consumer exists on the bus.
func hasConsumer(t *testing.T, js jetstream.JetStream, stream, name string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	_, err := host.ConsumerInfo(ctx, js, stream, name)
	switch {
	case err == nil:
		return true
	case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
		return false
	default:
		t.Fatalf("looking up consumer %s/%s: %v", stream, name, err)
		return false
	}
}

// realSignals serialises the tests that send real SIGHUPs, and subscribes a channel to
// the process's SIGHUP until the test ends. A signal goes to every channel subscribed in
// the process, so two such tests at once would each reload the other's bus, mid-reconcile.
// And the test binary must have a handler at all: SIGHUP's default action is to exit.
func realSignals(t *testing.T) chan os.Signal {
	signalTurn.Lock()
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	t.Cleanup(func() {
		signal.Stop(ch)
		signalTurn.Unlock()
	})
	return ch
}

var signalTurn sync.Mutex

// freePort is a TCP port nothing listened on a moment ago, for a server that must come
// back on the same address.
func freePort(t *testing.T) int {
	t.Helper()
	return testnats.FreePort(t)
}

// testLogger writes watch's log into the test's, shown when the test fails or with -v.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// anotherTerminal is what a second meshctl command in another terminal starts from: the
// description watch watches, and the state store it shares with watch (closed when the test
// ends).
func (h *harness) anotherTerminal() (*model.Mesh, *state.Store) {
	h.t.Helper()
	m, err := model.Load(h.dir)
	if err != nil {
		h.t.Fatal(err)
	}
	st, err := state.Open(h.stateDir)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { st.Close() })
	return m, st
}
