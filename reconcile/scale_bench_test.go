package reconcile_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/bench/floor"
	"github.com/meshbus/meshctl/bench/meshgen"
	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// The live benchmarks run meshctl's own path (Connect, Plan, Reconcile) against an embedded
// bus, and beside it the floor: what a bare nats.go client needs for the same objects, with
// as many calls in flight as an apply keeps. Each size starts its own bus.
//
// nats-server stops a file-backed consumer in about 10 ms, one after another
// (docs/nats-behaviour.md), so a bus of 6,000 consumers takes a minute to stop. Benchmarks leave a
// large bus running for the process exit to reclaim, and say so; only the restart benchmark
// stops one, because that is what it measures.

// stopBudget is how many consumers a benchmark's bus may hold and still be stopped at its
// end: about ten seconds' worth.
const stopBudget = 1000

// storeDir is a directory for a benchmark's store: b.TempDir(), or, when the bench harness
// sets MESHCTL_BENCH_SPENT, a new directory there that the harness removes at its end. A
// store removed when its benchmark ends costs the next one: on ext4 without a journal, the
// inode allocator skips every inode freed in the last minute or more.
func storeDir(b *testing.B) string {
	spent := os.Getenv("MESHCTL_BENCH_SPENT")
	if spent == "" {
		return b.TempDir()
	}
	if err := os.MkdirAll(spent, 0o755); err != nil {
		b.Fatal(err)
	}
	dir, err := os.MkdirTemp(spent, "bench-")
	if err != nil {
		b.Fatal(err)
	}
	return dir
}

// withGenerated runs body once per benchmark size with the mesh generated for it.
func withGenerated(b *testing.B, body func(b *testing.B, g meshgen.Mesh)) {
	for _, n := range meshgen.Sizes {
		g := meshgen.Scaled(n)
		g.Listen = "127.0.0.1:-1"
		b.Run(g.String(), func(b *testing.B) { body(b, g) })
	}
}

func benchContext(b *testing.B) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	b.Cleanup(cancel)
	return ctx
}

func parse(b *testing.B, g meshgen.Mesh) *model.Mesh {
	b.Helper()
	m, err := model.Parse(g.Files())
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// session connects to a fresh embedded bus the way `meshctl apply` does, with a credential
// issued to every principal, as on a mesh in service: the accounts config then carries a
// real hash for every user. They are minted at bcrypt's lowest cost: minting is not what is
// measured here.
func session(ctx context.Context, b *testing.B, m *model.Mesh) *reconcile.Session {
	b.Helper()
	st, err := state.Open(filepath.Join(storeDir(b), "state"))
	if err != nil {
		b.Fatal(err)
	}
	s, err := reconcile.Connect(ctx, m, st, reconcile.Options{Cost: bcrypt.MinCost})
	if err != nil {
		b.Fatal(err)
	}
	users := slices.DeleteFunc(render.Derive(m).Users(), func(u string) bool { return u == render.ControllerUser })
	if _, err := st.Mint(ctx, users, bcrypt.MinCost, "bench"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		s.Conn.Close()
		release(b, s.Embedded)
		st.Close()
	})
	return s
}

// release stops a bus small enough to stop quickly, and leaves a larger one to the process
// exit.
func release(b *testing.B, e *bus.Embedded) {
	if n := consumersOn(e); n > stopBudget {
		b.Logf("leaving the bus of %d consumers running for the process exit: stopping it would take about %s", n, time.Duration(n)*10*time.Millisecond)
		return
	}
	e.Shutdown()
}

func consumersOn(e *bus.Embedded) int {
	info, err := e.Server().Jsz(nil)
	if err != nil {
		return 0
	}
	return info.Consumers
}

// applied is a session whose bus holds the mesh, converged.
func applied(ctx context.Context, b *testing.B, m *model.Mesh) *reconcile.Session {
	b.Helper()
	s := session(ctx, b, m)
	if _, err := s.Reconcile(ctx, m, reconcile.RunOptions{}); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkFirstApply applies a mesh to a bus that has none of it: every stream and
// consumer created, the accounts config rewritten from the controller alone to every user,
// reloaded and verified. Each run has a fresh store and bus, set up untimed: a bus emptied
// for the next run would have that run's creates pay for the removal (storeDir).
func BenchmarkFirstApply(b *testing.B) {
	withGenerated(b, func(b *testing.B, g meshgen.Mesh) {
		ctx := benchContext(b)
		m := parse(b, g)
		var calls int64
		for b.Loop() {
			b.StopTimer()
			s := session(ctx, b, m)
			counting := &reconcile.Counting{API: s.API}
			s.API = counting
			settle()
			b.StartTimer()
			res, err := s.Reconcile(ctx, m, reconcile.RunOptions{})
			if err != nil {
				b.Fatal(err)
			}
			calls = counting.Mutations.Load()
			if res.Applied != len(res.Plan.Changes) {
				b.Fatalf("applied %d of %d", res.Applied, len(res.Plan.Changes))
			}
		}
		b.ReportMetric(float64(calls), "calls/op")
	})
}

// BenchmarkConvergedDiff is `meshctl diff` against a converged bus that is already up: read
// the bus in pages, derive, render, plan nothing.
func BenchmarkConvergedDiff(b *testing.B) {
	withGenerated(b, func(b *testing.B, g meshgen.Mesh) {
		ctx := benchContext(b)
		m := parse(b, g)
		s := applied(ctx, b, m)
		for b.Loop() {
			p, err := s.Plan(ctx, m, plan.Options{})
			if err != nil {
				b.Fatal(err)
			}
			if !p.Empty() {
				b.Fatal("a converged bus plans changes")
			}
		}
	})
}

// BenchmarkConvergedApply is `meshctl apply` (or a watch resync) on a converged bus: the
// lock, the diff, the history record, and no mutating call, no write, no reload.
func BenchmarkConvergedApply(b *testing.B) {
	withGenerated(b, func(b *testing.B, g meshgen.Mesh) {
		ctx := benchContext(b)
		m := parse(b, g)
		s := applied(ctx, b, m)
		loaded := s.Embedded.ConfigLoadTime()
		counting := &reconcile.Counting{API: s.API}
		s.API = counting
		for b.Loop() {
			if _, err := s.Reconcile(ctx, m, reconcile.RunOptions{RecordNoop: true}); err != nil {
				b.Fatal(err)
			}
		}
		if n := counting.Mutations.Load(); n != 0 || !s.Embedded.ConfigLoadTime().Equal(loaded) {
			b.Fatalf("a converged apply made %d mutating calls or reloaded", n)
		}
		b.ReportMetric(0, "calls/op")
	})
}

// BenchmarkApplyOneModule applies a merge that makes one module follow one more event, and
// the merge that takes it back, in turn: one consumer update and the accounts config.
func BenchmarkApplyOneModule(b *testing.B) {
	withGenerated(b, func(b *testing.B, g meshgen.Mesh) {
		ctx := benchContext(b)
		touched := g
		touched.Touched = 1
		meshes := [2]*model.Mesh{parse(b, touched), parse(b, g)}
		s := applied(ctx, b, meshes[1])
		counting := &reconcile.Counting{API: s.API}
		s.API = counting
		i := 0
		for b.Loop() {
			res, err := s.Reconcile(ctx, meshes[i%2], reconcile.RunOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if sum := res.Plan.Summary(); sum.Update != 2 || len(res.Plan.Changes) != 2 {
				b.Fatalf("planned %+v", sum)
			}
			i++
		}
		b.ReportMetric(float64(counting.Mutations.Load())/float64(i), "calls/op")
	})
}

// The floor: a bare nats.go client on a bus without users, no plan, no accounts config
// (package floor, which the bench command's floor processes run too).

// openBus starts an embedded bus configured as meshctl's is — the MESH account with
// JetStream, users that must log in — but with one unrestricted user, and connects as it:
// the floor measures JetStream, not permissions or plans.
func openBus(b *testing.B) (*bus.Embedded, *nats.Conn) {
	b.Helper()
	e, err := floor.StartBus(context.Background(), storeDir(b))
	if err != nil {
		b.Fatal(err)
	}
	nc, err := floor.Connect(e.URL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		nc.Close()
		release(b, e)
	})
	return e, nc
}

// settle flushes the filesystem before a timed create: a consumer is a directory and files
// in the store, and the writeback of whatever came before (another store removed, the bus
// just emptied) otherwise lands inside the measurement, doubling it on this kind of disk.
func settle() { syscall.Sync() }

// BenchmarkFloorCreate creates a mesh's streams and consumers with a bare client, 16 calls
// in flight: the floor under BenchmarkFirstApply. Each run has a fresh bus, as there.
func BenchmarkFloorCreate(b *testing.B) {
	withGenerated(b, func(b *testing.B, g meshgen.Mesh) {
		ctx := benchContext(b)
		d := render.Derive(parse(b, g))
		for b.Loop() {
			b.StopTimer()
			_, nc := openBus(b)
			js, err := jetstream.New(nc)
			if err != nil {
				b.Fatal(err)
			}
			settle()
			b.StartTimer()
			if err := floor.Create(ctx, js, d); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(d.Streams)+len(d.Consumers)), "calls/op")
	})
}

// BenchmarkFloorList lists every stream and every consumer back, in pages, 16 streams'
// consumer lists in flight: the floor under BenchmarkConvergedDiff.
func BenchmarkFloorList(b *testing.B) {
	withGenerated(b, func(b *testing.B, g meshgen.Mesh) {
		ctx := benchContext(b)
		d := render.Derive(parse(b, g))
		_, nc := openBus(b)
		js, err := jetstream.New(nc)
		if err != nil {
			b.Fatal(err)
		}
		if err := floor.Create(ctx, js, d); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			n, err := floor.List(ctx, js, nc)
			if err != nil {
				b.Fatal(err)
			}
			if n != len(d.Streams)+len(d.Consumers) {
				b.Fatalf("listed %d objects, want %d", n, len(d.Streams)+len(d.Consumers))
			}
		}
	})
}

// BenchmarkEmbeddedRestart stops the embedded bus holding a converged mesh and starts it
// again from its store, reporting each: what a one-shot command pays around its work when no
// long-running process keeps the bus up.
func BenchmarkEmbeddedRestart(b *testing.B) {
	withGenerated(b, func(b *testing.B, g meshgen.Mesh) {
		ctx := benchContext(b)
		m := parse(b, g)
		s := applied(ctx, b, m)
		dir := s.Store.Dir()
		s.Conn.Close()
		var stop, start time.Duration
		for b.Loop() {
			t0 := time.Now()
			s.Embedded.Shutdown()
			stop = time.Since(t0)
			t0 = time.Now()
			e, err := bus.StartEmbedded(ctx, bus.EmbeddedOptions{StateDir: dir, Listen: g.Listen})
			start = time.Since(t0)
			if err != nil {
				b.Fatal(err)
			}
			s.Embedded = e
		}
		b.ReportMetric(float64(stop.Milliseconds()), "stop-ms")
		b.ReportMetric(float64(start.Milliseconds()), "start-ms")
	})
}
