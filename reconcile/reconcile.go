package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// RunOptions say what one reconcile does.
type RunOptions struct {
	DryRun        bool // plan only
	AllowDataLoss bool
	Progress      Progress
	// Dir is the description's directory, for the git commit recorded in the history.
	Dir string
	// WaitForLock waits for another applier to finish instead of refusing at once.
	WaitForLock bool
	// RecordNoop records an apply that found nothing to do (a one-shot `meshctl apply`
	// does; `watch`, which reconciles every minute, records only what changed or failed).
	RecordNoop bool
	// LockNotice is told when a stale lock left by a dead process is taken over.
	LockNotice func(string)
	// OnPlan is shown the plan before it is applied, under the lock.
	OnPlan func(*plan.Plan)
}

// Result is what a reconcile found and did.
type Result struct {
	Plan    *plan.Plan
	Applied int
	ApplyID int64
}

// Desired derives what the bus should be from a mesh and the stored hashes.
func (s *Session) Desired(ctx context.Context, m *model.Mesh) (plan.Target, error) {
	hashes, err := s.Store.Hashes(ctx)
	if err != nil {
		return plan.Target{}, err
	}
	return plan.TargetOf(render.Derive(m), hashes), nil
}

// Plan reads the live bus and plans against the mesh, changing nothing.
func (s *Session) Plan(ctx context.Context, m *model.Mesh, o plan.Options) (*plan.Plan, error) {
	if err := s.ensureConn(ctx); err != nil {
		return nil, err
	}
	t, err := s.Desired(ctx, m)
	if err != nil {
		return nil, err
	}
	inv, err := s.Store.Inventory(ctx)
	if err != nil {
		return nil, err
	}
	live, err := ReadLive(ctx, s.API, s.Accounts.Path, holdingOf(inv))
	if err != nil {
		return nil, fmt.Errorf("reading the bus at %s: %w", s.Target.Address(), err)
	}
	if live.AccountsKnown {
		if live.Accounts, live.AccountsNotServed, err = s.Accounts.served(ctx, live.Accounts); err != nil {
			return nil, err
		}
	}
	return plan.Compute(t, live, o), nil
}

// Reconcile plans and, unless asked for a dry run, applies the plan under the apply lock,
// then records the inventory and the outcome in the store. A converged bus makes no
// mutating call, writes no file and reloads nothing.
func (s *Session) Reconcile(ctx context.Context, m *model.Mesh, o RunOptions) (Result, error) {
	if o.DryRun {
		p, err := s.Plan(ctx, m, plan.Options{AllowDataLoss: o.AllowDataLoss})
		return Result{Plan: p}, err
	}
	started := time.Now()
	lock, err := state.AcquireLock(ctx, s.Store.Dir(), o.WaitForLock, o.LockNotice)
	if err != nil {
		err = state.DiskError(err, s.Store.Dir())
		s.recordFailure(ctx, o.Dir, started, nil, err)
		return Result{}, err
	}
	defer lock.Unlock()
	s.locked = true
	defer func() { s.locked = false }()

	removeStaleChecks(s.Accounts.Path, s.logf)
	err = s.rejoin(ctx, m)
	var p *plan.Plan
	if err == nil {
		p, err = s.Plan(ctx, m, plan.Options{AllowDataLoss: o.AllowDataLoss})
	}
	if err != nil {
		s.recordFailure(ctx, o.Dir, started, nil, err)
		return Result{}, err
	}
	res := Result{Plan: p}
	if o.OnPlan != nil {
		o.OnPlan(p)
	}
	if p.Empty() && len(p.Holders) == 0 {
		if o.RecordNoop {
			res.ApplyID, err = s.record(ctx, o.Dir, started, p, "in sync: nothing to do")
		}
		return res, err
	}
	res.Applied, err = Apply(ctx, p, s.API, s.Accounts, o.Progress)
	err = s.diskError(err)
	outcome := "applied"
	switch {
	case errors.Is(err, ErrBlocked):
		outcome = "refused: " + err.Error()
	case errors.Is(err, ErrNotLive):
		outcome = "accounts config written, awaiting the operator's reload"
	case err != nil:
		outcome = "failed: " + err.Error()
	}
	id, rerr := s.record(ctx, o.Dir, started, p, outcome)
	res.ApplyID = id
	if err != nil && rerr != nil {
		// The apply's own error is what the caller reports; the history's must not be lost.
		s.logf("this apply's outcome could not be recorded in the history: %v", rerr)
	}
	if err == nil && rerr == nil {
		// The inventory names the apply that made it, so a holder change can be traced to
		// the commit that caused it.
		if serr := s.Store.SaveInventory(ctx, inventoryOf(m), id); serr != nil {
			err = fmt.Errorf("the bus is updated but recording its inventory failed: %w", serr)
		}
	}
	if err == nil {
		err = rerr
	}
	return res, err
}

func (s *Session) record(ctx context.Context, dir string, started time.Time, p *plan.Plan, outcome string) (int64, error) {
	user, host, commit := state.WhoAmI(dir)
	// Recorded even when ctx has ended (an interrupt): the history is for exactly that.
	return s.Store.RecordApply(context.WithoutCancel(ctx), state.ApplyRecord{
		Started: started, Finished: time.Now(), User: user, Host: host, Commit: commit,
		Summary: p.Summary().String(), Outcome: outcome,
	})
}

func holdingOf(inv state.Inventory) []model.Holding {
	out := make([]model.Holding, 0, len(inv.Holders))
	for _, h := range inv.Holders {
		out = append(out, model.Holding{Seat: h.Seat, Holder: model.Instance{Node: h.Node, Module: h.Module}})
	}
	return out
}

func inventoryOf(m *model.Mesh) state.Inventory {
	var inv state.Inventory
	for _, n := range m.Nodes {
		inv.Nodes = append(inv.Nodes, n.Name)
	}
	for _, i := range m.Instances() {
		inv.Instances = append(inv.Instances, state.Instance{Node: i.Node, Module: i.Module})
	}
	for _, s := range m.Seats {
		inv.Seats = append(inv.Seats, s.Name)
	}
	for _, h := range m.Holding {
		inv.Holders = append(inv.Holders, state.Holder{Seat: h.Seat, Node: h.Holder.Node, Module: h.Holder.Module})
	}
	return inv
}
