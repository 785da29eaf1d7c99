package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/meshbus/meshctl/controller"
	"github.com/meshbus/meshctl/internal/backoff"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/state"
)

// Defaults for the zero values of Config.
const (
	DefaultDebounce = 500 * time.Millisecond
	DefaultResync   = time.Minute
	DefaultPoll     = 2 * time.Second
	DefaultRetryMin = time.Second
	DefaultRetryMax = 30 * time.Second
	DefaultTimeout  = 10 * time.Minute
)

// maxDebounceFactor bounds how long a stream of changes can put a reconcile off: at most
// this many debounce intervals after the first change of a burst. Without it, a file
// rewritten every few hundred milliseconds would hold every edit back forever.
const maxDebounceFactor = 10

// Config says what to watch and how often to reconcile.
type Config struct {
	// Dir is the directory of the mesh description, watched recursively.
	Dir string
	// StateDir is meshctl's state directory: the store, and the embedded bus watch serves.
	StateDir string
	// Cost is the bcrypt cost of a controller credential minted on first use.
	Cost int
	// Debounce is how long the tree must stay quiet after a change before it is reconciled.
	Debounce time.Duration
	// Resync is how often the bus is reconciled when nothing changed, to heal drift.
	Resync time.Duration
	// Poll is how often the tree is scanned when inotify cannot watch it.
	Poll time.Duration
	// RetryMin and RetryMax bound the backoff after a failed reconcile (a bus that is
	// down): the wait doubles from RetryMin after each failure, up to RetryMax.
	RetryMin, RetryMax time.Duration
	// Timeout bounds one reconcile, lock wait included.
	Timeout time.Duration
	// Logger receives one line per reconcile and what an operator should know besides;
	// nil discards it.
	Logger *slog.Logger
	// MetricsAddr, when set, is the host:port serving /metrics (Prometheus) and /healthz.
	MetricsAddr string
	// Hup delivers SIGHUP: reload the embedded bus, then reconcile now. The caller
	// subscribes it (signal.Notify) before Run, so that no SIGHUP sent once the bus is up
	// finds the process without a handler; tests send on it directly.
	Hup <-chan os.Signal
	// OnCycle, when set, is told each reconcile's outcome, on the loop's goroutine: it must
	// not block. Tests wait on it instead of on time.
	OnCycle func(Cycle)

	// ControllerBound and ControllerRetry are the controller's store window (controller.Config's
	// Bound and Retry); zero takes the controller's defaults.
	ControllerBound, ControllerRetry time.Duration
	// OnController, when set, is told what the controller loop did, on its goroutine (tests).
	OnController func(controller.Event)

	// heartbeatEvery and heartbeatTick are the heartbeat file's rate (HeartbeatRecordEvery and
	// its tick unless a test shortens them).
	heartbeatEvery, heartbeatTick time.Duration
	// metricsReady is told the metrics server's address once it listens (tests).
	metricsReady func(addr string)
	// addWatch adds an inotify watch; tests replace it to run out of watches.
	addWatch addWatchFunc
	// onHeard is told how each advisory heard was judged: the reconcile's own, or drift (tests).
	onHeard func(o heardObject, own bool)
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Debounce, DefaultDebounce)
	def(&c.Resync, DefaultResync)
	def(&c.Poll, DefaultPoll)
	def(&c.RetryMin, DefaultRetryMin)
	def(&c.RetryMax, DefaultRetryMax)
	def(&c.Timeout, DefaultTimeout)
	def(&c.heartbeatEvery, HeartbeatRecordEvery)
	def(&c.heartbeatTick, heartbeatTick)
	c.RetryMax = max(c.RetryMax, c.RetryMin)
	if c.Cost == 0 {
		c.Cost = state.DefaultCost
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.addWatch == nil {
		c.addWatch = fsnotifyAdd
	}
	return c
}

// Outcome is how a reconcile ended.
type Outcome string

// The outcomes, as the reconciles_total metric labels them.
const (
	OutcomeOK      Outcome = "ok"      // changes were applied
	OutcomeNoop    Outcome = "noop"    // the bus was in sync
	OutcomeInvalid Outcome = "invalid" // the description does not validate; nothing was applied
	OutcomeRefused Outcome = "refused" // the plan loses data or deletes most of the mesh; nothing was applied
	// OutcomeConflict: objects meshctl does not own are in the way; everything else was
	// applied, and they are reported again every cycle until someone resolves them.
	OutcomeConflict Outcome = "conflict"
	// OutcomeError: the bus could not be reached, an apply failed, or a server does not serve
	// the accounts config written for it; retried.
	OutcomeError Outcome = "error"
)

var outcomes = []Outcome{OutcomeOK, OutcomeNoop, OutcomeInvalid, OutcomeRefused, OutcomeConflict, OutcomeError}

// Trigger is what started a reconcile. Causes that arrive while one runs merge into the
// next, so a Trigger can hold several.
type Trigger uint16

// The triggers.
const (
	TriggerStart  Trigger = 1 << iota // watch started
	TriggerFiles                      // a file of the description changed
	TriggerResync                     // the resync interval passed
	TriggerSignal                     // SIGHUP
	TriggerRetry                      // the backoff after a failed reconcile ran out

	// triggerReload marks a SIGHUP that found no embedded bus to reload (one was starting):
	// the reconcile it causes reloads first, or the accounts file another command wrote
	// would sit on disk, equal to the rendering, and never be loaded.
	triggerReload
)

var triggerNames = []struct {
	t    Trigger
	name string
}{{TriggerStart, "start"}, {TriggerFiles, "files"}, {TriggerResync, "resync"}, {TriggerSignal, "sighup"}, {TriggerRetry, "retry"},
	{TriggerController, "controller"}, {TriggerAdvisory, "advisory"}, {TriggerGrace, "grace"}}

// Has reports whether t holds any of u's causes.
func (t Trigger) Has(u Trigger) bool { return t&u != 0 }

// String names the causes, joined by '+': "files+sighup".
func (t Trigger) String() string {
	var names []string
	for _, n := range triggerNames {
		if t.Has(n.t) {
			names = append(names, n.name)
		}
	}
	return strings.Join(names, "+")
}

// drift reports whether changes planned under t are drift: made on the bus behind watch's
// back, since neither a change of the description, the first look at the bus, the controller
// nor the end of a former holder's grace caused them.
func (t Trigger) drift() bool {
	return !t.Has(TriggerStart | TriggerFiles | TriggerController | TriggerGrace)
}

// Cycle is one reconcile: why it ran and how it ended.
type Cycle struct {
	Trigger Trigger
	Outcome Outcome
	// Plan is what the reconcile planned; nil when it got no further than loading the
	// description or reaching the bus.
	Plan *plan.Plan
	// Applied is how many of the plan's changes were made.
	Applied int
	// Drift is how many changes were planned by a cycle no file change caused.
	Drift int
	// Err is why the cycle was not ok or noop: a *model.LoadError for an invalid
	// description, an error wrapping reconcile.ErrBlocked for a refusal.
	Err      error
	Duration time.Duration
	// GraceEnds is when the first grace of a seat's former holder still running ends
	// (reconcile.Result); zero when none runs or the cycle could not say. Watch reconciles then.
	GraceEnds time.Time
}

// Run reconciles the bus with the description in c.Dir until ctx ends, then stops
// everything it started and returns nil. It returns an error only when it cannot start:
// the directory or the state store cannot be opened, or the metrics address is taken.
func Run(ctx context.Context, c Config) error {
	c = c.withDefaults()
	if err := checkDirs(c); err != nil {
		return err
	}
	store, err := state.Open(c.StateDir)
	if err != nil {
		return err
	}
	defer store.Close()

	m := newMetrics()
	if c.MetricsAddr != "" {
		srv, err := serveMetrics(c, m)
		if err != nil {
			return err
		}
		defer srv.stop()
	}

	// One slot is enough: the loop only needs to know that something changed since it
	// last looked, and the debounce timer starts from the latest notice either way.
	changes := make(chan struct{}, 1)
	tree, err := startTreeWatcher(c.Dir, c.Poll, c.Logger, c.addWatch, func(path string) {
		c.Logger.Debug("description changed", "path", path)
		select {
		case changes <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return err
	}
	// Asked before run starts: from then on the watcher belongs to its goroutine.
	c.Logger.Info("watching the mesh description", "dir", c.Dir, "mode", tree.mode(),
		"debounce", c.Debounce, "resync", c.Resync, "state", c.StateDir)
	// Stopped after the loop, not with ctx: the loop may still be finishing a reconcile.
	stopTree := background(tree.run)
	defer stopTree()

	// Stopped after the loop too, so it never looks for a controller the loop is stopping.
	stopBeats := background(func(ctx context.Context) {
		recordHeartbeats(ctx, c.StateDir, c.heartbeatEvery, c.heartbeatTick, m.controller.Load,
			func(format string, args ...any) { c.Logger.Warn(fmt.Sprintf(format, args...)) })
	})
	defer stopBeats()

	refused := newRefusals(c.Logger, m.reg)
	stopRecording := background(func(ctx context.Context) { refused.record(ctx, store) })
	defer stopRecording()
	dead := newDeadLetters(c.Logger, m.reg)
	stopCounting := background(func(ctx context.Context) { dead.record(ctx, store) })
	defer stopCounting()

	l := &loop{cfg: c, log: c.Logger, store: store, metrics: m, refusals: refused, deadLetters: dead, changes: changes, syncs: make(chan chan error),
		hearing: newHearing(c.onHeard),
		state:   newStateRecorder(c.StateDir, func(format string, args ...any) { c.Logger.Warn(fmt.Sprintf(format, args...)) })}
	l.cycles = &reconcile.Cycles{StateDir: c.StateDir, Options: l.sessionOptions}
	l.lead(ctx)
	l.state.stopped(time.Now())
	c.Logger.Info("stopped")
	return nil
}

// checkDirs refuses a Config without a description directory or a state directory, or whose
// description directory is not one.
func checkDirs(c Config) error {
	if c.Dir == "" || c.StateDir == "" {
		return errors.New("watch: a description directory and a state directory are required")
	}
	info, err := os.Stat(c.Dir)
	if err != nil {
		return fmt.Errorf("watching the mesh description: %w", err)
	}
	if !info.IsDir() {
		return fmt.Errorf("watching the mesh description: %s is not a directory", c.Dir)
	}
	return nil
}

// serveMetrics starts the metrics server on c.MetricsAddr and says where it listens.
func serveMetrics(c Config, m *metrics) (*metricsServer, error) {
	srv, err := startMetricsServer(c.MetricsAddr, m, c.Logger)
	if err != nil {
		return nil, err
	}
	c.Logger.Info("serving metrics", "metrics", "http://"+srv.addr+"/metrics", "healthz", "http://"+srv.addr+"/healthz")
	if c.metricsReady != nil {
		c.metricsReady(srv.addr)
	}
	return srv, nil
}

// background runs f on a goroutine of its own, under a context of its own rather than Run's;
// the returned stop cancels that context and waits for f to return.
func background(f func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// loop is the state of the watch loop, owned by the goroutine in run.
type loop struct {
	cfg     Config
	log     *slog.Logger
	store   *state.Store
	metrics *metrics
	// refusals are what the embedded bus refused, counted, explained and recorded.
	refusals *refusals
	// deadLetters are the messages the bus announced past their consumer's max_deliver.
	deadLetters *deadLetters
	changes     <-chan struct{}

	// embedded is shared with the reconcile goroutine, which starts and stops the bus.
	embedded embeddedBus
	// cycles runs the reconciles and keeps their session (reconcile.Cycles); conn is what
	// watch keeps beside that session. Both belong to the loop between reconciles and to the
	// reconcile while one runs: they are handed over with the start of a reconcile and handed
	// back with its result.
	cycles *reconcile.Cycles
	conn   *connection

	// The controller loop beside this one, and its requests for a reconcile (see controller.go).
	ctl   *controllerSide
	syncs chan chan error

	// The advisories heard on the connection (see advisory.go).
	hearing *hearing
	// state keeps STATE/watch.json, the state the reconciles left, for meshctl status.
	state *stateRecorder
	// owned, while this watch leads a bus that keeps the store, says whether it still does
	// (lead.go); nil otherwise. needsLead is set when a cycle of a watch that does not lead
	// found that it must (errNeedsLead), which ends the loop.
	owned     func() error
	needsLead bool
}

// cycleResult is a finished reconcile, and the connection it hands back.
type cycleResult struct {
	cycle Cycle
	conn  *connection
}

// schedule is the loop's state between its events, owned by run's goroutine.
type schedule struct {
	running  bool
	queued   Trigger   // causes waiting for the reconcile in flight to end
	owed     Trigger   // causes of failed reconciles, carried into the retry
	failures int       // consecutive failed reconciles, for the backoff
	burst    time.Time // first change of the burst the debounce timer waits out; zero when none
	// The controller's requests for a reconcile: waiting for the next to start, and
	// answered when the one in flight ends.
	syncsWaiting, syncsInFlight []chan error
	debounce, retry             *time.Timer
	// grace fires when the first grace of a seat's former holder ends (Cycle.GraceEnds).
	grace   *time.Timer
	results chan cycleResult
}

// run is the loop. It returns when ctx ends, once the reconcile in flight has returned and
// the connection (and the embedded bus with it) is closed.
func (l *loop) run(ctx context.Context) {
	resync := time.NewTicker(l.cfg.Resync)
	defer resync.Stop()
	s := &schedule{debounce: stoppedTimer(), retry: stoppedTimer(), grace: stoppedTimer(), results: make(chan cycleResult, 1)}
	defer s.debounce.Stop()
	defer s.retry.Stop()
	defer s.grace.Stop()
	defer l.shutdown(s)

	l.request(ctx, s, TriggerStart)
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.changes:
			now := time.Now()
			if s.burst.IsZero() {
				s.burst = now
			}
			wait := min(l.cfg.Debounce, time.Until(s.burst.Add(maxDebounceFactor*l.cfg.Debounce)))
			s.debounce.Reset(max(wait, 0))
		case <-s.debounce.C:
			s.burst = time.Time{}
			l.request(ctx, s, TriggerFiles)
		case <-resync.C:
			// A change waiting out its debounce is reconciled within moments anyway, and a
			// resync now would read a burst half written.
			if s.burst.IsZero() {
				l.request(ctx, s, TriggerResync)
			}
		case <-l.cfg.Hup:
			l.request(ctx, s, l.hup(s))
		case <-s.retry.C:
			l.request(ctx, s, TriggerRetry|s.owed)
		case <-s.grace.C:
			l.request(ctx, s, TriggerGrace)
		case <-l.hearing.queue.signal:
			l.heard(s.running)
		case <-l.hearing.debounce.C:
			l.hearing.burst = time.Time{}
			l.request(ctx, s, TriggerAdvisory)
		case reply := <-l.syncs:
			s.syncsWaiting = append(s.syncsWaiting, reply)
			l.request(ctx, s, TriggerController)
		case r := <-s.results:
			if !l.finished(ctx, s, r) {
				return
			}
		}
	}
}

// request asks for a reconcile for t's causes: started at once when none runs, and otherwise
// when the one in flight ends, with every cause asked for meanwhile.
func (l *loop) request(ctx context.Context, s *schedule, t Trigger) {
	s.queued |= t
	if !s.running {
		l.start(ctx, s, s.queued)
		s.queued = 0
	}
}

// start starts a reconcile for t on a goroutine of its own, handing it the connection and
// the controller's requests it answers.
func (l *loop) start(ctx context.Context, s *schedule, t Trigger) {
	s.running = true
	s.syncsInFlight, s.syncsWaiting = s.syncsWaiting, nil
	conn, results := l.conn, s.results
	l.conn = nil
	go func() {
		cycle, conn := l.cycle(ctx, conn, t)
		results <- cycleResult{cycle, conn}
	}()
}

// hup is what a SIGHUP asks for. It reloads the embedded bus first: another meshctl wrote the
// accounts file and waits for it to be live. This happens here, not in the reconcile, so that
// it is never held up behind a reconcile in flight.
func (l *loop) hup(s *schedule) Trigger {
	t := TriggerSignal
	if reloaded, err := l.embedded.reload(); err != nil {
		l.log.Error("SIGHUP: reloading the embedded bus failed; it keeps the config it had", "error", err)
	} else if reloaded {
		l.log.Info("SIGHUP: reloaded the embedded bus")
	} else {
		t |= triggerReload
	}
	if !s.burst.IsZero() {
		// The reconcile reads the tree afresh, so it takes the pending change with it.
		s.debounce.Stop()
		s.burst = time.Time{}
		t |= TriggerFiles
	}
	return t
}

// finished takes the result of the reconcile that ended: it arms the backoff after a failure,
// reports the cycle, answers the controller, hands it the bus, and starts what was asked for
// meanwhile. It returns false when the loop must end: the cycle found that this watch must
// take the lead first (errNeedsLead).
func (l *loop) finished(ctx context.Context, s *schedule, r cycleResult) bool {
	s.running = false
	l.conn = r.conn
	if errors.Is(r.cycle.Err, errNeedsLead) {
		l.needsLead = true
		return false
	}
	var retryIn time.Duration
	if r.cycle.Outcome == OutcomeError && ctx.Err() == nil {
		s.failures++
		s.owed |= r.cycle.Trigger &^ TriggerRetry
		retryIn = backoff.After(l.cfg.RetryMin, l.cfg.RetryMax, s.failures)
		s.retry.Reset(retryIn)
	} else {
		s.failures, s.owed = 0, 0
		s.retry.Stop()
	}
	if !r.cycle.GraceEnds.IsZero() {
		// At that moment, not at the next resync: until then the former holder may still
		// acknowledge work the server has since handed to the new holder. A timer left armed
		// for a grace that was cut short costs one reconcile that finds nothing to do.
		s.grace.Reset(time.Until(r.cycle.GraceEnds))
	}
	l.report(r.cycle, retryIn)
	answerSyncs(s.syncsInFlight, r.cycle)
	s.syncsInFlight = nil
	l.withController(ctx, r)
	l.afterCycle(r)
	if s.queued != 0 {
		l.start(ctx, s, s.queued)
		s.queued = 0
	}
	return true
}

// shutdown ends the loop: it waits for the reconcile in flight, answers the controller's
// requests left, stops the controller, and closes the connection and the session, the
// embedded bus with it.
func (l *loop) shutdown(s *schedule) {
	if s.running {
		r := <-s.results
		l.conn = r.conn
		if r.cycle.Err != nil {
			l.log.Warn("reconcile abandoned: shutting down", "trigger", r.cycle.Trigger.String(), "error", r.cycle.Err)
		} else {
			l.report(r.cycle, 0)
		}
	}
	answerSyncs(append(s.syncsInFlight, s.syncsWaiting...), Cycle{Outcome: OutcomeError, Err: errStopping})
	if l.ctl != nil {
		l.ctl.stop()
		l.ctl = nil
	}
	if l.conn != nil {
		l.disconnect(l.conn)
		l.conn = nil
	}
	l.cycles.Close()
}

// stoppedTimer is a timer that has not been armed: Reset arms it.
func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// maxLoggedChanges bounds the objects one log line names; the summary counts them all.
const maxLoggedChanges = 10

// report records a finished reconcile in the metrics, the health answer and the state file,
// tells OnCycle, and logs it: one line saying what changed, or why nothing did.
func (l *loop) report(c Cycle, retryIn time.Duration) {
	l.metrics.observe(c)
	l.state.cycle(l.cfg.Dir, c, time.Now())
	// Told last, so that whoever waits on it finds the metrics, health and log up to date.
	if l.cfg.OnCycle != nil {
		defer l.cfg.OnCycle(c)
	}
	attrs := []any{"trigger", c.Trigger.String(), "outcome", string(c.Outcome), "duration", c.Duration.Round(time.Millisecond)}
	if c.Plan != nil && !c.Plan.Empty() {
		s := c.Plan.Summary()
		attrs = append(attrs, "create", s.Create, "update", s.Update, "replace", s.Replace, "delete", s.Delete)
		if s.Conflict > 0 || s.Refused > 0 {
			attrs = append(attrs, "conflict", s.Conflict, "refused", s.Refused)
		}
		attrs = append(attrs, "changes", changeIDs(c.Plan))
	}
	if c.Plan != nil && len(c.Plan.Holders) > 0 {
		attrs = append(attrs, "holder_moves", len(c.Plan.Holders))
	}
	if c.Drift > 0 {
		attrs = append(attrs, "drift", c.Drift)
	}
	switch c.Outcome {
	case OutcomeOK:
		l.log.Info("reconciled: changes applied", append(attrs, "applied", c.Applied)...)
	case OutcomeNoop:
		l.log.Info("in sync: nothing to change", attrs...)
	case OutcomeInvalid:
		probs := problems(l.cfg.Dir, c.Err)
		l.log.Error("the description is invalid: nothing was applied and the last good state stays live",
			append(attrs, "problems", probs)...)
	case OutcomeConflict:
		l.log.Error("objects meshctl does not own are in the way: they and what depends on them are left alone, everything else was applied; rename or remove them, or mark them deliberately",
			append(attrs, "applied", c.Applied, "error", c.Err.Error())...)
	case OutcomeRefused:
		l.log.Error("the plan is refused: nothing was applied; review it with `meshctl diff`, resolve the conflict or apply the loss by hand if it is meant",
			append(attrs, "error", c.Err.Error())...)
	default:
		attrs = append(attrs, "error", c.Err.Error())
		if retryIn > 0 {
			attrs = append(attrs, "retry_in", retryIn)
		}
		if c.Applied > 0 {
			attrs = append(attrs, "applied", c.Applied)
		}
		l.log.Error("reconcile failed", attrs...)
	}
}

// changeIDs names the plan's changes, the first maxLoggedChanges of them.
func changeIDs(p *plan.Plan) []string {
	var out []string
	for i, c := range p.Changes {
		if i == maxLoggedChanges {
			out = append(out, fmt.Sprintf("… and %d more", len(p.Changes)-i))
			break
		}
		out = append(out, string(c.Action)+" "+c.ID())
	}
	return out
}

// problems lists a load error's diagnostics as file:line:col: message, the file named as
// the operator wrote the directory so an editor opens it as printed.
func problems(dir string, err error) []string {
	var lerr *model.LoadError
	if !errors.As(err, &lerr) {
		return []string{err.Error()}
	}
	out := make([]string, len(lerr.Diagnostics))
	for i, d := range lerr.Diagnostics {
		if d.Pos.File != "" && dir != "." {
			d.Pos.File = filepath.Join(dir, d.Pos.File)
		}
		out[i] = d.String()
	}
	if more := lerr.Omitted(); more > 0 {
		out = append(out, fmt.Sprintf("… and %d more problem(s)", more))
	}
	return out
}
