package main

import (
	"context"
	"errors"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/plan"
)

func init() {
	register("diff", command{summary: "show what an apply would change on the bus (exit 1 when anything would)", run: runDiff})
}

const diffHelp = `
Usage: meshctl diff [-f DIR] [--state DIR] [-o text|json]

Reads the live bus, derives what the description in DIR asks for, and shows the
difference: each stream and consumer to create, update, replace or delete, with the
reason and, for a replacement or deletion, the messages at stake; and the accounts
config user by user, permission subject by permission subject. It never shows a
password or a hash, and it changes nothing.

Exit codes, as kubectl diff: 0 the bus is in sync, 1 there are changes, 2 error.

With no bus.url in the description, diff uses the embedded bus: the one a running
'meshctl watch' serves from the same state directory, or one it starts and stops.

  -o text   for people (coloured on a terminal)
  -o json   the plan as data (schema meshctl.plan/v1)

Example:
  meshctl diff -f mesh/ || echo "the merge would change the bus"
`

func runDiff(ctx context.Context, e *env, args []string) int {
	f := newFlags(e, "diff", diffHelp)
	dir := f.dirFlag()
	sf := f.stateFlags()
	out := f.outputFlag("text", "json", "markdown")
	if _, done, code := f.parse(args); done {
		return code
	}
	if !checkFormat(e, *out, "text", "json", "markdown") {
		return exitError
	}
	m, err := model.Load(*dir)
	if err != nil {
		return reportLoadError(e, *dir, err)
	}
	st, ok := sf.open(e)
	if !ok {
		return exitError
	}
	defer st.Close()
	sess, ok := sf.connect(ctx, e, m, st)
	if !ok {
		return exitError
	}
	defer sess.Close()
	p, err := sess.Plan(ctx, m, plan.Options{})
	if err != nil {
		e.errorf("%v", err)
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

// writePlan prints a plan in the asked format on stdout.
func writePlan(e *env, p *plan.Plan, format string) error {
	switch format {
	case "json":
		return p.JSON(e.stdout)
	case "markdown":
		return errors.New("markdown output is not available yet")
	default:
		return p.Text(e.stdout, isTerminal(e.stdout))
	}
}
