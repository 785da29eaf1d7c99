package main

import (
	"context"
	"errors"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
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
            Under bus.accounts: account, the MESH account alone, as the file holds it.
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
	if done, code := f.parseNoArgs(args, "the description", "-f"); done {
		return code
	}
	if !checkFormat(e, *out, "conf", "json") {
		return exitError
	}
	m, code := loadDescription(ctx, e, *dir)
	if code != exitOK {
		return code
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
		// Only read: rendering a mistyped directory must not leave a new store behind.
		st, err := stateFlag{dir: stateDir}.openExisting()
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
	conf := render.AccountsConfig(d.Principals, hashes)
	if m.Bus.AccountOnly() {
		// The file as meshctl writes it: the MESH account alone, which carries no user of
		// meshctl's in another account.
		conf, _ = render.AccountOnly(conf)
	}
	_, _ = e.stdout.Write(conf)
	return exitOK
}

// reportLoadError prints a load failure and returns its exit code: every diagnostic of an
// invalid description (exitInvalid), or the I/O error (exitError).
func reportLoadError(e *env, dir string, err error) int {
	var le *model.LoadError
	if errors.As(err, &le) {
		for _, d := range le.Diagnostics {
			e.errorf("%s", joinPos(dir, d))
		}
		if more := le.Omitted(); more > 0 {
			e.errorf("… and %d more problem(s)", more)
		}
		e.errorf("the description in %s is invalid (%d problem(s)); nothing was changed", dir, le.Total)
		return exitInvalid
	}
	e.errorf("%v", err)
	return exitError
}
