package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

func init() {
	register("render", command{summary: "print the derived accounts config, the whole derived bus as JSON, or the servers' operator-mode config", run: runRender})
}

const renderHelp = `
Usage: meshctl render [-f DIR] [--state DIR] [-o conf|json|server] [--resolver-dir DIR] [--interval D]

Derives the bus from the description in DIR and prints it, touching nothing (but -o server's
first run, below).

  -o conf   the accounts config the server includes (users, permissions). Principals
            that were never issued a credential get a locked entry no password opens;
            with --state, the stored bcrypt hashes are used instead (never passwords).
            Under bus.accounts: account, the MESH account alone, as the file holds it.
  -o json   the derived principals (each grant with the job that needs it), streams,
            consumers and seat holders, as data
  -o server with bus.auth: jwt on an external bus, the static config every server of it
            runs in operator mode: operator, system_account, resolver { type: full } and
            resolver_preload with the system account's and the mesh account's JWTs. It
            holds no seed, and never changes: every later change is pushed. Without
            bus.operator, the operator is the one meshctl keeps in the state directory
            (--state, default $MESHCTL_STATE or .meshctl, the one apply uses), and the
            first run makes it there, in DIR/nsc: start the servers on this text, then
            'meshctl apply'. Each server adds its own listen, jetstream and cluster blocks.
  --resolver-dir DIR   where each server keeps account JWTs (default jwt: relative to the
            server's working directory)
  --interval D         how often a server asks a peer for the JWTs it lacks (default 2m)

Example:
  meshctl render -f examples/seed
  meshctl render -f examples/seed -o json | jq '.principals[] | select(.user=="two.audit")'
  meshctl render -f mesh --state /var/lib/meshctl -o server --resolver-dir /data/jwt > operator.conf
`

func runRender(ctx context.Context, e *env, args []string) int {
	f := newFlags(e, "render", renderHelp)
	dir := f.dirFlag()
	out := f.outputFlag("conf", "json", "server")
	stateDir := f.String("state", "", "state directory whose stored hashes to render (default: none, every entry locked); with -o server, where meshctl keeps the operator it makes (default $MESHCTL_STATE or .meshctl)")
	resolverDir := f.String("resolver-dir", "jwt", "with -o server: each server's resolver directory")
	interval := f.String("interval", "2m", "with -o server: how often a server asks a peer for the JWTs it lacks")
	if done, code := f.parseNoArgs(args, "the description", "-f"); done {
		return code
	}
	if !checkFormat(e, *out, "conf", "json", "server") {
		return exitError
	}
	m, code := loadDescription(ctx, e, *dir)
	if code != exitOK {
		return code
	}
	if *out == "server" {
		return renderServerConfig(ctx, e, m, *stateDir, *resolverDir, *interval)
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

// renderServerConfig prints the static config of m's servers in operator mode: the operator
// bus.operator names, or the one meshctl keeps in stateDir, made there on first use.
func renderServerConfig(ctx context.Context, e *env, m *model.Mesh, stateDir, resolverDir, interval string) int {
	switch {
	case !m.Bus.JWT():
		e.errorf("-o server is the servers' config in operator mode, for bus.auth: jwt; this mesh has bus.auth %s (-o conf is its accounts config)", m.Bus.Auth)
		return exitError
	case m.Bus.Embedded():
		e.errorf("-o server is for an external bus: meshctl configures the embedded bus itself, in operator mode (docs/operator-mode.md)")
		return exitError
	}
	var op accounts.Operator
	var err error
	if m.Bus.Operator != nil {
		op, err = accounts.LoadOperator(*m.Bus.Operator)
	} else {
		if stateDir == "" {
			if stateDir = os.Getenv("MESHCTL_STATE"); stateDir == "" {
				stateDir = ".meshctl"
			}
		}
		var st *state.Store
		if st, err = state.Open(stateDir); err == nil {
			defer st.Close()
			op, err = reconcile.FreshOperator(ctx, m, st, func(format string, args ...any) { fmt.Fprintf(e.stderr, format+"\n", args...) })
		}
	}
	if err != nil {
		e.errorf("%v", err)
		return exitError
	}
	conf, err := op.ServerConfig(resolverDir, interval)
	if err != nil {
		e.errorf("%v", err)
		return exitError
	}
	_, _ = io.WriteString(e.stdout, conf)
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
