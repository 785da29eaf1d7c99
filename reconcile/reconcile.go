package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// RunOptions say what one reconcile does.
type RunOptions struct {
	AllowDataLoss bool
	// AllowMassDelete lets an apply delete more than half of what meshctl owns.
	AllowMassDelete bool
	// AllowReissue lets an apply change bus.auth while hosts log in with credentials of the
	// old kind: those are revoked, and each host needs a new membership.
	AllowReissue bool
	// AllowOvercommit lets an apply create or change streams whose byte limits sum to more
	// than the bus says its JetStream has.
	AllowOvercommit bool
	Progress        Progress
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
	// Expect, when set, is asked about the plan and its target before anything is applied,
	// under the lock: an error stops the apply with nothing changed (a saved plan the bus
	// no longer matches, `apply --plan`).
	Expect func(*plan.Plan, plan.Target) error
}

// Result is what a reconcile found and did.
type Result struct {
	Plan    *plan.Plan
	Applied int
	ApplyID int64
	// GraceEnds is when the first grace of a seat's former holder still running ends
	// (render.AckGrace): a reconcile then takes its acknowledgements away. Zero when none runs.
	GraceEnds time.Time
}

// Desired derives what the bus should be from a mesh and the stored hashes.
func (s *Session) Desired(ctx context.Context, m *model.Mesh) (plan.Target, error) {
	if !s.opts.ReadOnly {
		if err := systemCredential(ctx, s.Store, m, s.opts.Cost); err != nil {
			return plan.Target{}, err
		}
	}
	return desired(ctx, s.Store, m)
}

// desired is the target store renders for m: its hashes, and the principals it knows.
func desired(ctx context.Context, store *state.Store, m *model.Mesh) (plan.Target, error) {
	hashes, err := store.Hashes(ctx)
	if err != nil {
		return plan.Target{}, err
	}
	known, err := store.Known(ctx)
	if err != nil {
		return plan.Target{}, err
	}
	id, err := store.ID(ctx)
	if err != nil {
		return plan.Target{}, err
	}
	graces, err := ackGraces(ctx, store, m, time.Now())
	if err != nil {
		return plan.Target{}, err
	}
	t := plan.TargetOfMesh(m, graces, hashes).ForMesh(id)
	t.Known = known
	if m.Bus.Auth != model.AuthJWT {
		users, err := store.JWTUsers(ctx)
		if err != nil {
			return plan.Target{}, err
		}
		for u := range users {
			t.JWTUsers = append(t.JWTUsers, u)
		}
	}
	return t, nil
}

// Plan reads the live bus and plans against the mesh, changing nothing.
func (s *Session) Plan(ctx context.Context, m *model.Mesh, o plan.Options) (*plan.Plan, error) {
	p, _, err := s.plan(ctx, m, o)
	return p, err
}

// PlanWithTarget is Plan, returning the target it planned for too: what a saved plan
// records (plan.Save).
func (s *Session) PlanWithTarget(ctx context.Context, m *model.Mesh, o plan.Options) (*plan.Plan, plan.Target, error) {
	return s.plan(ctx, m, o)
}

// plan is Plan, returning the target it planned for too.
func (s *Session) plan(ctx context.Context, m *model.Mesh, o plan.Options) (*plan.Plan, plan.Target, error) {
	if err := s.ensureConn(ctx); err != nil {
		return nil, plan.Target{}, err
	}
	holders, err := s.Store.Holders(ctx)
	if err != nil {
		return nil, plan.Target{}, err
	}
	// What the bus should be is derived while the bus is read: the one is meshctl's work,
	// the other mostly a wait on the server, and a converged plan is little else.
	var t plan.Target
	var terr error
	derived := make(chan struct{})
	go func() {
		defer close(derived)
		t, terr = s.Desired(ctx, m)
	}()
	live, err := s.readLive(ctx, holdingOf(holders), nil, func() (plan.Target, bool) {
		<-derived
		return t, terr == nil
	})
	<-derived
	if terr != nil {
		return nil, t, terr
	}
	if err != nil {
		return nil, t, fmt.Errorf("reading the bus at %s: %w", s.Target.Address(), err)
	}
	p := plan.Compute(t, live, o)
	if s.jwt != nil {
		if err := s.planJWT(ctx, m, p, o); err != nil {
			return nil, t, err
		}
	}
	return p, t, nil
}

// readLive reads the bus (the consumers of only what scope names, when it is not nil) and
// the accounts config in use, and proves which accounts config the server serves: a file
// written and never loaded is no file in force. The proof, a login of its own, is made while
// the streams and consumers are listed; a session's first full read is the one its predial
// listed, where there is one. target gives the target the plan is for, once it is derived (ok
// false where there is none): a config in use known to be its rendering is not read whole
// (plan.Live.AccountsRendered), and otherwise the rendering is made while the bus is read.
func (s *Session) readLive(ctx context.Context, holdings []model.Holding, scope *readScope, target func() (t plan.Target, ok bool)) (plan.Live, error) {
	var conf []byte
	var known, rendered bool
	var notServed string
	var aerr error
	proved := make(chan struct{})
	go func() {
		defer close(proved)
		t, ok := target()
		if ok && s.Accounts.Path != "" {
			notServed, rendered, aerr = s.Accounts.ServedAsRendered(ctx, t.RenderingDigest)
			if known = rendered; rendered {
				return
			}
		}
		if ok {
			// The plan shows the change user by user, and an apply writes the rendering:
			// made here, while the bus is still being listed, rather than after.
			t.Rendering()
		}
		conf, known, aerr = readAccounts(s.Accounts.Path)
		if aerr == nil && known {
			conf, notServed, aerr = s.Accounts.Served(ctx, conf)
		}
	}()
	live, prelisted, err := plan.Live{}, false, error(nil)
	if scope == nil {
		live, prelisted, err = s.opts.Predial.listing()
	}
	if !prelisted {
		live, err = readBus(ctx, s.API, holdings, scope)
	}
	live.Holding = holdings
	<-proved
	if err != nil {
		return live, err
	}
	live.Accounts, live.AccountsKnown, live.AccountsNotServed = conf, known, notServed
	live.ReadUsers = accounts.ReadServedUsers
	askBus(ctx, s.API, s.Embedded, &live)
	live.AccountsRendered = rendered
	return live, aerr
}

// Reconcile plans and, unless asked for a dry run, applies the plan under the apply lock,
// reads back what it touched (applying once more what still differs), then records the
// inventory and the outcome in the store. A converged bus makes no mutating call, writes
// no file and reloads nothing. It returns nil only when the bus, read again, shows the
// plan applied; an error wrapping ErrConflict when everything but the conflicts (and what
// depends on them) was.
//
// It is the reconcile of a cycle (cycle.go) on this session and m, taking the locks and
// releasing them as a cycle does; it loads and connects nothing, which Cycles.Run does.
func (s *Session) Reconcile(ctx context.Context, m *model.Mesh, o RunOptions) (Result, error) {
	var l cycleLock
	defer l.release()
	return s.reconcile(ctx, &l, m, o)
}

// reconcile is Reconcile inside a cycle that holds l, the apply lock, or takes it here; the
// caller releases l.
func (s *Session) reconcile(ctx context.Context, l *cycleLock, m *model.Mesh, o RunOptions) (Result, error) {
	opts := plan.Options{AllowDataLoss: o.AllowDataLoss, AllowMassDelete: o.AllowMassDelete, AllowReissue: o.AllowReissue,
		AllowOvercommit: o.AllowOvercommit}
	started := time.Now()
	p, t, err := s.lockAndPlan(ctx, l, m, opts, o)
	if err != nil {
		s.recordFailure(ctx, o.Dir, started, nil, err)
		return Result{}, err
	}
	if o.OnPlan != nil {
		o.OnPlan(p)
	}
	if p.Empty() && len(p.Holders) == 0 {
		res := Result{Plan: p, GraceEnds: render.FirstGraceEnd(p.Graces)}
		if o.RecordNoop {
			res.ApplyID, err = s.recordConverged(ctx, o.Dir, started, p)
		}
		return res, err
	}
	res, err := s.applyAndRecord(ctx, m, p, t, opts, o, started)
	// A handover this apply recorded begins a grace, which ends one ack wait from the record.
	res.GraceEnds = s.graceEnds(ctx, m)
	return res, err
}

// lockAndPlan takes the apply lock unless l holds it, makes sure the embedded bus is still
// served, takes the apply lock on the bus, plans, and asks o.Expect about the plan.
func (s *Session) lockAndPlan(ctx context.Context, l *cycleLock, m *model.Mesh, opts plan.Options, o RunOptions) (*plan.Plan, plan.Target, error) {
	if err := l.take(ctx, s, o.WaitForLock, o.LockNotice); err != nil {
		return nil, plan.Target{}, err
	}
	if s.jwt == nil {
		accounts.RemoveStaleChecks(s.Accounts.Path, s.logf)
	}
	err := s.rejoin(ctx, m, l)
	if err == nil {
		err = s.takeBusLock(ctx, o.WaitForLock, o.LockNotice)
	}
	var p *plan.Plan
	var t plan.Target
	if err == nil {
		p, t, err = s.plan(ctx, m, opts)
	}
	if err == nil && o.Expect != nil {
		err = o.Expect(p, t)
	}
	return p, t, err
}

// applyAndRecord applies p, a plan for t that changes something, reads back what it touched,
// and records the outcome in the history and, where the bus took the plan, m's inventory.
func (s *Session) applyAndRecord(ctx context.Context, m *model.Mesh, p *plan.Plan, t plan.Target, opts plan.Options, o RunOptions, started time.Time) (Result, error) {
	res := Result{Plan: p}
	// The server's answers to the consumers it creates stand in for re-reading them in full,
	// on one server (touched). On a cluster a consumer's name is the meta leader's as soon as
	// it is assigned, before it runs on its peers, and the full list asks each consumer's
	// leader: there the list is read.
	var created *answers
	if s.Target.Others == "" {
		created = &answers{}
	}
	gate := watchBus(s.Conn.Conn, s.Target.Address())
	err := s.revokeReissued(ctx, p, t)
	if err == nil {
		res.Applied, err = apply(ctx, withoutAccountJWT(p), s.API, s.Accounts, o.Progress, gate, created, s.halting)
	}
	if err == nil {
		var n int
		n, err = s.applyJWT(ctx, p)
		res.Applied += n
	}
	if err == nil && len(t.JWTUsers) > 0 {
		// The accounts config is served (apply proved the reload): the user JWTs it
		// supersedes go, and the read-back compares with a store that holds none.
		err = s.dropJWTUsers(ctx, p, t)
		t.JWTUsers = nil
	}
	gate.stop()
	if err == nil || errors.Is(err, ErrConflict) {
		// Claimed only once seen: a call the server acknowledged is not yet a bus that
		// serves it (a consumer created as the server went down).
		n, verr := s.verify(ctx, t, p, opts, o.Progress, created)
		res.Applied += n
		if verr != nil {
			err = errors.Join(err, verr) // keeps a conflict said beside it
		}
	}
	err = s.diskError(err)
	id, rerr := s.record(ctx, o.Dir, started, p, historyOutcome(err))
	res.ApplyID = id
	if err != nil && rerr != nil {
		// The apply's own error is what the caller reports; the history's must not be lost.
		s.logf("this apply's outcome could not be recorded in the history: %v", rerr)
	}
	if (err == nil || errors.Is(err, ErrConflict)) && rerr == nil {
		// The inventory names the apply that made it, so a holder change can be traced to
		// the commit that caused it.
		if serr := s.Store.SaveInventory(ctx, inventoryOf(m), id); serr != nil {
			err = fmt.Errorf("the bus is updated but recording its inventory failed: %w", serr)
		}
	}
	if err == nil || errors.Is(err, ErrConflict) && rerr != nil {
		err = errors.Join(err, rerr)
	}
	return res, err
}

// historyOutcome is how the history names the end of an apply that ended with err.
func historyOutcome(err error) string {
	switch {
	case errors.Is(err, ErrBlocked):
		return "refused: " + err.Error()
	case errors.Is(err, ErrConflict):
		return "applied except what is in conflict: " + err.Error()
	case errors.Is(err, accounts.ErrNotLive):
		return "accounts config written, awaiting the operator's reload"
	case err != nil:
		return "failed: " + err.Error()
	}
	return "applied"
}

func (s *Session) record(ctx context.Context, dir string, started time.Time, p *plan.Plan, outcome string) (int64, error) {
	return s.recordApply(ctx, dir, started, p, outcome, false)
}

// recordConverged records an apply that found nothing to do, in this store's history alone.
func (s *Session) recordConverged(ctx context.Context, dir string, started time.Time, p *plan.Plan) (int64, error) {
	return s.recordApply(ctx, dir, started, p, "in sync: nothing to do", true)
}

func (s *Session) recordApply(ctx context.Context, dir string, started time.Time, p *plan.Plan, outcome string, converged bool) (int64, error) {
	user, host, commit := state.WhoAmI(dir)
	// Recorded even when ctx has ended (an interrupt): the history is for exactly that.
	return s.Store.RecordApply(context.WithoutCancel(ctx), state.ApplyRecord{
		Started: started, Finished: time.Now(), User: user, Host: host, Commit: commit,
		Summary: p.Summary().String(), Outcome: outcome, Converged: converged,
	})
}

func holdingOf(holders []state.Holder) []model.Holding {
	out := make([]model.Holding, 0, len(holders))
	for _, h := range holders {
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
