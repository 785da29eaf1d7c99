package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/bench/meshgen"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// runPlan is which sizes each kind of benchmark runs at.
type runPlan struct {
	sizes, live, restart []int
	wait                 []int // what a user waits for: whole meshctl processes
	external             []int // the same on an external server, the store on the bus
	converged            []int // the converged rows alone, watch serving
	connected            []int // with every host connected
	auths                []string
	runs                 int      // of each user-wait row
	push                 pushPlan // the operator-mode push rows
}

// sizesOf is the sizes b runs at.
func (p runPlan) sizesOf(b bench) []int {
	switch b.kind {
	case live:
		return p.live
	case restart:
		return p.restart
	}
	return p.sizes
}

// bench is one benchmark function of the scale benchmarks, run once per size.
type bench struct {
	pkg   string // the package directory
	name  string // without the Benchmark prefix
	title string
	kind  benchKind
}

type benchKind int

const (
	local   benchKind = iota // no bus
	live                     // against an embedded bus
	restart                  // stops a large bus: a minute per 6,000 consumers
)

// benches are measured in this order, and reported in it.
var benches = []bench{
	{"model", "Load", "load and validate the YAML", local},
	// Issue 12: one sed renaming the nodes makes thousands of dangling references, and a
	// "did you mean" per problem over every node once made that quadratic.
	{"model", "LoadEveryNodeReferenceBroken", "load and validate, every node reference broken", local},
	{"render", "Derive", "derive principals, streams, consumers", local},
	{"render", "AccountsConfig", "render the accounts config", local},
	{"render", "ValidateDeriveRender", "load, validate, derive and render", local},
	{"plan", "PlanConverged", "plan, converged", local},
	{"plan", "PlanOnePercent", "plan, 1% of instances changed", local},
	{"reconcile", "FloorList", "floor: list every object in pages (bare client)", live},
	{"reconcile", "ConvergedDiff", "converged diff (read, derive, render, plan)", live},
	{"reconcile", "ConvergedApply", "converged apply (lock, diff, record)", live},
	{"reconcile", "FloorCreate", "floor: create every object, 16 in flight (bare client)", live},
	{"reconcile", "FirstApply", "first apply from empty", live},
	{"reconcile", "ApplyOneModule", "apply: one module follows one more event", live},
	{"reconcile", "EmbeddedRestart", "embedded bus: stop and start with the store", restart},
}

// result is one benchmark at one size.
type result struct {
	bench   bench
	size    int
	line    string             // the benchmark's line as `go test -bench` printed it
	metrics map[string]float64 // by unit: "ns/op", "B/op", "allocs/op", "stop-ms", …
	peakRSS int64              // bytes: the process's, which ran this benchmark alone
	wall    time.Duration      // the process's, setup included
}

func (r *result) ns() float64 { return r.metrics["ns/op"] }

// meshFacts is what a generated mesh of one size holds.
type meshFacts struct {
	g                              meshgen.Mesh
	files, yamlBytes               int
	principals, streams, consumers int
	modules, explicitHolders, held int
}

// report is everything measured.
type report struct {
	plan            runPlan
	started, ended  time.Time
	machine         []string // lines describing it
	loadBefore      string
	loadAfter       string
	meshes          map[int]meshFacts
	results         []*result
	header          []string // goos, goarch, cpu lines of the benchmark output
	commit          string
	totalWallOfRuns time.Duration
	bcrypt          time.Duration // one hash at state.DefaultCost
	waits           []*waitResult
	connected       []*connectedResult
	pushes          *pushReport
}

func (r *report) find(name string, size int) *result {
	for _, x := range r.results {
		if x.bench.name == name && x.size == size {
			return x
		}
	}
	return nil
}

// measure builds the test binaries and runs every benchmark the plan asks for, in the
// temporary directory tmp.
func measure(ctx context.Context, p runPlan, tmp string, log io.Writer) (*report, error) {
	rep := &report{plan: p, started: time.Now(), meshes: map[int]meshFacts{}}
	rep.machine = describeMachine()
	rep.loadBefore = loadAverage()
	rep.commit = gitCommit()
	for _, n := range append(append(append(append(slices.Clone(meshgen.Sizes), p.wait...), p.external...), p.converged...), p.connected...) {
		rep.meshes[n] = factsOf(meshgen.Scaled(n))
	}
	rep.bcrypt = timeBcrypt()

	if len(p.wait)+len(p.external)+len(p.converged)+len(p.connected) > 0 {
		meshctl, err := buildMeshctl(ctx, tmp, log)
		if err != nil {
			return nil, err
		}
		if err := measureWaits(ctx, p.wait, p.runs, meshctl, tmp, log, &rep.waits); err != nil {
			return nil, err
		}
		if err := measureExternal(ctx, p.external, p.runs, meshctl, tmp, log, &rep.waits); err != nil {
			return nil, err
		}
		if err := measureConverged(ctx, p.converged, p.runs, meshctl, tmp, log, &rep.waits); err != nil {
			return nil, err
		}
		printWaits(log, rep.waits)
		if err := measureConnected(ctx, p.connected, p.auths, p.runs, meshctl, tmp, log, &rep.connected); err != nil {
			return nil, err
		}
		printConnected(log, rep.connected)
	}
	var err error
	if rep.pushes, err = measurePushes(ctx, p.push, tmp, log); err != nil {
		return nil, err
	}
	printPushes(log, rep.pushes)
	bins := map[string]string{}
	for _, b := range benches {
		if _, ok := bins[b.pkg]; ok || len(p.sizesOf(b)) == 0 {
			continue
		}
		bin := filepath.Join(tmp, b.pkg+".test")
		fmt.Fprintf(log, "building %s's benchmarks\n", b.pkg)
		cmd := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, "./"+b.pkg)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("building the %s benchmarks: %w", b.pkg, err)
		}
		bins[b.pkg] = bin
	}

	// Size by size, so that a floor and the meshctl figure compared with it run one after
	// the other, on the machine as it is at that moment.
	for _, n := range meshgen.Sizes {
		for _, b := range benches {
			if !contains(p.sizesOf(b), n) {
				continue
			}
			res, header, err := runOne(ctx, bins[b.pkg], b, n, tmp, log)
			if err != nil {
				return nil, err
			}
			if rep.header == nil {
				rep.header = header
			}
			rep.results = append(rep.results, res)
			rep.totalWallOfRuns += res.wall
		}
	}
	// Reported benchmark by benchmark, as the packages' output would list them.
	slices.SortStableFunc(rep.results, func(a, b *result) int {
		return cmp.Compare(slices.Index(benches, a.bench), slices.Index(benches, b.bench))
	})
	for _, h := range rep.header {
		if cpu, ok := strings.CutPrefix(h, "cpu: "); ok {
			rep.machine = append(rep.machine, "CPU as the benchmarks name it: "+strings.TrimSpace(cpu))
		}
	}
	rep.loadAfter = loadAverage()
	rep.ended = time.Now()
	return rep, nil
}

// createRepeatsUpTo is the largest size whose first apply and create floor are run three
// times; larger ones run once (a 20,000-instance create takes most of a minute).
const createRepeatsUpTo = 5000

// runOne runs one benchmark at one size in a process of its own.
func runOne(ctx context.Context, bin string, b bench, size int, tmp string, log io.Writer) (*result, []string, error) {
	pattern := fmt.Sprintf("^Benchmark%s$/^instances=%d$", b.name, size)
	args := []string{"-test.run", "^$", "-test.bench", pattern, "-test.benchmem", "-test.timeout", "60m"}
	if b.kind == live && (b.name == "FirstApply" || b.name == "FloorCreate") && size <= createRepeatsUpTo {
		// A create run lasts seconds, so one run is all a second of benchtime gets, and one
		// run of a shared machine is noisy: the ratio of the two compares three runs each.
		args = append(args, "-test.benchtime", "3x")
	}
	fmt.Fprintf(log, "%-28s %6d instances ... ", b.name, size)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = b.pkg
	// Each benchmark's temporary directories, and the embedded buses they hold, go where
	// the bench can remove them: a large bus is left to the process exit, not stopped. The
	// stores of the live benchmarks are put aside rather than removed when each ends (see
	// spend), so that the next does not pay for the removal.
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "MESHCTL_BENCH_SPENT="+filepath.Join(tmp, spentDir))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// The previous benchmark's stores were just put aside, and its other temporary
	// directories removed: flush what it wrote before this one starts, so that writeback is
	// not measured here.
	syscall.Sync()
	started := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	peak := watchPeakRSS(cmd.Process.Pid)
	err := cmd.Wait()
	wall := time.Since(started)
	if err != nil {
		return nil, nil, fmt.Errorf("%s at %d instances: %w\n%s", b.name, size, err, out.String())
	}
	res := &result{bench: b, size: size, wall: wall, peakRSS: peak()}
	var header []string
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "goos:"), strings.HasPrefix(line, "goarch:"), strings.HasPrefix(line, "cpu:"):
			header = append(header, line)
		case strings.HasPrefix(line, "Benchmark"+b.name+"/"):
			res.line, res.metrics = line, parseMetrics(line)
		}
	}
	if res.metrics == nil {
		return nil, nil, fmt.Errorf("%s at %d instances printed no result:\n%s", b.name, size, out.String())
	}
	fmt.Fprintf(log, "%s/op, peak RSS %s (%s in all)\n", duration(res.ns()), megabytes(res.peakRSS), wall.Round(time.Second))
	return res, header, nil
}

// watchPeakRSS follows a child's peak resident set size (VmHWM in /proc/PID/status, the
// kernel's high-water mark of its memory since its exec) until the returned function is
// called after the child has exited. The rusage of a reaped child will not do: Go starts
// children with vfork, and the kernel counts the parent's high-water mark at the exec into
// the child's ru_maxrss, so every child would report at least this process's peak.
func watchPeakRSS(pid int) func() int64 {
	var peak atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	path := fmt.Sprintf("/proc/%d/status", pid)
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if kb := statusField(path, "VmHWM"); kb > peak.Load() {
				peak.Store(kb)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return func() int64 {
		close(stop)
		<-done
		return peak.Load() * 1024
	}
}

// statusField reads a "Key:   123 kB" line of a /proc status file, in kB; 0 when absent.
func statusField(path, key string) int64 {
	v := firstField(path, key)
	if v == "" {
		return 0
	}
	n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
	return n
}

// parseMetrics reads the value-unit pairs of a benchmark line.
func parseMetrics(line string) map[string]float64 {
	f := strings.Fields(line)
	m := map[string]float64{}
	if len(f) < 2 {
		return m
	}
	if n, err := strconv.ParseFloat(f[1], 64); err == nil {
		m["iterations"] = n
	}
	for i := 2; i+1 < len(f); i += 2 {
		if v, err := strconv.ParseFloat(f[i], 64); err == nil {
			m[f[i+1]] = v
		}
	}
	return m
}

// timeBcrypt is how long one hash at the default cost takes here: the fastest of three,
// since nothing else is measured meanwhile.
func timeBcrypt() time.Duration {
	best := time.Duration(0)
	for range 3 {
		t0 := time.Now()
		if _, err := bcrypt.GenerateFromPassword([]byte("a password of the usual length"), state.DefaultCost); err != nil {
			panic(err)
		}
		if d := time.Since(t0); best == 0 || d < best {
			best = d
		}
	}
	return best
}

func factsOf(g meshgen.Mesh) meshFacts {
	files := g.Files()
	f := meshFacts{g: g, files: len(files)}
	for _, file := range files {
		f.yamlBytes += len(file.Data)
	}
	m, err := model.Parse(files)
	if err != nil {
		panic(fmt.Sprintf("a generated mesh does not load: %v", err))
	}
	d := render.Derive(m)
	f.principals, f.streams, f.consumers = len(d.Principals), len(d.Streams), len(d.Consumers)
	f.modules, f.explicitHolders, f.held = len(m.Modules), len(m.Holders), len(m.Holding)
	return f
}

// describeMachine says what the numbers were measured on.
func describeMachine() []string {
	var lines []string
	cpu := firstField("/proc/cpuinfo", "model name")
	if cpu == "" {
		cpu = runtime.GOARCH
	}
	lines = append(lines, fmt.Sprintf("CPU: %s, %d cores visible to Go (GOMAXPROCS %d)", cpu, runtime.NumCPU(), runtime.GOMAXPROCS(0)))
	if mem := firstField("/proc/meminfo", "MemTotal"); mem != "" {
		if kb, err := strconv.ParseInt(strings.Fields(mem)[0], 10, 64); err == nil {
			lines = append(lines, fmt.Sprintf("Memory: %.1f GiB", float64(kb)/(1<<20)))
		}
	}
	if rel, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		lines = append(lines, fmt.Sprintf("OS: %s/%s, kernel %s", runtime.GOOS, runtime.GOARCH, strings.TrimSpace(string(rel))))
	}
	lines = append(lines, fmt.Sprintf("Go: %s; nats-server %s (embedded, file store)", runtime.Version(), server.VERSION))
	lines = append(lines, "Store: "+storeFilesystem(os.TempDir()))
	return lines
}

func firstField(path, key string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// storeFilesystem names the filesystem the embedded buses' stores were on: a consumer is
// a directory and two files, so the filesystem is a large part of creating one.
func storeFilesystem(dir string) string {
	data, err := os.ReadFile("/proc/mounts")
	if err != nil {
		return dir
	}
	best, fstype, dev := "", "", ""
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		if strings.HasPrefix(dir, f[1]) && len(f[1]) > len(best) {
			best, dev, fstype = f[1], f[0], f[2]
		}
	}
	if best == "" {
		return dir
	}
	return fmt.Sprintf("%s (%s on %s, mounted at %s)", dir, fstype, dev, best)
}

func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	commit := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		commit += " with uncommitted changes"
	}
	return commit
}
