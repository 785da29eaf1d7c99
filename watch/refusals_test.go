package watch

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/explain/explaintest"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// capturedLog is watch's log, kept for the test to read and shown in the test's own.
type capturedLog struct {
	t  *testing.T
	mu sync.Mutex
	b  strings.Builder
}

func (c *capturedLog) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.b.Write(p)
	c.mu.Unlock()
	c.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// lines are the lines logged so far that contain every one of parts.
func (c *capturedLog) lines(parts ...string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, l := range strings.Split(c.b.String(), "\n") {
		if containsAll(l, parts) {
			out = append(out, l)
		}
	}
	return out
}

func containsAll(line string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(line, p) {
			return false
		}
	}
	return true
}

// refusedMesh is watch serving files on an embedded bus, with a credential issued to user
// before it starts (so its first apply lets user in), watch's log kept, and user connected.
type refusedMesh struct {
	*harness
	files    []model.File
	stateDir string // watch's, not the harness's own
	logs     *capturedLog
	conn     *busclient.Conn
	dial     func() *busclient.Conn
	base     string // the metrics server's address
}

func startRefusedMesh(t *testing.T, files map[string]string, user string) *refusedMesh {
	t.Helper()
	ctx := context.Background()
	stateDir := t.TempDir()
	st, err := state.Open(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	minted, err := st.Mint(ctx, []string{user}, bcrypt.MinCost, "credentials issue")
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	rm := &refusedMesh{logs: &capturedLog{t: t}, stateDir: stateDir}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		rm.files = append(rm.files, model.File{Name: name, Data: []byte(files[name])})
	}
	addr := make(chan string, 1)
	rm.harness = startWatch(t, files, func(c *Config) {
		c.StateDir = stateDir
		c.Logger = slog.New(slog.NewTextHandler(rm.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c.MetricsAddr = "127.0.0.1:0"
		c.metricsReady = func(a string) { addr <- a }
	})
	rm.base = "http://" + <-addr
	rm.waitFor(0, "applying the description at start", is(TriggerStart, OutcomeOK))
	url, ok := bus.RunningEmbedded(stateDir)
	if !ok {
		t.Fatal("no embedded bus")
	}
	rm.dial = func() *busclient.Conn {
		t.Helper()
		dctx, cancel := context.WithTimeout(ctx, waitLimit)
		defer cancel()
		c, err := busclient.Dial(dctx, busclient.Target{URL: url}, busclient.Credential{User: user, Password: minted[user]})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	rm.conn = rm.dial()
	return rm
}

// refusals are the refusals watch recorded for `meshctl status`.
func (rm *refusedMesh) refusals() ([]state.Refusal, error) {
	st, err := state.Open(rm.stateDir)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	return st.Refusals(context.Background(), 0)
}

// waitLogged waits for a line of watch's log that has every one of parts.
func (rm *refusedMesh) waitLogged(what string, parts ...string) {
	rm.t.Helper()
	testwait.Until(rm.t, what, func() error {
		if len(rm.logs.lines(parts...)) == 0 {
			return fmt.Errorf("no line in watch's log with %q", parts)
		}
		return nil
	})
}

// A refused publish on the embedded bus shows in watch's log within a second, naming the user,
// the subject and the line of YAML that would grant it; the metric counts it, and a repeat is
// counted without being logged again; `meshctl status` finds it in the store. The fix, written
// into the description, grants the subject.
func TestARefusalIsLoggedWithItsFixAndCounted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rm := startRefusedMesh(t, quickstart(t), "alpha.shop")
	logs, shop, base := rm.logs, rm.conn, rm.base
	dctx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()

	// shop serves status; it does not call postman's, which postman does not serve either.
	subject := render.ModuleTool("postman", "status")
	fix := "module postman would need `serves: [status]`, and module shop `calls: [postman/status]`"
	refuse := func() {
		t.Helper()
		if err := shop.Publish(subject, []byte("?")); err != nil {
			t.Fatal(err)
		}
		if _, err := shop.WaitViolation(dctx, subject); err != nil {
			t.Fatalf("the bus did not refuse alpha.shop %s: %v", subject, err)
		}
	}
	start := time.Now()
	refuse()
	parts := []string{"level=WARN", "user=alpha.shop", "subject=" + subject, `fix="` + fix + `"`}
	// Waited for, not measured: the line comes about a millisecond after the publish, and the
	// time it took is logged; a loaded CI machine must not turn a slow run into a failure.
	testwait.Until(t, "a line in watch's log naming the user, the subject and the fix", func() bool { return len(logs.lines(parts...)) > 0 })
	t.Logf("logged %s after the publish (issue 16 asks within a second)", time.Since(start))
	if err := explaintest.Check(rm.files, busclient.PermissionError{User: "alpha.shop", Op: busclient.OpPublish, Subject: subject}, fix); err != nil {
		t.Error(err)
	}

	metric := func(want string) {
		t.Helper()
		testwait.Until(t, "the refusal counted", func() error {
			if _, body := get(t, base+"/metrics"); !strings.Contains(body, want) {
				return fmt.Errorf("/metrics lacks %q", want)
			}
			return nil
		})
	}
	metric(`meshctl_permission_refusals_total{direction="publish",user="alpha.shop"} 1`)
	refuse()
	metric(`meshctl_permission_refusals_total{direction="publish",user="alpha.shop"} 2`)
	if n := len(logs.lines("user=alpha.shop", "subject="+subject, "level=WARN")); n != 1 {
		t.Errorf("the repeated refusal was logged %d times within the interval, want once", n)
	}

	testwait.Until(t, "the refusal recorded for meshctl status", func() error {
		rs, err := rm.refusals()
		if err != nil {
			return err
		}
		if len(rs) != 1 || rs[0].User != "alpha.shop" || rs[0].Subject != subject || rs[0].Advice != fix || rs[0].Count != 2 {
			return fmt.Errorf("recorded %+v", rs)
		}
		return nil
	})
}

// A host whose inbox prefix is not set subscribes a new random inbox on every connection: all
// of them are one kind of refusal, one line in watch's log (with the count of the others when
// it is logged again) and one row of `meshctl status`, with the latest subject.
func TestRandomInboxesAreOneRefusal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rm := startRefusedMesh(t, quickstart(t), "alpha.shop")
	const connections = 6
	var last string
	for range connections {
		c := rm.dial()
		// What nats.go subscribes for its requests without a prefix: _INBOX.<random>.*
		last = nats.NewInbox() + ".*"
		if _, err := c.SubscribeSync(last); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, waitLimit)
		_, err := c.WaitViolation(wctx, last)
		cancel()
		if err != nil {
			t.Fatalf("the bus did not refuse alpha.shop %s: %v", last, err)
		}
		c.Close()
	}
	rm.waitLogged("the refusal logged", "level=WARN", "user=alpha.shop", "inbox prefix not set")
	testwait.Until(t, "the refusals recorded for meshctl status", func() error {
		rs, err := rm.refusals()
		if err != nil {
			return err
		}
		if len(rs) != 1 || rs[0].Rule != "_INBOX.>" || rs[0].Subject != last || rs[0].Count != connections {
			return fmt.Errorf("recorded %d row(s): %+v; want one of %d refusals, the latest %s", len(rs), rs, connections, last)
		}
		return nil
	})
	if n := len(rm.logs.lines("level=WARN", "user=alpha.shop", "refused:")); n != 1 {
		t.Errorf("%d connections refused their random inboxes were logged %d times, want once", connections, n)
	}
	if len(rm.logs.lines("level=WARN", "user=alpha.shop", "rule=_INBOX.>")) != 1 {
		t.Errorf("the line does not name the rule, rule=_INBOX.>")
	}
}

// A module that only holds a seat follows nothing and has no events consumer: a host asking
// for one is told so, not to declare what it follows, on a description that is right.
func TestASeatHoldersHostAskingForEventsIsToldItHasNone(t *testing.T) {
	t.Parallel()
	files := quickstart(t)
	files["printer.yaml"] = `seats:
  - name: printer
    accepts: [print]
modules:
  - name: spooler
    on: [alpha]
    claims: [printer]
`
	rm := startRefusedMesh(t, files, "alpha.spooler")
	subject := "$JS.API.CONSUMER.INFO." + render.StreamEvents + ".alpha_spooler"
	if err := rm.conn.Publish(subject, nil); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if _, err := rm.conn.WaitViolation(wctx, subject); err != nil {
		t.Fatalf("the bus did not refuse alpha.spooler %s: %v", subject, err)
	}
	why := "module spooler follows nothing, so it has no events consumer EVENTS/alpha_spooler: its host should not bind one (it takes seat printer's work from SEAT_PRINTER/SEAT_PRINTER_worker)"
	rm.waitLogged("the refusal logged", "level=WARN", "user=alpha.spooler", `why="`+why+`"`)
	if lines := rm.logs.lines("user=alpha.spooler", "follows: ["); len(lines) > 0 {
		t.Errorf("watch advised declaring a follow for a module that holds a seat:\n%s", strings.Join(lines, "\n"))
	}
}

// Without a bus: refusals of one group are one line and, once the recorder has written them,
// one row counting them all with the latest subject; past the interval's bound on advice, a
// new group is logged without it rather than explained.
func TestRefusalsAreGroupedAndTheirAdviceBounded(t *testing.T) {
	t.Parallel()
	logs := &capturedLog{t: t}
	r := newRefusals(slog.New(slog.NewTextHandler(logs, nil)), prometheus.NewRegistry())
	m, err := model.Parse([]model.File{{Name: "mesh.yaml", Data: []byte(quickstart(t)["mesh.yaml"])}})
	if err != nil {
		t.Fatal(err)
	}
	r.mesh.Store(m)
	const connections = 10
	var last string
	for range connections {
		last = nats.NewInbox() + ".*"
		r.refused(busclient.PermissionError{User: "alpha.shop", Op: busclient.OpSubscribe, Subject: last})
	}
	if n := len(logs.lines("refused:")); n != 1 {
		t.Errorf("%d random inboxes refused were logged %d times, want once", connections, n)
	}
	st, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	r.write(ctx, st)
	rs, err := st.Refusals(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Count != connections || rs[0].Subject != last || rs[0].Rule != "_INBOX.>" {
		t.Errorf("recorded %+v, want one row of %d, the latest %s", rs, connections, last)
	}

	for i := range maxExplainedPerInterval {
		r.refused(busclient.PermissionError{User: "alpha.shop", Op: busclient.OpPublish, Subject: fmt.Sprintf("mesh.mod.postman.tool.t%d", i)})
	}
	if n := len(logs.lines("refused:", "not explained")); n != 1 {
		t.Errorf("%d refusals past the bound were logged without advice, want 1", n)
	}
}
