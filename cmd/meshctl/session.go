package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/state"
)

// stateFlag is --state: the state directory of every command that uses one; and, for those
// that may start from an empty one (restorableStateFlag), --controller-password-file and
// --controller-creds.
type stateFlag struct {
	dir          *string
	passwordFile *string
	// credsFile, with bus.auth: jwt, is --controller-creds: the controller's creds that a
	// restore joins the bus with and keeps (nil: the command takes none).
	credsFile *string
	// wait, when set, is the command's --wait: whether a restore waits for the apply lock on
	// the bus (nil: it waits).
	wait *bool
}

// restorableStateFlag is stateFlag with --controller-password-file: a command given it and an
// empty state directory rebuilds the store from the copy kept on the bus first, as `meshctl
// state restore` does — knowing the controller's password is what proves the same authority.
// A CI runner or a new control host then starts from the checkout and the password alone.
func (f *flags) restorableStateFlag() stateFlag {
	s := f.stateFlag()
	s.passwordFile = f.String("controller-password-file", "", "with a state directory holding no store: rebuild it from the copy kept on the bus first (as 'meshctl state restore'), proving the same authority with the controller's password in this file")
	s.credsFile = f.String("controller-creds", "", "with bus.auth: jwt, as --controller-password-file: the controller's creds file (the lost host's STATE/controller.creds), kept in the restored state directory")
	return s
}

// restoreIfEmpty rebuilds the store from the bus where --controller-password-file (with
// bus.auth: jwt, --controller-creds) is given and the state directory holds none; the code is
// exitOK when the command may go on.
func (s stateFlag) restoreIfEmpty(ctx context.Context, e *env, m *model.Mesh) int {
	given := func(p *string) bool { return p != nil && *p != "" }
	if !given(s.passwordFile) && !given(s.credsFile) {
		return exitOK
	}
	if ok, err := state.Exists(*s.dir); err != nil || ok {
		if err != nil {
			e.errorf("%v", err)
			return exitError
		}
		return exitOK
	}
	wait := s.wait == nil || *s.wait
	var st *state.Store
	var what string
	var err error
	switch {
	case m.Bus.JWT() && !given(s.credsFile):
		e.errorf("with bus.auth: jwt the controller logs in with its creds: give --controller-creds (the lost host's STATE/controller.creds) to restore the store from the bus")
		return exitError
	case m.Bus.JWT():
		st, what, err = reconcile.RestoreJWT(ctx, m, *s.dir, *s.credsFile, wait)
	case !given(s.passwordFile):
		e.errorf("--controller-creds is for bus.auth: jwt; this mesh's controller proves itself with --controller-password-file")
		return exitError
	default:
		var password string
		if password, err = readPasswordFile(*s.passwordFile); err != nil {
			e.errorf("%v", err)
			return exitError
		}
		st, what, err = reconcile.Restore(ctx, m, *s.dir, password, wait)
	}
	if err != nil {
		hint := ""
		if errors.Is(err, state.ErrLocked) {
			hint = " (pass --wait to wait for it)"
		}
		e.errorf("restoring the state store in %s from the bus: %v%s", *s.dir, err, hint)
		return exitError
	}
	st.Close()
	fmt.Fprintln(e.stderr, what)
	fmt.Fprintf(e.stderr, "restored the state store in %s from the bus\n", *s.dir)
	return exitOK
}

func (f *flags) stateFlag() stateFlag {
	def := os.Getenv("MESHCTL_STATE")
	if def == "" {
		def = ".meshctl"
	}
	return stateFlag{dir: f.String("state", def, "state directory: the store of password hashes, inventory and history, and the embedded bus; $MESHCTL_STATE")}
}

// costFlag is --bcrypt-cost, for the commands that mint credentials (apply and watch mint
// the controller's on first use, credentials issue a principal's) and for no other.
func (f *flags) costFlag() *int {
	return f.Int("bcrypt-cost", state.DefaultCost, "bcrypt cost of newly minted credentials (every password is 130 random bits; a higher cost slows only the server, at each login and reload)")
}

// open opens the store, creating the state directory when it does not exist yet: for the
// commands that write it (apply, credentials, watch).
func (s stateFlag) open(e *env) (*state.Store, int) {
	st, err := state.Open(*s.dir)
	if err != nil {
		e.errorf("%v", err)
		return nil, exitError
	}
	return st, exitOK
}

// errNoState is a state directory that holds no store. Commands that only read it refuse
// rather than create one: a mistyped --state would otherwise report an empty history, or
// an empty bus, as though it were the truth.
var errNoState = errors.New("no meshctl state store there")

// openExisting opens the store of a state directory that exists, creating nothing; a
// directory holding none is errNoState.
func (s stateFlag) openExisting() (*state.Store, error) {
	ok, err := state.Exists(*s.dir)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("state directory %s: %w (give the one apply used with --state, or $MESHCTL_STATE)", *s.dir, errNoState)
	}
	return state.Open(*s.dir)
}

// loadMesh loads the description in dir: the one place every command reads one. A large
// description sets the garbage collector's pace of a one-shot command (gc.go).
func loadMesh(ctx context.Context, dir string) (*model.Mesh, error) {
	m, err := model.LoadContext(ctx, dir)
	if err == nil {
		paceFor(m)
	}
	return m, err
}

// loadDescription loads the description in dir, reporting why it cannot; the code is
// exitOK when m is usable.
func loadDescription(ctx context.Context, e *env, dir string) (*model.Mesh, int) {
	m, err := loadMesh(ctx, dir)
	if err != nil {
		return nil, reportLoadError(e, dir, err)
	}
	return m, exitOK
}

// openFor opens the state store for m, a description already loaded (a saved plan's), as
// loadAndOpen does for a tree's.
func (s stateFlag) openFor(ctx context.Context, e *env, m *model.Mesh) (*model.Mesh, *state.Store, int) {
	if code := s.restoreIfEmpty(ctx, e, m); code != exitOK {
		return nil, nil, code
	}
	st, code := s.open(e)
	return m, st, code
}

// loadAndOpen loads the description in dir and opens the state store: what every command
// that works on a mesh and its credentials starts with. On failure it has reported why.
func (s stateFlag) loadAndOpen(ctx context.Context, e *env, dir string) (*model.Mesh, *state.Store, int) {
	m, code := loadDescription(ctx, e, dir)
	if code != exitOK {
		return nil, nil, code
	}
	if code := s.restoreIfEmpty(ctx, e, m); code != exitOK {
		return nil, nil, code
	}
	st, code := s.open(e)
	return m, st, code
}

// exitsAfterCommand is set by main: the process exits once its one command is done, so a
// session may leave an embedded bus only meshctl used to stop with it. Commands run in-process
// by tests keep the clean stop, since their process goes on.
var exitsAfterCommand bool

// connect loads nothing: it reaches the bus m names as the controller, with o as a command's
// session (commandSession).
func connect(ctx context.Context, e *env, m *model.Mesh, st *state.Store, o reconcile.Options) (*reconcile.Session, error) {
	return reconcile.Connect(ctx, m, st, commandSession(e, o))
}

// commandSession is o for a session of a one-shot command: it may leave the embedded bus to
// stop with the process (exitsAfterCommand), and says what an operator should know on stderr.
func commandSession(e *env, o reconcile.Options) reconcile.Options {
	o.ExitsAfterClose = exitsAfterCommand
	o.Logf = func(format string, args ...any) { fmt.Fprintf(e.stderr, format+"\n", args...) }
	return o
}

// isTerminal reports whether w is a terminal, where colour helps; elsewhere it is noise.
func isTerminal(w any) bool {
	if os.Getenv("NO_COLOR") != "" {
		return false
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}
