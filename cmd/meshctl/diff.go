package main

import (
	"context"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/render"
)

func init() {
	register("diff", command{summary: "show what an apply, or a merge, would change on the bus (exit 1 when anything would)", run: runDiff})
}

const diffHelp = `
Usage: meshctl diff [-f DIR] [--state DIR] [-o text|json|markdown]
       meshctl diff --from OLD_DIR -f NEW_DIR [-o text|json|markdown]

Reads the live bus, derives what the description in DIR asks for, and shows the
difference: each stream and consumer to create, update, replace or delete, with the
reason and, for a replacement or deletion, the messages at stake; the accounts config
user by user, permission subject by permission subject; and the seats whose holder
moves. It never shows a password or a hash, and it changes nothing.

With --from, it compares two descriptions instead, as a pull request's review needs:
what applying NEW_DIR would change on a bus where OLD_DIR had been applied. It reads no
bus and no state directory (passwords and their hashes play no part), so it runs in CI
with nothing but the two checkouts. Without a bus nothing queued can be counted: every
replacement or deletion is marked disruptive, none is refused, and 'meshctl diff'
against the live bus counts the messages at stake before an apply.

Exit codes, as kubectl diff: 0 nothing would change, 1 there are changes, 2 error (an
invalid description is reported problem by problem, as file:line:col: message).

With no bus.url in the description, diff uses the embedded bus: the one a running
'meshctl watch' serves from the same state directory, or one it starts and stops.

  -o text      for people (coloured on a terminal)
  -o json      the plan as data, schema meshctl.plan/v1: every field is documented in
               docs/plan-schema.md (https://github.com/meshbus/meshctl/blob/main/docs/plan-schema.md)
  -o markdown  a summary for a pull-request comment: risky changes first, then
               objects, permissions and seat holders

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
	sf := f.stateFlags()
	out := f.outputFlag(planFormats...)
	positional, done, code := f.parse(args)
	if done {
		return code
	}
	if len(positional) > 0 {
		// `diff --from base/mesh mesh` (no -f) would otherwise compare with the current
		// directory and report a plan for the wrong tree.
		e.errorf("diff takes no arguments, got %q; name the description with -f DIR", positional)
		return exitError
	}
	if !checkFormat(e, *out, planFormats...) {
		return exitError
	}
	var p *plan.Plan
	if *from != "" {
		p = planDescriptions(e, *from, *dir)
	} else {
		p = planBus(ctx, e, sf, *dir)
	}
	if p == nil {
		return exitError
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
// and returns nil.
func planBus(ctx context.Context, e *env, sf stateFlags, dir string) *plan.Plan {
	m, st, ok := sf.loadAndOpen(e, dir)
	if !ok {
		return nil
	}
	defer st.Close()
	sess, ok := sf.connect(ctx, e, m, st)
	if !ok {
		return nil
	}
	defer sess.Close()
	p, err := sess.Plan(ctx, m, plan.Options{})
	if err != nil {
		e.errorf("%v", err)
		return nil
	}
	return p
}

// planDescriptions plans the description in newDir against the bus oldDir derives, as
// though oldDir had been applied, or reports why it cannot and returns nil. It opens no
// store and dials nothing: CI has neither, and a review must not depend on them. Both
// are rendered without hashes, so no credential shows up as a change.
func planDescriptions(e *env, oldDir, newDir string) *plan.Plan {
	// Both trees are loaded before either is reported, so one run lists every problem.
	oldMesh, oldErr := model.Load(oldDir)
	newMesh, newErr := model.Load(newDir)
	if oldErr != nil {
		reportLoadError(e, oldDir, oldErr)
	}
	if newErr != nil {
		reportLoadError(e, newDir, newErr)
	}
	if oldErr != nil || newErr != nil {
		return nil
	}
	old := plan.TargetOf(render.Derive(oldMesh), nil)
	target := plan.TargetOf(render.Derive(newMesh), nil)
	return plan.Compute(target, plan.LiveOf(old), plan.Options{})
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
