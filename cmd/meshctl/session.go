package main

import (
	"context"
	"fmt"
	"os"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/state"
)

// stateFlags are the flags of every command that uses the state directory.
type stateFlags struct {
	dir  *string
	cost *int
}

func (f *flags) stateFlags() stateFlags {
	def := os.Getenv("MESHCTL_STATE")
	if def == "" {
		def = ".meshctl"
	}
	return stateFlags{
		dir:  f.String("state", def, "state directory: the store of password hashes, inventory and history, and the embedded bus; $MESHCTL_STATE"),
		cost: f.Int("bcrypt-cost", state.DefaultCost, "bcrypt cost of newly minted credentials"),
	}
}

func (s stateFlags) open(e *env) (*state.Store, bool) {
	st, err := state.Open(*s.dir)
	if err != nil {
		e.errorf("%v", err)
		return nil, false
	}
	return st, true
}

// loadAndOpen loads the description in dir and opens the state store: what every command
// that works on a mesh and its credentials starts with. On failure it has reported why.
func (s stateFlags) loadAndOpen(e *env, dir string) (*model.Mesh, *state.Store, bool) {
	m, err := model.Load(dir)
	if err != nil {
		reportLoadError(e, dir, err)
		return nil, nil, false
	}
	st, ok := s.open(e)
	return m, st, ok
}

// connect loads nothing: it reaches the bus m names as the controller.
func (s stateFlags) connect(ctx context.Context, e *env, m *model.Mesh, st *state.Store) (*reconcile.Session, bool) {
	sess, err := reconcile.Connect(ctx, m, st, reconcile.Options{
		Cost: *s.cost,
		Logf: func(format string, args ...any) { fmt.Fprintf(e.stderr, format+"\n", args...) },
	})
	if err != nil {
		e.errorf("%v", err)
		return nil, false
	}
	return sess, true
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
