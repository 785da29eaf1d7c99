package main

import (
	"context"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

func init() {
	register("render", command{summary: "print the derived accounts config, or the whole derived bus as JSON", run: runRender})
}

const renderHelp = `
Usage: meshctl render [-f DIR] [--state DIR] [-o conf|json]

Derives the bus from the description in DIR and prints it, touching nothing.

  -o conf   the accounts config the server includes (users, permissions). Principals
            that were never issued a credential get a locked entry no password opens;
            with --state, the stored bcrypt hashes are used instead (never passwords).
  -o json   the derived principals (each grant with the job that needs it), streams,
            consumers and seat holders, as data

Example:
  meshctl render -f examples/seed
  meshctl render -f examples/seed -o json | jq '.principals[] | select(.user=="two.audit")'
`

func runRender(ctx context.Context, e *env, args []string) int {
	f := newFlags(e, "render", renderHelp)
	dir := f.dirFlag()
	out := f.outputFlag("conf", "json")
	stateDir := f.String("state", "", "state directory whose stored hashes to render (default: none, every entry locked)")
	if _, done, code := f.parse(args); done {
		return code
	}
	if !checkFormat(e, *out, "conf", "json") {
		return exitError
	}
	m, err := model.Load(*dir)
	if err != nil {
		return reportLoadError(e, *dir, err)
	}
	d := render.Derive(m)
	if *out == "json" {
		js, err := d.JSON()
		if err != nil {
			e.errorf("%v", err)
			return exitError
		}
		_, _ = e.stdout.Write(js)
		return exitOK
	}
	var hashes map[string]string
	if *stateDir != "" {
		st, err := state.Open(*stateDir)
		if err != nil {
			e.errorf("%v", err)
			return exitError
		}
		defer st.Close()
		if hashes, err = st.Hashes(ctx); err != nil {
			e.errorf("%v", err)
			return exitError
		}
	}
	_, _ = e.stdout.Write(render.AccountsConfig(d.Principals, hashes))
	return exitOK
}

// reportLoadError prints a load failure: every diagnostic of an invalid description (exit
// 2 for commands other than validate: they could not do their job), or the I/O error.
func reportLoadError(e *env, dir string, err error) int {
	if le, ok := err.(*model.LoadError); ok {
		for _, d := range le.Diagnostics {
			e.errorf("%s", joinPos(dir, d))
		}
		if more := le.Omitted(); more > 0 {
			e.errorf("… and %d more problem(s)", more)
		}
		e.errorf("the description in %s is invalid (%d problem(s)); nothing was changed", dir, le.Total)
		return exitError
	}
	e.errorf("%v", err)
	return exitError
}
