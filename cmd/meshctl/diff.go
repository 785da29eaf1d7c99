package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

func init() {
	register("diff", command{summary: "show what an apply, or a merge, would change on the bus (exit 1 when anything would)", run: runDiff})
}

const diffHelp = `
Usage: meshctl diff [-f DIR] [--state DIR] [--out FILE] [-o text|json|markdown]
       meshctl diff --from OLD_DIR -f NEW_DIR [-o text|json|markdown]

Reads the live bus, derives what the description in DIR asks for, and shows the
difference: each stream and consumer to create, update, replace or delete, with the
reason and, for a replacement or deletion, or an update lowering a stream's limits below
what it holds, the messages at stake; the accounts config
user by user, permission subject by permission subject; and the seats whose holder
moves. It never shows a password or a hash, and it changes nothing: it mints no
credential and creates no state directory. Before the first apply from a state directory
there is nothing to read; its embedded bus is empty, and diff shows everything to create
(an external bus cannot be read before apply has installed the controller's credential).

With --from, it compares two descriptions instead, as a pull request's review needs:
what applying NEW_DIR would change on a bus where OLD_DIR had been applied. It reads no
bus and no state directory (passwords and their hashes play no part), so it runs in CI
with nothing but the two checkouts. Without a bus nothing queued can be counted: every
replacement or deletion is marked disruptive, none is refused, and 'meshctl diff'
against the live bus counts the messages at stake before an apply.

With --out FILE it also saves the plan, made against the bus, with the description it
was made from (schema meshctl.saved-plan/v1; no password or hash in it): 'meshctl apply
--plan FILE' applies exactly it after review, or refuses if the bus has changed since.

On stderr it says how much the description's streams may hold on each server, the sum
of their byte limits ('this mesh may hold up to 1.4 GiB on disk on each server').

As kubectl diff, it exits 1 when anything would change: a pipeline tells "the merge
changes the bus" from "meshctl could not tell" by the exit codes below.

With no bus.url in the description, diff uses the embedded bus: the one a running
'meshctl watch' serves from the same state directory, or one it starts and stops.

  -o text      for people (coloured on a terminal)
  -o json      the plan as data, schema meshctl.plan/v1: every field is documented in
               docs/plan-schema.md (https://github.com/meshbus/meshctl/blob/main/docs/plan-schema.md)
  -o markdown  a summary for a pull-request comment: risky changes first, then
               (with --from) a Mermaid picture of who talks to whom as the change
               alters it, which GitHub draws, then objects, permissions and seat holders

Examples:
  meshctl diff -f mesh/ || echo "the merge would change the bus"
  meshctl diff --from ../base/mesh -f mesh -o markdown > diff.md
`

// planFormats are the renderings of a plan, the first the default.
var planFormats = []string{"text", "json", "markdown"}

func runDiff(ctx context.Context, e *env, args []string) int {
	f := newFlags(e, "diff", diffHelp)
	dir := f.dirFlag()
	from := f.String("from", "", "compare with the description in this directory instead of the live bus: no bus, no state")
	save := f.String("out", "", "also save the plan, made against the bus, to this file, for 'meshctl apply --plan' to apply exactly")
	sf := f.restorableStateFlag()
	out := f.outputFlag(planFormats...)
	// `diff --from base/mesh mesh` (no -f) would otherwise compare with the current
	// directory and report a plan for the wrong tree.
	if done, code := f.parseNoArgs(args, "the description", "-f"); done {
		return code
	}
	if !checkFormat(e, *out, planFormats...) {
		return exitError
	}
	var p *plan.Plan
	var code int
	switch {
	case *from != "" && *save != "":
		e.errorf("--out saves a plan made against the bus; with --from no bus is read: give one or the other")
		return exitError
	case *save != "":
		p, code = savePlan(ctx, e, sf, *dir, *save)
	case *from != "":
		p, code = planDescriptions(ctx, e, *from, *dir)
	default:
		p, code = planBus(ctx, e, sf, *dir, plan.Options{})
	}
	if p == nil {
		return code
	}
	if err := writePlan(e, p, *out); err != nil {
		e.errorf("%v", err)
		return exitError
	}
	if p.Empty() && len(p.Holders) == 0 {
		return exitOK
	}
	return exitChanges
}

// planBus plans the description in dir against the live bus, or reports why it cannot
// and returns nil with the exit code. It writes nothing: no store is created, no
// credential minted, no accounts config installed (a fresh state directory is planned
// against the empty bus it stands for).
func planBus(ctx context.Context, e *env, sf stateFlag, dir string, o plan.Options) (*plan.Plan, int) {
	return planBusWith(ctx, e, sf, dir, o, func(ctx context.Context, sess *reconcile.Session, m *model.Mesh) (*plan.Plan, error) {
		return sess.Plan(ctx, m, o)
	})
}

// planBusWith is planBus, planning with do once the bus is reached.
func planBusWith(ctx context.Context, e *env, sf stateFlag, dir string, o plan.Options,
	do func(context.Context, *reconcile.Session, *model.Mesh) (*plan.Plan, error)) (*plan.Plan, int) {
	pre := reconcile.StartPredialAndList(ctx, *sf.dir)
	defer pre.Close()
	m, code := loadDescription(ctx, e, dir)
	if code != exitOK {
		return nil, code
	}
	sayFootprint(e, m)
	if code := sf.restoreIfEmpty(ctx, e, m); code != exitOK {
		return nil, code
	}
	st, err := sf.openExisting()
	switch {
	case errors.Is(err, errNoState):
		return planUnapplied(e, m, *sf.dir, nil, o, err)
	case err != nil:
		e.errorf("%v", err)
		return nil, exitError
	}
	defer st.Close()
	sess, err := connect(ctx, e, m, st, reconcile.Options{ReadOnly: true, Predial: pre})
	if errors.Is(err, state.ErrNoController) {
		hashes, herr := st.Hashes(ctx)
		if herr != nil {
			e.errorf("%v", herr)
			return nil, exitError
		}
		return planUnapplied(e, m, *sf.dir, hashes, o, err)
	}
	if err != nil {
		e.errorf("%v", err)
		return nil, exitError
	}
	defer sess.Close()
	p, err := do(ctx, sess, m)
	if err != nil {
		e.errorf("%v", err)
		return nil, exitError
	}
	return p, exitOK
}

// planUnapplied plans m for a state directory nothing was ever applied from (why says how
// that is known). The embedded bus keeps its store inside the state directory, so its bus
// is empty: everything is to be created. An external bus cannot be read without the
// controller's credential, which only an apply mints and installs.
func planUnapplied(e *env, m *model.Mesh, stateDir string, hashes map[string]string, o plan.Options, why error) (*plan.Plan, int) {
	if !m.Bus.Embedded() {
		e.errorf("%v: meshctl holds no credential for the bus at %s yet, and cannot read it; 'meshctl apply' mints one and installs it", why, m.Bus.URL)
		return nil, exitError
	}
	fmt.Fprintf(e.stderr, "nothing has been applied from %s: its embedded bus is empty, and an apply would create everything below\n", stateDir)
	return plan.Compute(plan.TargetOf(render.Derive(m), hashes), plan.Live{}, o), exitOK
}

// planDescriptions plans the description in newDir against the bus oldDir derives, as
// though oldDir had been applied, or reports why it cannot and returns nil. It opens no
// store and dials nothing: CI has neither, and a review must not depend on them. Both
// are rendered without hashes, so no credential shows up as a change.
func planDescriptions(ctx context.Context, e *env, oldDir, newDir string) (*plan.Plan, int) {
	// Both trees are loaded before either is reported, so one run lists every problem.
	oldMesh, oldErr := loadMesh(ctx, oldDir)
	newMesh, newErr := loadMesh(ctx, newDir)
	code := exitOK
	if oldErr != nil {
		code = max(code, reportLoadError(e, oldDir, oldErr))
	}
	if newErr != nil {
		code = max(code, reportLoadError(e, newDir, newErr))
	}
	if code != exitOK {
		return nil, code
	}
	sayFootprint(e, newMesh)
	// Both descriptions are at hand, so the Markdown can draw who talks to whom as the
	// change alters it; a bus keeps no description to draw from.
	return plan.Between(oldMesh, newMesh), exitOK
}

// writePlan prints a plan in the asked format on stdout.
func writePlan(e *env, p *plan.Plan, format string) error {
	switch format {
	case "json":
		return p.JSON(e.stdout)
	case "markdown":
		return p.Markdown(e.stdout)
	default:
		return p.Text(e.stdout, isTerminal(e.stdout))
	}
}

// sayFootprint says on stderr how much the streams of m may hold on each server: the sum of
// their byte limits (render.Footprint), which an apply compares with what the bus has.
func sayFootprint(e *env, m *model.Mesh) {
	fmt.Fprintln(e.stderr, render.FootprintOf(render.DeriveStreams(m)))
}
