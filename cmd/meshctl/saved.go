package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/meshbus/meshctl/internal/atomicfile"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/state"
)

// Saved plans: `meshctl diff --out FILE` writes the plan made against the bus with the
// description it was made from; `meshctl apply --plan FILE` applies exactly that, from that
// description, and refuses with nothing changed when the bus no longer is what it was
// planned against. Reviewed in a pull request, applied after the merge: what is applied is
// what was reviewed.

// savePlan plans the description in dir against the bus and writes the saved plan to out.
// It returns the plan (for the output diff prints as well) and the exit code.
func savePlan(ctx context.Context, e *env, sf stateFlag, dir, out string) (*plan.Plan, int) {
	files, err := model.ReadDir(dir)
	if err != nil {
		return nil, reportLoadError(e, dir, err)
	}
	p, t, code := planBusTarget(ctx, e, sf, dir, plan.Options{})
	if p == nil {
		return nil, code
	}
	if t.Mesh == "" {
		e.errorf("a saved plan is made against a bus a store manages, and nothing has been applied from %s yet: apply the description first", *sf.dir)
		return nil, exitError
	}
	// The plan must be of the files it carries: a tree edited while it was planned is read
	// again, not saved beside a plan of something else.
	again, err := model.ReadDir(dir)
	if err != nil || !sameFiles(files, again) {
		e.errorf("the description in %s changed while it was planned; run diff --out again", dir)
		return nil, exitError
	}
	_, _, commit := state.WhoAmI(dir)
	saved, err := plan.Save(p, t, files, commit)
	if err != nil {
		e.errorf("%v", err)
		return nil, exitError
	}
	var b bytes.Buffer
	if err := saved.Write(&b); err != nil {
		e.errorf("%v", err)
		return nil, exitError
	}
	// The plan carries no password or hash, but it is written whole or not at all.
	if err := atomicfile.Write(out, b.Bytes()); err != nil {
		e.errorf("writing the saved plan: %v", err)
		return nil, exitError
	}
	fmt.Fprintf(e.stderr, "saved the plan to %s: apply exactly it with 'meshctl apply --plan %s'\n", out, out)
	return p, exitOK
}

func sameFiles(a, b []model.File) bool {
	return slices.EqualFunc(a, b, func(x, y model.File) bool { return x.Name == y.Name && bytes.Equal(x.Data, y.Data) })
}

// readSavedPlan reads the saved plan at path and the description it carries.
func readSavedPlan(e *env, path string) (*plan.Saved, *model.Mesh, int) {
	f, err := os.Open(path)
	if err != nil {
		e.errorf("%v", err)
		return nil, nil, exitError
	}
	defer f.Close()
	saved, err := plan.ReadSaved(f)
	if err != nil {
		e.errorf("%s: %v", path, err)
		return nil, nil, exitError
	}
	m, err := model.Parse(saved.Files())
	if err != nil {
		// A saved description that no longer validates was made by another meshctl: its
		// positions are the saved files'.
		return nil, nil, reportLoadError(e, filepath.Base(path), err)
	}
	return saved, m, exitOK
}

// expectSaved is the check an apply of a saved plan makes before it changes anything.
func expectSaved(e *env, saved *plan.Saved) func(*plan.Plan, plan.Target) error {
	return func(p *plan.Plan, t plan.Target) error {
		if err := saved.Matches(p, t); err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "the bus is as the saved plan found it: applying exactly its %d change(s)\n", len(p.Changes))
		return nil
	}
}

// isStale reports whether err is a saved plan refused.
func isStale(err error) bool { return errors.Is(err, plan.ErrStale) }

// planBusTarget is planBus, returning the target it planned for as well; the target of a
// state directory nothing was applied from names no store.
func planBusTarget(ctx context.Context, e *env, sf stateFlag, dir string, o plan.Options) (*plan.Plan, plan.Target, int) {
	var t plan.Target
	p, code := planBusWith(ctx, e, sf, dir, o, func(ctx context.Context, sess *reconcile.Session, m *model.Mesh) (*plan.Plan, error) {
		var err error
		var p *plan.Plan
		p, t, err = sess.PlanWithTarget(ctx, m, o)
		return p, err
	})
	return p, t, code
}
