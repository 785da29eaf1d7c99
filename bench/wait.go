package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/bench/meshgen"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// What a user waits for: whole meshctl processes, the built binary, timed from the exec to
// the exit, each run interleaved with the bare-client floor it is compared with.

// The rows of the user-wait table, in the order they are measured and reported.
const (
	wOneShot      = "oneshot"       // one-shot first apply on the embedded default, total wait
	wOneShotStop  = "oneshot-stop"  // of which: from "applied" on stderr to the exit (the bus's stop)
	wFloorCreate  = "floor-create"  // bare client, concurrent create, beside the one-shot runs
	wWatchApply   = "watch-apply"   // first apply with watch serving the bus
	wFloorCreate2 = "floor-create2" // bare client, concurrent create, beside the watch-serving runs
	wFloorServed  = "floor-served"  // the same, on a bus another process serves, as watch does
	wDiff         = "diff"          // converged diff, watch serving
	wFloorList    = "floor-list"    // bare client, paged list of watch's bus, as the controller
	wApply        = "apply"         // converged apply, watch serving: zero mutating calls
	wOneChange    = "one-change"    // one module follows one more event (and back), watch serving
	wHeal         = "heal"          // a consumer deleted by hand, recreated by the running watch
)

// series is one row: a duration and a peak RSS per run.
type series struct {
	times []time.Duration
	rss   []int64 // 0 where no process of its own ran (the heal, the stop)
}

func (s *series) add(d time.Duration, rss int64) {
	s.times = append(s.times, d)
	s.rss = append(s.rss, rss)
}

func (s *series) median() time.Duration {
	if s == nil || len(s.times) == 0 {
		return 0
	}
	t := slices.Clone(s.times)
	slices.Sort(t)
	if len(t)%2 == 1 {
		return t[len(t)/2]
	}
	return (t[len(t)/2-1] + t[len(t)/2]) / 2
}

func (s *series) spread() (time.Duration, time.Duration) {
	return slices.Min(s.times), slices.Max(s.times)
}

func (s *series) peak() int64 { return slices.Max(s.rss) }

// waitResult is every row at one size.
type waitResult struct {
	size int
	rows map[string]*series
}

func (w *waitResult) row(id string) *series {
	if w.rows[id] == nil {
		w.rows[id] = &series{}
	}
	return w.rows[id]
}

// waitTimeout bounds one process, a one-shot apply's stop included (about 10 ms a consumer
// on nats-server 2.15.2: minutes at 20,000 instances).
const waitTimeout = 30 * time.Minute

// waitAt is the result at size n in waits, added in order of size when there is none yet:
// the embedded rows and the external server's rows of one size are one table's.
func waitAt(waits *[]*waitResult, n int) *waitResult {
	i, found := slices.BinarySearchFunc(*waits, n, func(w *waitResult, n int) int { return w.size - n })
	if !found {
		*waits = slices.Insert(*waits, i, &waitResult{size: n, rows: map[string]*series{}})
	}
	return (*waits)[i]
}

// buildMeshctl builds the meshctl binary the user-wait rows run, into tmp.
func buildMeshctl(ctx context.Context, tmp string, log io.Writer) (string, error) {
	meshctl := filepath.Join(tmp, "meshctl")
	fmt.Fprintf(log, "building meshctl\n")
	build := exec.CommandContext(ctx, "go", "build", "-o", meshctl, "github.com/meshbus/meshctl/cmd/meshctl")
	build.Stdout, build.Stderr = log, log
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building meshctl: %w", err)
	}
	return meshctl, nil
}

// newWaitRunner is a runner of rows into res, its files in the directory dir under tmp.
func newWaitRunner(ctx context.Context, meshctl, tmp, dir string, runs int, log io.Writer, res *waitResult) (*waitRunner, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return &waitRunner{ctx: ctx, meshctl: meshctl, self: self, dir: filepath.Join(tmp, dir),
		spent: filepath.Join(tmp, spentDir), log: log, runs: runs, res: res}, nil
}

// measureWaits runs the user-wait rows on the embedded bus at each size, runs times each,
// into waits.
func measureWaits(ctx context.Context, sizes []int, runs int, meshctl, tmp string, log io.Writer, waits *[]*waitResult) error {
	return measureSizes(ctx, sizes, runs, meshctl, tmp, log, waits, "wait", "what a user waits for,", (*waitRunner).run)
}

// measureSizes calls run at each size with a runner of its own, its files in kind-N under
// tmp, its rows into waits; an error is prefixed with what, followed by "at N instances".
func measureSizes(ctx context.Context, sizes []int, runs int, meshctl, tmp string, log io.Writer, waits *[]*waitResult,
	kind, what string, run func(r *waitRunner, n int) error) error {
	for _, n := range sizes {
		r, err := newWaitRunner(ctx, meshctl, tmp, fmt.Sprintf("%s-%d", kind, n), runs, log, waitAt(waits, n))
		if err != nil {
			return err
		}
		if err := run(r, n); err != nil {
			return fmt.Errorf("%s at %d instances: %w", what, n, err)
		}
	}
	return nil
}

type waitRunner struct {
	ctx     context.Context
	meshctl string
	self    string
	dir     string
	spent   string // where finished runs' stores are put aside (spend)
	log     io.Writer
	runs    int
	res     *waitResult
	nspent  int
}

// spentDir, under the bench's temporary directory, holds the stores of finished runs until
// the bench ends.
const spentDir = "spent"

// spend puts a finished run's store or directory aside, into r.spent, rather than removing
// it: the next run must not pay for the removal of this one's hundred thousand files. On
// ext4 without a journal the inode allocator skips every inode freed in the last minute or
// more (ialloc.c, recently_deleted), and a run of 20,000 instances that started right after
// its predecessor's store was removed took three times as long. Everything
// spent goes with the bench's temporary directory, at its end.
func (r *waitRunner) spend(path string) error {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := os.MkdirAll(r.spent, 0o755); err != nil {
		return err
	}
	r.nspent++
	return os.Rename(path, filepath.Join(r.spent, fmt.Sprintf("%s-%d-%s", filepath.Base(r.dir), r.nspent, filepath.Base(path))))
}

// generated is a mesh written for a run of rows: what it was generated from, its directory,
// the description and its derivation.
type generated struct {
	g    meshgen.Mesh
	desc string
	m    *model.Mesh
	d    *render.Desired
}

// generate writes the mesh of n instances that configure (if any) sets up into r.dir/mesh.
func (r *waitRunner) generate(n int, configure func(*meshgen.Mesh)) (generated, error) {
	g := meshgen.Scaled(n)
	if configure != nil {
		configure(&g)
	}
	x := generated{g: g, desc: filepath.Join(r.dir, "mesh")}
	if err := g.Write(x.desc); err != nil {
		return x, err
	}
	m, err := model.Parse(g.Files())
	if err != nil {
		return x, err
	}
	x.m, x.d = m, render.Derive(m)
	return x, nil
}

// onFreePort generates a mesh whose embedded bus listens on a free port.
func (r *waitRunner) onFreePort(n int, configure func(*meshgen.Mesh)) (generated, error) {
	port, err := freePort()
	if err != nil {
		return generated{}, err
	}
	return r.generate(n, func(g *meshgen.Mesh) {
		g.Listen = fmt.Sprintf("127.0.0.1:%d", port)
		if configure != nil {
			configure(g)
		}
	})
}

// run measures every user-wait row at n instances: the one-shot first applies, the first
// applies with watch serving the bus, then, with watch serving the last run's store, the
// converged rows and the heal.
func (r *waitRunner) run(n int) error {
	x, err := r.onFreePort(n, nil)
	if err != nil {
		return err
	}
	d := x.d
	fmt.Fprintf(r.log, "what a user waits for at %s instances (%d streams, %d consumers, %d principals), %d runs each\n",
		num(n), len(d.Streams), len(d.Consumers), len(d.Principals), r.runs)
	if err := r.oneShotApplies(x.desc); err != nil {
		return err
	}
	watched := filepath.Join(r.dir, "watched")
	if err := r.watchServedApplies(x, watched); err != nil {
		return err
	}
	state := filepath.Join(r.dir, fmt.Sprintf("watch-%d", r.runs-1))
	fmt.Fprintf(r.log, "  starting watch on the last run's store\n")
	w, err := r.startWatch(watched, state)
	if err != nil {
		return err
	}
	defer w.kill()
	// The writeback of the stores the floors just made would otherwise land in the first
	// converged rows, and in meshctl's more than the floor's: it has more to do beside it.
	syscall.Sync()
	if err := r.watchedConverged(x, w, watched, state); err != nil {
		return err
	}
	return r.heals(x, w, state)
}

// oneShotApplies times runs one-shot first applies of desc on the embedded default, each
// from an empty state directory, each followed by the bare client's create on a bus of its
// own.
func (r *waitRunner) oneShotApplies(desc string) error {
	for i := range r.runs {
		state := filepath.Join(r.dir, fmt.Sprintf("oneshot-%d", i))
		syscall.Sync()
		p, err := r.meshctlRun("apply", "-f", desc, "--state", state)
		if err != nil {
			return err
		}
		applied, ok := p.lineAt("applied ")
		if !ok {
			return fmt.Errorf("the one-shot apply printed no \"applied\" line:\n%s", p.stderr)
		}
		r.res.row(wOneShot).add(p.wall, p.peak)
		r.res.row(wOneShotStop).add(p.wall-applied, 0)
		r.progress(wOneShot, i, p.wall, p.peak, fmt.Sprintf("(stop %s)", (p.wall-applied).Round(time.Millisecond)))
		if err := r.spend(state); err != nil {
			return err
		}
		if err := r.floorCreate(wFloorCreate, desc, i); err != nil {
			return err
		}
	}
	return nil
}

// watchServedApplies times runs first applies of x with watch serving the bus, each followed
// by the bare client's create on a bus of its own and on a bus another process serves. The
// last run's store, under watched, is kept for the rows after.
//
// A watch per run, from a description of one node, then the whole mesh written into its
// directory and applied by a one-shot apply. Its --debounce is an hour, so that the
// description written is applied by the apply measured, not by watch; the apply has watch
// reload the bus over its control socket, which starts no reconcile of watch's. Each watch
// is killed once its apply is timed (its slow stop is not waited for), before the floors
// run: the advisories of the apply's stream updates have it reconcile the whole mesh
// afterwards, which would run beside the floors.
func (r *waitRunner) watchServedApplies(x generated, watched string) error {
	var w *watchProc
	defer func() {
		if w != nil {
			w.kill()
		}
	}()
	for i := range r.runs {
		state := filepath.Join(r.dir, fmt.Sprintf("watch-%d", i))
		if err := r.spend(watched); err != nil {
			return err
		}
		if err := writeOneNode(watched, x.g.Listen, x.m.Nodes[0].Name); err != nil {
			return err
		}
		var err error
		if w, err = r.startWatch(watched, state); err != nil {
			return err
		}
		if err := x.g.Write(watched); err != nil {
			return err
		}
		syscall.Sync()
		p, err := r.meshctlRun("apply", "-f", watched, "--state", state)
		if err != nil {
			return err
		}
		w.kill()
		w = nil
		r.res.row(wWatchApply).add(p.wall, p.peak)
		r.progress(wWatchApply, i, p.wall, p.peak, "")
		if err := r.floorCreate(wFloorCreate2, x.desc, i); err != nil {
			return err
		}
		if err := r.floorServedCreate(wFloorServed, x.desc, i); err != nil {
			return err
		}
		if i < r.runs-1 {
			if err := r.spend(state); err != nil {
				return err
			}
		}
	}
	return nil
}

// watchedConverged times the converged diff (beside the paged-list floor), the converged
// apply and one change of x, described in desc, with w serving the bus from state.
func (r *waitRunner) watchedConverged(x generated, w *watchProc, desc, state string) error {
	if err := r.convergedDiffs(wDiff, wFloorList, desc, state, busclient.Target{URL: "nats://" + x.g.Listen}, len(x.d.Streams)+len(x.d.Consumers)); err != nil {
		return err
	}
	// A converged apply must not make watch reconcile: it wrote no accounts config.
	if err := r.convergedApplies(wApply, desc, state, func() (func() error, error) {
		mark := w.mark()
		return func() error {
			if c := w.since(mark); len(c) > 0 {
				return fmt.Errorf("a converged apply made watch reconcile (%s): it changed something on the bus", c[0].Trigger)
			}
			return nil
		}, nil
	}); err != nil {
		return err
	}
	return r.oneChanges(wOneChange, x.g, desc, state, nil)
}

// heals times runs consumers of x's events stream deleted by hand, a different one each
// run, until w, running from state, has recreated them.
func (r *waitRunner) heals(x generated, w *watchProc, state string) error {
	nc, err := dialController(r.ctx, busclient.Target{URL: "nats://" + x.g.Listen}, filepath.Join(state, "controller.password"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	var victims []render.Consumer
	for _, c := range x.d.Consumers {
		if c.Stream == render.StreamEvents && c.Name() != render.ControllerUser {
			victims = append(victims, c)
		}
	}
	for i := range r.runs {
		if len(victims) == 0 {
			break
		}
		c := victims[i*len(victims)/r.runs]
		mark := w.mark()
		took, err := healed(r.ctx, js, c.Stream, c.Name())
		if err != nil {
			return err
		}
		r.res.row(wHeal).add(took, 0)
		r.progress(wHeal, i, took, 0, c.Stream+"/"+c.Name())
		if _, err := w.await(mark, "the reconcile the deletion caused", func(c watchCycle) bool { return c.Outcome == "ok" }); err != nil {
			return err
		}
	}
	return nil
}

// measureConverged runs only the converged rows with watch serving — diff, apply, one change,
// each beside the paged-list floor — at each size, runs times each, into waits: the rows a mesh
// in production pays at every change, without the first applies that set a size up (minutes
// each at 20,000 instances).
func measureConverged(ctx context.Context, sizes []int, runs int, meshctl, tmp string, log io.Writer, waits *[]*waitResult) error {
	return measureSizes(ctx, sizes, runs, meshctl, tmp, log, waits, "converged", "the converged rows", (*waitRunner).runConverged)
}

func (r *waitRunner) runConverged(n int) error {
	x, err := r.onFreePort(n, nil)
	if err != nil {
		return err
	}
	g, desc, d := x.g, x.desc, x.d
	fmt.Fprintf(r.log, "the converged rows at %s instances, watch serving (its first apply is the setup), %d runs each\n", num(n), r.runs)
	state := filepath.Join(r.dir, "state")
	w, err := r.startWatch(desc, state)
	if err != nil {
		return err
	}
	defer func() { w.kill() }()
	syscall.Sync()
	if err := r.convergedDiffs(wDiff, wFloorList, desc, state, busclient.Target{URL: "nats://" + g.Listen}, len(d.Streams)+len(d.Consumers)); err != nil {
		return err
	}
	if err := r.convergedApplies(wApply, desc, state, nil); err != nil {
		return err
	}
	return r.oneChanges(wOneChange, g, desc, state, nil)
}

// runCheck, called before a run, returns what must hold after it.
type runCheck func() (after func() error, err error)

// convergedDiffs times the converged diff of desc runs times into row id, each run followed
// by the bare client's paged list of the same bus, as the controller, into row floor: the
// list must find every one of the mesh's objects.
func (r *waitRunner) convergedDiffs(id, floor, desc, state string, t busclient.Target, objects int) error {
	for i := range r.runs {
		p, err := r.meshctlRun("diff", "-f", desc, "--state", state)
		if err != nil {
			return err
		}
		r.res.row(id).add(p.wall, p.peak)
		r.progress(id, i, p.wall, p.peak, "")
		f, err := r.floor("list", "-floor-url="+t.URL, "-floor-fingerprint="+t.Fingerprint, "-floor-password="+filepath.Join(state, "controller.password"))
		if err != nil {
			return err
		}
		if f.res.Objects != objects {
			return fmt.Errorf("the paged list found %d objects; the mesh has %d", f.res.Objects, objects)
		}
		r.res.row(floor).add(f.wall, f.peak)
		r.progress(floor, i, f.wall, f.peak, fmt.Sprintf("(the listing alone %s)", time.Duration(f.res.NS).Round(time.Millisecond)))
	}
	return nil
}

// convergedApplies times the apply of desc, already applied, runs times into row id: it must
// find nothing to change, so it makes no mutating call, and check (if any) must hold.
func (r *waitRunner) convergedApplies(id, desc, state string, check runCheck) error {
	for i := range r.runs {
		p, err := r.checkedApply(desc, state, "the bus was already in sync", check)
		if err != nil {
			return err
		}
		r.res.row(id).add(p.wall, p.peak)
		r.progress(id, i, p.wall, p.peak, "")
	}
	return nil
}

// oneChanges times runs applies of one change into row id: one module of g follows one more
// event, and back, in turn, written into desc; check (if any) must hold around each.
func (r *waitRunner) oneChanges(id string, g meshgen.Mesh, desc, state string, check runCheck) error {
	for i := range r.runs {
		next := g
		next.Touched = 1 - i%2
		if err := next.Write(desc); err != nil {
			return err
		}
		p, err := r.checkedApply(desc, state, "applied ", check)
		if err != nil {
			return err
		}
		r.res.row(id).add(p.wall, p.peak)
		r.progress(id, i, p.wall, p.peak, "")
	}
	return nil
}

// checkedApply runs one apply of desc, which must print a line starting with want and leave
// check (if any) holding.
func (r *waitRunner) checkedApply(desc, state, want string, check runCheck) (proc, error) {
	after := func() error { return nil }
	if check != nil {
		var err error
		if after, err = check(); err != nil {
			return proc{}, err
		}
	}
	p, err := r.meshctlRun("apply", "-f", desc, "--state", state)
	if err != nil {
		return proc{}, err
	}
	if _, ok := p.lineAt(want); !ok {
		return proc{}, fmt.Errorf("the apply printed no line starting %q:\n%s", want, p.stderr)
	}
	return p, after()
}

func (r *waitRunner) progress(id string, i int, d time.Duration, rss int64, note string) {
	mem := ""
	if rss > 0 {
		mem = ", peak RSS " + megabytes(rss)
	}
	fmt.Fprintf(r.log, "  %-19s run %d: %s%s %s\n", id, i+1, d.Round(time.Millisecond), mem, note)
}

func (r *waitRunner) floorCreate(id, desc string, i int) error {
	store := filepath.Join(r.dir, "floor")
	syscall.Sync()
	f, err := r.floor("create", "-floor-mesh="+desc, "-floor-dir="+store)
	if err != nil {
		return err
	}
	r.res.row(id).add(f.wall, f.peak)
	r.progress(id, i, f.wall, f.peak, fmt.Sprintf("(%d objects, the creation alone %s)", f.res.Objects, time.Duration(f.res.NS).Round(time.Millisecond)))
	return r.spend(store)
}

// floorServedCreate is floorCreate on a bus that a floor process of its own serves, started
// before and killed after the timed create: a bare client's create when another process
// serves the bus, as an apply's is when watch serves it.
func (r *waitRunner) floorServedCreate(id, desc string, i int) error {
	store := filepath.Join(r.dir, "floor-served")
	cmd := exec.CommandContext(r.ctx, r.self, "-floor=serve", "-floor-dir="+store)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	var served struct {
		URL string `json:"url"`
	}
	if err := json.NewDecoder(stdout).Decode(&served); err != nil {
		return fmt.Errorf("the serving floor printed no address: %w\n%s", err, stderr.String())
	}
	syscall.Sync()
	f, err := r.floor("create", "-floor-mesh="+desc, "-floor-url="+served.URL)
	if err != nil {
		return err
	}
	r.res.row(id).add(f.wall, f.peak)
	r.progress(id, i, f.wall, f.peak, fmt.Sprintf("(%d objects, the creation alone %s)", f.res.Objects, time.Duration(f.res.NS).Round(time.Millisecond)))
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return r.spend(store)
}

type floorProc struct {
	res  floorResult
	wall time.Duration // the process's, as a user's client would take
	peak int64
}

func (r *waitRunner) floor(kind string, args ...string) (floorProc, error) {
	p, err := r.process(r.self, append([]string{"-floor=" + kind}, args...)...)
	if err != nil {
		return floorProc{}, err
	}
	var f floorProc
	if err := json.Unmarshal([]byte(p.stdout), &f.res); err != nil {
		return floorProc{}, fmt.Errorf("the %s floor printed %q: %w", kind, p.stdout, err)
	}
	f.wall, f.peak = p.wall, p.peak
	return f, nil
}

// proc is one finished process.
type proc struct {
	wall           time.Duration
	peak           int64
	stdout, stderr string
	lines          []timedLine // stderr, as it came
}

type timedLine struct {
	at   time.Duration // since the exec
	text string
}

// lineAt is when the first stderr line starting with prefix came.
func (p proc) lineAt(prefix string) (time.Duration, bool) {
	for _, l := range p.lines {
		if strings.HasPrefix(l.text, prefix) {
			return l.at, true
		}
	}
	return 0, false
}

func (r *waitRunner) meshctlRun(args ...string) (proc, error) {
	return r.process(r.meshctl, args...)
}

// process runs a command to its exit and fails unless it exits 0.
func (r *waitRunner) process(name string, args ...string) (proc, error) {
	ctx, cancel := context.WithTimeout(r.ctx, waitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		return proc{}, err
	}
	started := time.Now()
	if err := cmd.Start(); err != nil {
		return proc{}, err
	}
	peak := watchPeakRSS(cmd.Process.Pid)
	var p proc
	var all strings.Builder
	sc := bufio.NewScanner(errPipe)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		p.lines = append(p.lines, timedLine{at: time.Since(started), text: sc.Text()})
		all.WriteString(sc.Text() + "\n")
	}
	err = cmd.Wait()
	p.wall = time.Since(started)
	p.peak = peak()
	p.stdout, p.stderr = stdout.String(), all.String()
	if err != nil {
		return p, fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, p.stderr)
	}
	return p, nil
}

// watchProc is a running `meshctl watch`, its log read as it comes.
type watchProc struct {
	cmd  *exec.Cmd
	done chan struct{}

	mu     sync.Mutex
	cycles []watchCycle
	more   chan struct{}
	tail   []string // its last lines, for an error
}

// watchCycle is one reconcile watch logged.
type watchCycle struct {
	Msg     string `json:"msg"`
	Trigger string `json:"trigger"`
	Outcome string `json:"outcome"`
}

func (r *waitRunner) startWatch(dir, state string) (*watchProc, error) {
	cmd := exec.CommandContext(r.ctx, r.meshctl, "watch", "-f", dir, "--state", state,
		"--debounce", "1h", "--resync", "1h", "--log-format", "json")
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	w := &watchProc{cmd: cmd, done: make(chan struct{}), more: make(chan struct{})}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(errPipe)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			var c watchCycle
			_ = json.Unmarshal(sc.Bytes(), &c)
			w.mu.Lock()
			w.tail = append(w.tail, sc.Text())
			if len(w.tail) > 20 {
				w.tail = w.tail[1:]
			}
			if c.Outcome != "" {
				w.cycles = append(w.cycles, c)
				close(w.more)
				w.more = make(chan struct{})
			}
			w.mu.Unlock()
		}
	}()
	if _, err := w.await(0, "watch's first reconcile", func(c watchCycle) bool { return c.Outcome == "ok" || c.Outcome == "noop" }); err != nil {
		w.kill()
		return nil, err
	}
	return w, nil
}

func (w *watchProc) mark() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.cycles)
}

func (w *watchProc) since(mark int) []watchCycle {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.cycles[mark:])
}

// await waits for the first cycle from mark on that satisfies ok.
func (w *watchProc) await(mark int, what string, ok func(watchCycle) bool) (watchCycle, error) {
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		for _, c := range w.cycles[min(mark, len(w.cycles)):] {
			if ok(c) {
				w.mu.Unlock()
				return c, nil
			}
		}
		more, tail := w.more, strings.Join(w.tail, "\n")
		w.mu.Unlock()
		select {
		case <-more:
		case <-w.done:
			return watchCycle{}, fmt.Errorf("watch exited waiting for %s:\n%s", what, tail)
		case <-deadline.C:
			return watchCycle{}, fmt.Errorf("no %s after %s:\n%s", what, waitTimeout, tail)
		}
	}
}

// kill ends watch at once: its store is thrown away, so nats-server's slow stop of every
// consumer is not waited for.
func (w *watchProc) kill() {
	_ = w.cmd.Process.Kill()
	<-w.done
	_ = w.cmd.Wait()
}

// healed deletes a consumer and polls until it is back, returning how long it was gone.
func healed(ctx context.Context, js jetstream.JetStream, stream, name string) (time.Duration, error) {
	if err := js.DeleteConsumer(ctx, stream, name); err != nil {
		return 0, fmt.Errorf("deleting %s/%s by hand: %w", stream, name, err)
	}
	deleted := time.Now()
	deadline := deleted.Add(waitTimeout)
	for time.Now().Before(deadline) {
		_, err := host.ConsumerInfo(ctx, js, stream, name) // pull or push, as the mesh says
		switch {
		case err == nil:
			return time.Since(deleted), nil
		case !errors.Is(err, jetstream.ErrConsumerNotFound):
			return 0, fmt.Errorf("looking for %s/%s: %w", stream, name, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0, fmt.Errorf("%s/%s deleted by hand was not recreated within %s", stream, name, waitTimeout)
}

// writeOneNode writes a description of the bus section and one node: what watch starts
// from before the whole mesh is written beside it.
func writeOneNode(dir, listen, node string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	body := fmt.Sprintf("bus:\n  listen: %q\nnodes:\n  - name: %s\n", listen, node)
	return os.WriteFile(filepath.Join(dir, "mesh.yaml"), []byte(body), 0o644)
}

// freePort is a TCP port nothing listened on a moment ago: the bus section names it, and
// every process of the run finds the same bus there.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
