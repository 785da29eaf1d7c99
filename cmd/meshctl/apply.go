package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/state"
)

func init() {
	register("apply", command{summary: "make the bus equal to the description, changing only what differs", run: runApply})
}

const applyHelp = `
Usage: meshctl apply [-f DIR] [--state DIR] [--dry-run] [--allow-data-loss] [--allow-mass-delete] [--allow-reissue] [--allow-overcommit] [--wait] [-o text|json]
       meshctl apply --plan FILE [--state DIR] [--allow-…] [--wait] [-o text|json]

Plans as 'meshctl diff' does, prints the plan, applies it and prints what was done:
streams, then consumers, then the accounts config (written atomically, checked with
the server's own parser, reloaded and verified; the previous file is restored if the
server refuses it), then deletions. Only objects carrying meshctl's ownership marker are
ever changed; a same-named object of someone else's is a conflict: it is left alone with
what depends on it (a stream's consumers), everything else is applied, and apply exits 2
naming it. A plan that would replace or delete anything holding messages or
unacknowledged work, or lower a stream's limits below what it holds (which discards its
oldest messages), is refused whole unless --allow-data-loss is given; one that deletes
more than half of the streams and consumers or of the users meshctl owns (an emptied
description, a wrong directory) is refused whole unless --allow-mass-delete is given.
A change of bus.auth (password or nkey) while hosts log in with credentials of the old
kind is refused whole unless --allow-reissue is given: those credentials are revoked, and
each host needs a new membership ('meshctl credentials issue'; an enrolled node enrols
again with a fresh enrol.<node>, and the controller then declares its instances theirs).
A plan that creates or changes streams whose byte limits sum to more than the bus says
its JetStream has (the account's limits, or the embedded server's store) is refused whole
unless --allow-overcommit is given: the server would refuse the streams past its store
half way through the apply.
A converged bus makes no change and no reload. Every apply is recorded in the state
store's history.

After applying, what the plan touched is read back from the bus; what still differs is
applied once more, and apply exits 0 only when the bus shows every change. A connection
lost during the apply stops it: nothing more is sent, and unless the bus is back within
seconds apply exits 2 with one line saying how many changes were made.

Two applies never run at once: a second one refuses (or with --wait, waits).

With --plan it applies a saved plan, the one 'meshctl diff --out FILE' wrote and a
review approved, from the description saved in it — not the tree, which may have moved
on since. Under the lock it plans that description against the bus again and applies
only if the plan is the saved one, change for change, for the same store and with the
accounts config rendering as it did; otherwise (a consumer deleted by hand, another
apply meanwhile, a credential issued) it exits 2 naming what differs and changes
nothing. Messages at stake are counted again, and refused, as in any apply.

With no bus.url in the description, apply uses the embedded bus: the one a running
'meshctl watch' serves, or one it starts for the apply and stops afterwards.

Example:
  meshctl apply -f mesh/ --dry-run
  meshctl apply -f mesh/
  meshctl diff -f mesh/ --out plan.json && meshctl apply --plan plan.json
`

func runApply(ctx context.Context, e *env, args []string) int {
	f := newFlags(e, "apply", applyHelp)
	dir := f.dirFlag()
	sf := f.restorableStateFlag()
	cost := f.costFlag()
	dryRun := f.Bool("dry-run", false, "plan and print, change nothing")
	allowLoss := f.Bool("allow-data-loss", false, "allow replacing or deleting objects that hold messages or unacknowledged work")
	allowMass := f.Bool("allow-mass-delete", false, "allow a plan that deletes more than half of the objects or users meshctl owns")
	allowReissue := f.Bool("allow-reissue", false, "allow a change of bus.auth that locks out the hosts logging in with credentials of the old kind, until each is issued a new membership")
	allowOvercommit := f.Bool("allow-overcommit", false, "allow streams whose byte limits sum to more than the bus says its JetStream has")
	wait := f.Bool("wait", false, "wait for another apply to finish instead of refusing")
	planFile := f.String("plan", "", "apply exactly this saved plan ('meshctl diff --out'), from the description it carries, refused with nothing changed if the bus has changed since")
	sf.wait = wait
	out := f.outputFlag("text", "json")
	if done, code := f.parseNoArgs(args, "the description", "-f"); done {
		return code
	}
	if !checkFormat(e, *out, "text", "json") {
		return exitError
	}
	saved, savedMesh, code := readPlanFlag(e, f, *planFile)
	if code != exitOK {
		return code
	}
	if *dryRun {
		return dryRunApply(ctx, e, sf, *dir, plan.Options{AllowDataLoss: *allowLoss, AllowMassDelete: *allowMass, AllowReissue: *allowReissue,
			AllowOvercommit: *allowOvercommit}, *out)
	}
	// The cycle's load opens the store after the description, which an empty state directory
	// is restored from the bus with; the store is closed after the session.
	var st *state.Store
	defer func() {
		if st != nil {
			st.Close()
		}
	}()
	load := func(ctx context.Context) (*model.Mesh, *state.Store, error) {
		var m *model.Mesh
		if saved != nil {
			m, st, code = sf.openFor(ctx, e, savedMesh)
		} else {
			m, st, code = sf.loadAndOpen(ctx, e, *dir)
		}
		if code != exitOK {
			return nil, nil, errReported
		}
		return m, st, nil
	}
	cycles := &reconcile.Cycles{StateDir: *sf.dir, Options: func() reconcile.Options {
		return commandSession(e, reconcile.Options{Cost: *cost})
	}}
	defer cycles.Close()

	var started time.Time
	total := 0
	run := reconcile.RunOptions{
		AllowDataLoss: *allowLoss, AllowMassDelete: *allowMass, AllowReissue: *allowReissue, AllowOvercommit: *allowOvercommit,
		Dir: *dir, WaitForLock: *wait, RecordNoop: true,
		LockNotice: func(msg string) { fmt.Fprintln(e.stderr, msg) },
		OnPlan: func(p *plan.Plan) {
			total = len(p.Changes)
			if *out == "text" {
				_ = p.Text(e.stdout, isTerminal(e.stdout))
			}
		},
		Progress: progressPrinter(e),
	}
	if saved != nil {
		run.Expect, run.Dir = expectSaved(e, saved), ""
	}
	res, err := cycles.Run(ctx, reconcile.CycleOptions{Load: load, Predial: true, Run: run,
		Ready: func(context.Context, *reconcile.Session, *model.Mesh, reconcile.SessionOrigin) { started = time.Now() }})
	if !res.Reconciled {
		return unreconciled(ctx, e, res, err, code)
	}
	if *out == "json" && res.Plan != nil {
		_ = res.Plan.JSON(e.stdout)
	}
	return reportApply(ctx, e, res.Result, err, total, res.Session, started)
}

// unreconciled is the exit code of an apply whose cycle ended with err before its reconcile:
// loadCode where the description or the state store could not be opened (the load reported
// why), and otherwise that of a bus not reached, saying why.
func unreconciled(ctx context.Context, e *env, res reconcile.CycleResult, err error, loadCode int) int {
	if res.Mesh == nil {
		return loadCode
	}
	if ctx.Err() != nil {
		e.errorf("interrupted before the bus was reached: nothing was changed")
		return exitInterrupted
	}
	e.errorf("%v", err)
	return exitError
}

// errReported ends an apply's cycle whose description or state store could not be opened:
// what was wrong is already reported, and the exit code chosen.
var errReported = errors.New("the description or the state store could not be opened")

// readPlanFlag reads the saved plan --plan names, refusing -f and --dry-run beside it: the
// plan carries the description it applies. Without --plan it returns no plan.
func readPlanFlag(e *env, f *flags, planFile string) (*plan.Saved, *model.Mesh, int) {
	if planFile == "" {
		return nil, nil, exitOK
	}
	given := false
	f.Visit(func(fl *flag.Flag) { given = given || fl.Name == "f" || fl.Name == "dry-run" })
	if given {
		e.errorf("--plan applies the description the saved plan carries: give neither -f nor --dry-run with it ('meshctl diff --out' made it)")
		return nil, nil, exitError
	}
	return readSavedPlan(e, planFile)
}

// dryRunApply plans and prints the plan in format, as diff does.
func dryRunApply(ctx context.Context, e *env, sf stateFlag, dir string, o plan.Options, format string) int {
	// A dry run is a diff: it writes nothing, the state directory included.
	p, code := planBus(ctx, e, sf, dir, o)
	if p == nil {
		return code
	}
	if err := writePlan(e, p, format); err != nil {
		e.errorf("%v", err)
		return exitError
	}
	fmt.Fprintln(e.stderr, "dry run: nothing was changed")
	return exitOK
}

// reportApply says on stderr how the apply of a plan of total changes ended, with err, and
// returns its exit code: what was made, or why it stopped and what the next apply does.
func reportApply(ctx context.Context, e *env, res reconcile.Result, err error, total int, s *reconcile.Session, started time.Time) int {
	accountsPath := s.Accounts.Path
	switch {
	case err != nil && ctx.Err() != nil:
		// Stopped by a signal: the change in flight, if any, was abandoned; what was made
		// is listed above and is on the bus, and the next apply plans from there.
		if res.Applied == 0 {
			e.errorf("interrupted: no change was made")
		} else {
			e.errorf("interrupted: %d of %d change(s) were made (listed above); the next apply continues from there", res.Applied, total)
		}
		return exitInterrupted
	case errors.Is(err, accounts.ErrNotLive):
		fmt.Fprintf(e.stderr, "applied %d of %d change(s); the accounts config is written to %s but not live: reload the server, then run apply again to finish\n",
			res.Applied, total, accountsPath)
		return exitError
	case errors.Is(err, state.ErrLocked):
		e.errorf("%v (pass --wait to wait for it)", err)
		return exitError
	case isStale(err):
		e.errorf("%v; nothing was changed: make a new plan with 'meshctl diff --out' and review it again", err)
		return exitError
	case errors.Is(err, reconcile.ErrBusLost), errors.Is(err, reconcile.ErrConflict), errors.Is(err, reconcile.ErrStopped):
		// The error says what was and was not done, in one line.
		e.errorf("%v", err)
		return exitError
	case err != nil:
		e.errorf("%v", err)
		if res.Applied > 0 {
			fmt.Fprintf(e.stderr, "%d change(s) were made before the failure; the next apply continues from there\n", res.Applied)
		}
		return exitError
	}
	switch {
	case res.Plan != nil && (!res.Plan.Empty() || len(res.Plan.Holders) > 0):
		fmt.Fprintf(e.stderr, "applied %d change(s) in %s\n", res.Applied, time.Since(started).Round(time.Millisecond))
	case s.InstalledAccounts():
		// Connecting changed the bus, which the plan after it does not show.
		fmt.Fprintf(e.stderr, "the accounts config at %s was installed, and is served, so that the controller could log in; "+
			"the bus is in sync with it\n", accountsPath)
	default:
		fmt.Fprintln(e.stderr, "the bus was already in sync: nothing was changed")
	}
	return exitOK
}

// progressPrinter reports long applies: a line per change for small plans, and every tenth
// of the way for large ones.
func progressPrinter(e *env) reconcile.Progress {
	return func(done, total int, c plan.Change, err error) {
		step := max(total/10, 1)
		switch {
		case err != nil:
			fmt.Fprintf(e.stderr, "  failed: %s %s: %v\n", c.Action, c.ID(), err)
		case total <= 20:
			fmt.Fprintf(e.stderr, "  [%d/%d] %s %s\n", done, total, c.Action, c.ID())
		case done%step == 0 || done == total:
			fmt.Fprintf(e.stderr, "  [%d/%d] %d%% done\n", done, total, done*100/total)
		}
	}
}
