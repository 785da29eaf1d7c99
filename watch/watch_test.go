package watch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/reconcile"
)

func planned(c Cycle, id string) bool {
	return c.Plan != nil && slices.ContainsFunc(c.Plan.Changes, func(ch plan.Change) bool {
		return string(ch.Action)+" "+ch.ID() == id
	})
}

func TestAnEditIsApplied(t *testing.T) {
	t.Parallel()
	h := startWatch(t, quickstart(t))
	first := h.waitFor(0, "applying the quickstart at start", is(TriggerStart, OutcomeOK))
	if first.Applied == 0 || first.Drift != 0 {
		t.Errorf("the first reconcile applied %d change(s) and counted %d as drift; want some, and none", first.Applied, first.Drift)
	}
	js := h.controller(h.busURL())

	mark := h.mark()
	h.write("audit.yaml", auditModule)
	c := h.waitFor(mark, "applying the edit", is(TriggerFiles, OutcomeOK))
	if !planned(c, "create consumer EVENTS/alpha_audit") || c.Drift != 0 {
		t.Errorf("the edit's reconcile: %s; want it to create EVENTS/alpha_audit, and no drift", describeCycles([]Cycle{c}))
	}
	if !hasConsumer(t, js, "EVENTS", "alpha_audit") {
		t.Error("EVENTS/alpha_audit is not on the bus after the edit was applied")
	}
}

func TestABurstOfEditsMakesOneReconcile(t *testing.T) {
	t.Parallel()
	// Long enough for fifty writes on a loaded machine under -race, so that the burst is one.
	h := startWatch(t, quickstart(t), func(c *Config) { c.Debounce = 300 * time.Millisecond })
	h.waitFor(0, "applying the quickstart at start", is(TriggerStart, OutcomeOK))

	mark := h.mark()
	// Into a new subdirectory, as a `git pull` adding a directory does: its watch is set
	// up while the files land.
	for i := range 50 {
		h.write(fmt.Sprintf("nodes/n%02d.yaml", i), fmt.Sprintf("nodes:\n  - name: n%02d\n", i))
	}
	c := h.waitFor(mark, "applying the burst", is(TriggerFiles, OutcomeOK))
	if got := c.Plan.Summary().Create; got != 50 {
		t.Errorf("the burst's reconcile created %d object(s); want the 50 nodes' consumers at once", got)
	}
	// A SIGHUP's reconcile comes after every event the burst raised was read: whatever
	// the watcher still had would have made a reconcile of its own by then.
	h.hup <- syscall.SIGHUP
	h.waitFor(mark, "after SIGHUP", is(TriggerSignal, OutcomeNoop))
	var files int
	for _, c := range h.since(mark) {
		if c.Trigger.Has(TriggerFiles) {
			files++
		}
	}
	if files != 1 {
		t.Errorf("50 files written made %d reconciles; want 1:%s", files, describeCycles(h.since(mark)))
	}
}

func TestAnInvalidEditChangesNothingUntilTheTreeIsValidAgain(t *testing.T) {
	t.Parallel()
	h := startWatch(t, quickstart(t))
	h.waitFor(0, "applying the quickstart at start", is(TriggerStart, OutcomeOK))
	js := h.controller(h.busURL())

	// A valid module beside an invalid one: the whole tree is refused, the valid part too.
	mark := h.mark()
	h.write("audit.yaml", auditModule+"  - name: broken\n    on: [gamma]\n")
	c := h.waitFor(mark, "reporting the invalid edit", is(TriggerFiles, OutcomeInvalid))
	var lerr *model.LoadError
	if !errors.As(c.Err, &lerr) || c.Plan != nil || c.Applied != 0 {
		t.Fatalf("the invalid edit's cycle: %s; want a *model.LoadError and nothing planned", describeCycles([]Cycle{c}))
	}
	if got := lerr.Diagnostics[0].Pos; got.File != "audit.yaml" || got.Line != 6 {
		t.Errorf("the problem is reported at %s; want audit.yaml:6 (the unknown node)", got)
	}
	if hasConsumer(t, js, "EVENTS", "alpha_audit") {
		t.Error("EVENTS/alpha_audit was created from a description that does not validate")
	}

	mark = h.mark()
	h.write("audit.yaml", auditModule)
	h.waitFor(mark, "applying the fixed tree", is(TriggerFiles, OutcomeOK))
	if !hasConsumer(t, js, "EVENTS", "alpha_audit") {
		t.Error("EVENTS/alpha_audit is not on the bus once the tree is valid again")
	}
}

func TestDriftIsHealedOnResync(t *testing.T) {
	t.Parallel()
	h := startWatch(t, quickstart(t), func(c *Config) { c.Resync = 200 * time.Millisecond })
	h.waitFor(0, "applying the quickstart at start", is(TriggerStart, OutcomeOK))
	js := h.controller(h.busURL())

	// A consumer's config changed behind watch's back: the server announces a deletion or a
	// stream's change, not this (watch hears those at once: advisory_test.go), so the
	// resync is what finds it.
	mark := h.mark()
	ctx := context.Background()
	cons, err := js.Consumer(ctx, "EVENTS", "beta_postman")
	if err != nil {
		t.Fatal(err)
	}
	edited := cons.CachedInfo().Config
	edited.Description = "edited by hand"
	if _, err := js.UpdateConsumer(ctx, "EVENTS", edited); err != nil {
		t.Fatal(err)
	}
	c := h.waitFor(mark, "healing the edited consumer", func(c Cycle) bool {
		return is(TriggerResync, OutcomeOK)(c) && planned(c, "update consumer EVENTS/beta_postman")
	})
	if c.Drift != 1 {
		t.Errorf("the resync counted %d change(s) as drift; want 1", c.Drift)
	}
	if cons, err := js.Consumer(ctx, "EVENTS", "beta_postman"); err != nil || cons.CachedInfo().Config.Description == "edited by hand" {
		t.Errorf("EVENTS/beta_postman after the resync healed it: %v", err)
	}

	// The accounts file edited by hand.
	path := filepath.Join(h.stateDir, "bus", "accounts.conf")
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	mark = h.mark()
	writeFile(t, path, string(want)+"# edited by hand\n")
	h.waitFor(mark, "healing the accounts file", func(c Cycle) bool {
		return is(TriggerResync, OutcomeOK)(c) && planned(c, "update accounts config")
	})
	// Rewritten with a fresh generation principal, the users as rendered.
	users := want[:bytes.Index(want, []byte(`{ user: "`+accounts.GenerationUser))]
	if got, _ := os.ReadFile(path); bytes.Contains(got, []byte("# edited by hand")) || !bytes.HasPrefix(got, users) {
		t.Errorf("the accounts file after the resync:\n%s\nwant the rendering:\n%s", got, want)
	}
}

func TestARefusedPlanIsReportedEveryCycleAndNeverForced(t *testing.T) {
	t.Parallel()
	h := startWatch(t, map[string]string{"mesh.yaml": `
bus:
  listen: 127.0.0.1:0
nodes:
  - name: one
seats:
  - name: mailer
    accepts: [send]
controller:
  sends: [mailer/send]
`})
	h.waitFor(0, "applying the mesh at start", is(TriggerStart, OutcomeOK))
	js := h.controller(h.busURL())
	if _, err := js.Publish(context.Background(), "mesh.seat.mailer.accept.send", []byte("queued work")); err != nil {
		t.Fatal(err)
	}

	// Dropping the seat would delete its work queue with the message in it.
	mark := h.mark()
	h.write("mesh.yaml", "bus:\n  listen: 127.0.0.1:0\nnodes:\n  - name: one\n")
	c := h.waitFor(mark, "refusing the deletion", is(TriggerFiles, OutcomeRefused))
	if !errors.Is(c.Err, reconcile.ErrBlocked) || c.Applied != 0 {
		t.Errorf("the refused cycle: %s; want reconcile.ErrBlocked and nothing applied", describeCycles([]Cycle{c}))
	}
	h.hup <- syscall.SIGHUP
	h.waitFor(mark, "refusing it again on the next cycle", is(TriggerSignal, OutcomeRefused))
	info, err := js.Stream(context.Background(), "SEAT_MAILER")
	if err != nil {
		t.Fatalf("SEAT_MAILER after two refusals: %v", err)
	}
	if n := info.CachedInfo().State.Msgs; n != 1 {
		t.Errorf("SEAT_MAILER holds %d message(s); want the 1 queued", n)
	}
}

func TestAChangedBusSectionReconnects(t *testing.T) {
	t.Parallel()
	h := startWatch(t, quickstart(t))
	h.waitFor(0, "applying the quickstart at start", is(TriggerStart, OutcomeOK))
	before := h.busURL()

	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	mark := h.mark()
	h.write("bus.yaml", "bus:\n  listen: "+listen+"\n")
	h.waitFor(mark, "reconciling on the new bus", func(c Cycle) bool {
		return c.Trigger.Has(TriggerFiles) && (c.Outcome == OutcomeOK || c.Outcome == OutcomeNoop)
	})
	if after := h.busURL(); after == before || !strings.HasSuffix(after, listen) {
		t.Errorf("the embedded bus is at %s after bus.listen changed to %s (it was at %s)", after, listen, before)
	}
	// The store moved with the bus: the new server recovered it, so the stream is there.
	if !hasConsumer(t, h.controller(h.busURL()), "EVENTS", "beta_postman") {
		t.Error("EVENTS/beta_postman is missing on the restarted bus")
	}
}

func TestACredentialIssuedElsewhereWorksWithoutRestart(t *testing.T) {
	t.Parallel()
	// Credentials issue and revoke find this process serving the bus and have it reloaded
	// through its control socket, as they would a `meshctl watch` in another terminal; no
	// signal is sent, so none is subscribed to.
	h := startWatch(t, quickstart(t))
	h.waitFor(0, "applying the quickstart at start", is(TriggerStart, OutcomeOK))
	url := h.busURL()

	ctx := context.Background()
	m, st := h.anotherTerminal()
	login := func(password string) error {
		c, err := busclient.Dial(ctx, busclient.Target{URL: url}, busclient.Credential{User: "alpha.shop", Password: password})
		if err == nil {
			c.Close()
		}
		return err
	}

	minted, err := st.Mint(ctx, []string{"alpha.shop"}, bcrypt.MinCost, "credentials issue")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reconcile.SyncAccounts(ctx, m, st); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "alpha.shop logging in with its new credential", func() error { return login(minted["alpha.shop"]) })

	if _, err := st.Revoke(ctx, "alpha.shop"); err != nil {
		t.Fatal(err)
	}
	if _, err := reconcile.SyncAccounts(ctx, m, st); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "alpha.shop locked out after the revocation", func() error {
		if err := login(minted["alpha.shop"]); !errors.Is(err, nats.ErrAuthorization) {
			return fmt.Errorf("logging in: %v; want an authorization error", err)
		}
		return nil
	})
}

// The controller's password rotated in another terminal: the reload it asks watch for locks
// watch's own connection out, and watch comes back with the new password, on the same bus.
func TestAControllerRotatedElsewhereIsFollowed(t *testing.T) {
	t.Parallel()
	hups := realSignals(t)
	// A resync, in case the SIGHUP's reconcile ran before the connection saw its refusal.
	h := startWatch(t, quickstart(t), func(c *Config) { c.Hup, c.Resync = hups, 200*time.Millisecond })
	h.waitFor(0, "applying the quickstart at start", is(TriggerStart, OutcomeOK))
	busURL := h.busURL()
	passwordFile := filepath.Join(h.stateDir, "controller.password")
	before, err := os.ReadFile(passwordFile)
	if err != nil {
		t.Fatal(err)
	}

	// `meshctl credentials rotate controller` in another terminal.
	ctx := context.Background()
	m, st := h.anotherTerminal()
	mark := h.mark()
	if _, err := reconcile.RotateController(ctx, m, st, bcrypt.MinCost); err != nil {
		t.Fatal(err)
	}
	if after, err := os.ReadFile(passwordFile); err != nil || bytes.Equal(before, after) {
		t.Fatalf("controller.password is still the previous one (%v)", err)
	}
	h.waitFor(mark, "reconciling with the new credential", is(TriggerResync, OutcomeNoop))
	if url := h.busURL(); url != busURL {
		t.Errorf("the embedded bus moved from %s to %s: it was restarted, disconnecting everyone", busURL, url)
	}
	if !hasConsumer(t, h.controller(busURL), "EVENTS", "beta_postman") {
		t.Error("EVENTS/beta_postman is missing after the controller came back")
	}
}

// A one-shot command that mints the controller a new credential while watch serves the
// bus installs it through watch: it writes the accounts file, has watch reload it over the
// control socket, and must wait for the reload before it logs in. Watch's own connection
// is locked out by it, and its next resync comes back with the new credential.
func TestAOneShotCommandBootstrapsThroughWatch(t *testing.T) {
	t.Parallel()
	h := startWatch(t, quickstart(t), func(c *Config) { c.Resync = 200 * time.Millisecond })
	h.waitFor(0, "applying the quickstart at start", is(TriggerStart, OutcomeOK))

	ctx := context.Background()
	m, st := h.anotherTerminal()
	// Rotated in the store only: the accounts file in use still names the old credential.
	if _, err := st.RotateControllerPassword(ctx, bcrypt.MinCost); err != nil {
		t.Fatal(err)
	}
	mark := h.mark()
	sess, err := reconcile.Connect(ctx, m, st, reconcile.Options{Cost: bcrypt.MinCost})
	if err != nil {
		t.Fatalf("connecting through watch with a new controller credential: %v", err)
	}
	if sess.Embedded != nil {
		t.Error("the one-shot session started a bus of its own beside watch's")
	}
	sess.Close()
	// Watch's own connection used the old credential; it comes back with the new one, on
	// the same bus.
	h.waitFor(mark, "back in with the new credential", func(c Cycle) bool {
		return c.Outcome == OutcomeOK || c.Outcome == OutcomeNoop
	})
	if url := h.busURL(); url != sess.Target.URL {
		t.Errorf("the embedded bus moved from %s to %s: it was restarted", sess.Target.URL, url)
	}
}

// externalBus is a nats-server this test runs as the mesh's bus.url, stopped and started
// again on the same port and store. Its reload is `pid_file`, holding this process's pid:
// the SIGHUP watch sends reaches the test's handler, which reloads the server.
type externalBus struct {
	t        *testing.T
	stateDir string
	listen   string
	pidFile  string

	mu sync.Mutex
	e  *bus.Embedded // nil while stopped
}

func startExternalBus(t *testing.T, hups <-chan os.Signal) *externalBus {
	t.Helper()
	x := &externalBus{t: t, stateDir: t.TempDir(), listen: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	x.pidFile = filepath.Join(t.TempDir(), "nats.pid")
	writeFile(t, x.pidFile, fmt.Sprintf("%d\n", os.Getpid()))
	x.start()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-hups:
				x.mu.Lock()
				if x.e != nil {
					if err := x.e.Reload(); err != nil {
						t.Errorf("reloading the external bus: %v", err)
					}
				}
				x.mu.Unlock()
			case <-stop:
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
		x.stop()
	})
	return x
}

func (x *externalBus) accountsFile() string { return filepath.Join(x.stateDir, "bus", "accounts.conf") }

// start runs the server from its config in stateDir: on its first start an accounts file
// with no user, as an operator's fresh server has before meshctl installs its own.
func (x *externalBus) start() {
	x.t.Helper()
	e, err := bus.StartEmbedded(context.Background(), bus.EmbeddedOptions{StateDir: x.stateDir, Listen: x.listen, ServerName: "external"})
	if err != nil {
		x.t.Fatalf("starting the external bus: %v", err)
	}
	x.mu.Lock()
	x.e = e
	x.mu.Unlock()
}

func (x *externalBus) stop() {
	x.mu.Lock()
	e := x.e
	x.e = nil
	x.mu.Unlock()
	if e != nil {
		e.Shutdown()
	}
}

func TestABusThatStopsAndStartsAgainIsSurvived(t *testing.T) {
	t.Parallel()
	x := startExternalBus(t, realSignals(t))
	mesh := fmt.Sprintf(`
bus:
  url: nats://%s
  accounts_file: %s
  reload: {pid_file: %s}
nodes:
  - name: alpha
modules:
  - name: shop
    on: [alpha]
    emits: [order.placed]
`, x.listen, x.accountsFile(), x.pidFile)
	h := startWatch(t, map[string]string{"mesh.yaml": mesh})
	// The first connection installs meshctl's accounts config on the server; the reload by
	// signal is asynchronous, so the start may need a retry or two to get in.
	h.waitFor(0, "applying the mesh", func(c Cycle) bool { return c.Outcome == OutcomeOK })

	x.stop()
	mark := h.mark()
	h.write("audit.yaml", auditModule)
	h.waitFor(mark, "failing on the stopped bus", is(TriggerFiles, OutcomeError))
	c := h.waitFor(mark, "retrying the stopped bus", is(TriggerRetry, OutcomeError))
	if !c.Trigger.Has(TriggerFiles) {
		t.Errorf("the retry's trigger is %s; want it to carry the file change it is owed", c.Trigger)
	}

	x.start()
	h.waitFor(mark, "applying the edit once the bus is back", is(TriggerFiles, OutcomeOK))
	if !hasConsumer(t, h.controller("nats://"+x.listen), "EVENTS", "alpha_audit") {
		t.Error("EVENTS/alpha_audit is not on the restarted bus")
	}
}

func TestHealthzAndMetricsFollowTheLastReconcile(t *testing.T) {
	t.Parallel()
	addr := make(chan string, 1)
	h := startWatch(t, quickstart(t), func(c *Config) {
		c.MetricsAddr = "127.0.0.1:0"
		c.metricsReady = func(a string) { addr <- a }
	})
	base := "http://" + <-addr
	h.waitFor(0, "applying the quickstart at start", is(TriggerStart, OutcomeOK))
	if code, body := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz after a good reconcile: %d %s; want 200", code, body)
	}

	mark := h.mark()
	// A problem's text quotes the description, which may hold what no local user should
	// read (a file symlinked to a secret is quoted back): /healthz, which any local user
	// can ask, says the state and leaves the problems to the log.
	h.write("bad.yaml", "nodes:\n  - name: Bad_Name_s3cret\n")
	h.waitFor(mark, "reporting the invalid tree", is(TriggerFiles, OutcomeInvalid))
	code, body := get(t, base+"/healthz")
	if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "invalid:") || strings.Contains(body, "s3cret") || strings.Contains(body, "bad.yaml") {
		t.Errorf("/healthz with an invalid tree: %d %q; want 503 saying invalid, and no problem's text", code, body)
	}
	_, metrics := get(t, base+"/metrics")
	for _, want := range []string{
		`meshctl_watch_reconciles_total{outcome="ok"} 1`,
		`meshctl_watch_reconciles_total{outcome="invalid"} 1`,
		`meshctl_watch_reconciles_total{outcome="error"} 0`,
		`meshctl_watch_invalid_trees_total 1`,
		`meshctl_watch_reconcile_duration_seconds_count 2`,
		`meshctl_watch_last_success_timestamp_seconds `,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// Not parallel: goleak compares every goroutine in the process, and a test running beside
// this one would count as a leak. Parallel tests wait until the sequential ones are done.
//
// No goroutine needs ignoring: Session.Close waits for the embedded nats-server to shut
// down, and what nats.go's closed connections leave running ends within goleak's retries.
func TestShutdownLeavesNoGoroutineBehind(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	addr := make(chan string, 1)
	h := startWatch(t, quickstart(t), func(c *Config) {
		c.MetricsAddr = "127.0.0.1:0"
		c.metricsReady = func(a string) { addr <- a }
	})
	base := "http://" + <-addr
	h.waitFor(0, "applying the quickstart at start", is(TriggerStart, OutcomeOK))
	get(t, base+"/healthz")
	h.write("audit.yaml", auditModule)
	h.stop()
}
