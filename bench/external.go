package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/bench/meshgen"
	"github.com/meshbus/meshctl/bus/bustest"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/internal/testnats"
	"github.com/meshbus/meshctl/render"
)

// What a user waits for on an external nats-server, the store on the bus: the converged rows
// and the one change of the embedded bus's (wait.go), run against a nats-server process of the
// bench's own. A mesh naming a server with an accounts file and a pid file keeps its state
// store on that bus: every store change is written to the bucket render.StateBucket, and every
// apply takes the apply lock in render.LeaseBucket and reads the store's fence, which the
// embedded bus's applies do not.

// The rows on an external server, in the order they are measured and reported.
const (
	wExtDiff      = "external-diff"       // converged diff
	wExtFloorList = "external-floor-list" // bare client, paged list of the server, as the controller
	wExtApply     = "external-apply"      // converged apply: the lock on the bus, zero mutating calls
	wExtOneChange = "external-one-change" // one module follows one more event (and back)
)

// measureExternal runs the rows on an external server at each size, runs times each, into
// waits: a server of its own per size, killed once that size's rows are done.
func measureExternal(ctx context.Context, sizes []int, runs int, meshctl, tmp string, log io.Writer, waits *[]*waitResult) error {
	if len(sizes) == 0 {
		return nil
	}
	// nats-server is built from the module's pinned version, the release the embedded bus
	// links, once for every size.
	defer testnats.RemoveBuiltServer()
	return measureSizes(ctx, sizes, runs, meshctl, tmp, log, waits, "external", "on an external server, the store on the bus,", (*waitRunner).runExternal)
}

func (r *waitRunner) runExternal(n int) error {
	serverDir := filepath.Join(r.dir, "server")
	if err := os.MkdirAll(serverDir, 0o755); err != nil {
		return err
	}
	fmt.Fprintf(r.log, "starting nats-server for the rows on an external server at %s instances\n", num(n))
	x, stop, err := startServer(serverDir)
	if err != nil {
		return fmt.Errorf("starting nats-server: %w", err)
	}
	defer stop()
	gen, err := r.generate(n, func(g *meshgen.Mesh) {
		g.Server = meshgen.Server{URL: x.URL, Fingerprint: x.Fingerprint, AccountsFile: x.AccountsFile, PIDFile: x.PIDFile}
	})
	if err != nil {
		return err
	}
	g, desc, d := gen.g, gen.desc, gen.d
	fmt.Fprintf(r.log, "what a user waits for on an external server, the store on the bus, at %s instances, %d runs each\n", num(n), r.runs)

	// The first apply, from an empty state directory, is the setup of the rows, as the
	// embedded rows' first applies are theirs: it is logged, not reported.
	state := filepath.Join(r.dir, "state")
	syscall.Sync()
	p, err := r.checkedApply(desc, state, "applied ", nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(r.log, "  %-19s setup: %s, peak RSS %s\n", "first apply", p.wall.Round(time.Millisecond), megabytes(p.peak))

	target := busclient.Target{URL: x.URL, Fingerprint: x.Fingerprint}
	nc, err := dialController(r.ctx, target, filepath.Join(state, "controller.password"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if err := storeOnTheBus(r.ctx, js); err != nil {
		return err
	}
	// The writeback of the server's store, just made, would otherwise land in the first runs.
	syscall.Sync()

	// The bus holds the mesh's objects and the streams of the store's two buckets.
	if err := r.convergedDiffs(wExtDiff, wExtFloorList, desc, state, target, len(d.Streams)+len(d.Consumers)+2); err != nil {
		return err
	}
	locked := lockedOnTheBus(r.ctx, js)
	// A converged apply writes no accounts config, so the server is not reloaded.
	if err := r.convergedApplies(wExtApply, desc, state, func() (func() error, error) {
		after, err := locked()
		if err != nil {
			return nil, err
		}
		before, err := os.Stat(x.AccountsFile)
		if err != nil {
			return nil, err
		}
		return func() error {
			now, err := os.Stat(x.AccountsFile)
			if err != nil {
				return err
			}
			if !now.ModTime().Equal(before.ModTime()) || now.Size() != before.Size() {
				return fmt.Errorf("a converged apply wrote the accounts config %s", x.AccountsFile)
			}
			return after()
		}, nil
	}); err != nil {
		return err
	}
	return r.oneChanges(wExtOneChange, g, desc, state, locked)
}

// storeOnTheBus fails unless the store's bucket holds records and the lease bucket exists:
// the rows would otherwise measure an apply that keeps its store on the control host alone.
func storeOnTheBus(ctx context.Context, js jetstream.JetStream) error {
	kv, err := js.KeyValue(ctx, render.StateBucket)
	if err != nil {
		return fmt.Errorf("the first apply left no store on the bus: %w", err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return err
	}
	if st.Values() == 0 {
		return fmt.Errorf("the first apply wrote nothing to the store's bucket %s", render.StateBucket)
	}
	if _, err := js.KeyValue(ctx, render.LeaseBucket); err != nil {
		return fmt.Errorf("the first apply took no lock on the bus: %w", err)
	}
	return nil
}

// lockedOnTheBus is the check that an apply took the apply lock on the bus: the lease
// bucket's stream has a message more after it.
func lockedOnTheBus(ctx context.Context, js jetstream.JetStream) runCheck {
	last := func() (uint64, error) {
		s, err := js.Stream(ctx, render.LeaseStream)
		if err != nil {
			return 0, err
		}
		return s.CachedInfo().State.LastSeq, nil
	}
	return func() (func() error, error) {
		before, err := last()
		if err != nil {
			return nil, err
		}
		return func() error {
			now, err := last()
			if err != nil {
				return err
			}
			if now == before {
				return errors.New("an apply took no lock on the bus")
			}
			return nil
		}, nil
	}
}

// startServer starts nats-server as meshctl's own tests start an operator's server
// (bustest.StartTestServer: TLS with a pinned self-signed certificate, a pid file, the accounts
// file meshctl writes included), its files and store in dir. stop kills it.
func startServer(dir string) (x *bustest.TestServer, stop func(), err error) {
	tb := &harnessTB{dir: dir}
	defer func() {
		if err != nil {
			tb.close()
		}
	}()
	defer tb.catch(&err)
	return bustest.StartTestServer(tb, dir), tb.close, nil
}

// harnessTB is the bench's testnats.TB, for bustest.StartTestServer: its temporary directories are
// made in dir, its cleanups run by close, and a fatal error or a skip panics with a
// harnessFatal, which startServer returns as an error.
type harnessTB struct {
	dir      string
	cleanups []func()
}

// harnessFatal is the message of a harnessTB's Fatalf or Skip.
type harnessFatal string

func (t *harnessTB) Helper() {}

func (t *harnessTB) TempDir() string {
	d, err := os.MkdirTemp(t.dir, "tmp-")
	if err != nil {
		t.Fatalf("%v", err)
	}
	return d
}

func (t *harnessTB) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }

func (t *harnessTB) Fatalf(format string, args ...any) {
	panic(harnessFatal(fmt.Sprintf(format, args...)))
}

func (t *harnessTB) Skip(args ...any) { panic(harnessFatal(fmt.Sprint(args...))) }

// catch, deferred, turns a harnessFatal panic of the harness's into *err: a fatal error of
// the test support the bench runs is the bench's error, and any other panic goes on.
func (t *harnessTB) catch(err *error) {
	v := recover()
	if v == nil {
		return
	}
	f, ok := v.(harnessFatal)
	if !ok {
		panic(v)
	}
	*err = errors.New(string(f))
}

// close runs the cleanups, the last registered first, as testing does.
func (t *harnessTB) close() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	t.cleanups = nil
}
