package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/jsapi"
	"github.com/meshbus/meshctl/plan"
)

// ErrBlocked is returned when a plan holds a refused change, or deletes more than half of
// what meshctl owns without the operator's leave: an apply then changes nothing.
var ErrBlocked = errors.New("the plan is blocked")

// ErrConflict is returned (wrapped) when an apply performed everything but the objects in
// conflict (same-named objects meshctl does not own) and what depends on them: the bus is
// not what the description says until someone resolves them.
var ErrConflict = errors.New("objects meshctl does not own are in the way")

// ErrStopped is returned (wrapped, beside the cause) when an apply stopped at a failure that
// every change after it would meet too (a full disk): the error says it once, with what was
// and was not done.
var ErrStopped = errors.New("the apply stopped there")

// applyConcurrency is how many API calls an apply keeps in flight within one phase.
const applyConcurrency = 16

// Progress is told about each change as it completes.
type Progress func(done, total int, c plan.Change, err error)

// Apply performs a plan: streams, then consumers, then the accounts config, then consumer
// deletions, then stream deletions. Within a phase calls run concurrently; a phase starts
// only when the one before it has succeeded, so a failure leaves a bus the next apply
// converges. Conflicts are left alone, and the plan holds nothing that depends on them:
// everything else is applied, and the error wraps ErrConflict. It returns how many changes
// were done.
//
// What a plan counted in a stream is history by the time the stream goes: a deletion or a
// replacement runs as drain.go decides, and a renamed seat's queue stops handing out work
// before the accounts config is reloaded.
func Apply(ctx context.Context, p *plan.Plan, api jsapi.API, conf accounts.File, progress Progress) (int, error) {
	return apply(ctx, p, api, conf, progress, nil, nil, nil)
}

// apply is Apply, its calls let through by gate when one follows the connection: then a
// lost connection stops the apply within busReturnWait with one error saying what was and
// was not done, rather than an error per call after each one's timeout. The server's answer
// to each consumer it creates goes into created, when that is not nil, for the verification.
//
// halt, when not nil, is shown each change's error and returns non-nil for one that stops
// the apply (a full disk): every change after it would fail the same way, so the calls not
// yet sent are not, and the apply ends with that one error, not a line per change.
func apply(ctx context.Context, p *plan.Plan, api jsapi.API, conf accounts.File, progress Progress, gate *busGate, created *answers, halt func(error) error) (int, error) {
	if p.Blocked() {
		why := p.Summary().String()
		if p.MassDeleteRefused() {
			why = p.MassDelete.Refused
		}
		if p.OvercommitRefused() {
			why = p.Overcommit.Refused
		}
		return 0, fmt.Errorf("%w: %s; nothing was changed", ErrBlocked, why)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	phases := phasesOf(p)
	conflicts := p.Conflicts()
	total := len(p.Changes) - len(conflicts)
	t := &tally{total: total, progress: progress, halt: halt, cancel: cancel}
	for i, phase := range phases {
		if i == 2 {
			// Before the reload takes holders' grants away, the queues whose work moves stop
			// handing it out (drain.go).
			resume, err := quiesce(ctx, api, phases[4], p.AllowDataLoss)
			defer resume()
			if err != nil {
				return t.counted(), err
			}
		}
		err := runPhase(ctx, phase, func(ctx context.Context, c plan.Change) error {
			if gate == nil {
				err := applyOne(ctx, c, p, api, conf, created)
				t.report(c, err)
				return err
			}
			err := gate.call(ctx, c.Kind != plan.KindAccounts, func(ctx context.Context) error {
				return applyOne(ctx, c, p, api, conf, created)
			})
			if errors.Is(err, ErrBusLost) {
				// One error for the apply, not one per call: stop sending the rest.
				cancel(ErrBusLost)
				return err
			}
			if errors.Is(context.Cause(ctx), ErrBusLost) {
				return ErrBusLost
			}
			t.report(c, err)
			return err
		})
		done := t.counted()
		if errors.Is(context.Cause(ctx), ErrBusLost) {
			return done, fmt.Errorf("%w (%s) and did not come back within %s: %d of %d change(s) were made, %d were not; the next apply continues from there",
				ErrBusLost, gate.addr, busReturnWait, done, total, total-done)
		}
		if stop := t.stoppedBy(); stop != nil {
			return done, fmt.Errorf("%w; %w: %d of %d change(s) were made, %d were not; the next apply continues from there",
				stop, ErrStopped, done, total, total-done)
		}
		if err != nil {
			return done, err
		}
	}
	done := t.counted()
	if len(conflicts) > 0 {
		return done, conflictError(conflicts, done)
	}
	return done, nil
}

// tally counts an apply's changes as they complete, for its progress and its error. halt,
// when not nil, is shown each change's error, and the first it names stops the apply (cancel).
type tally struct {
	total    int
	progress Progress
	halt     func(error) error
	cancel   context.CancelCauseFunc

	mu     sync.Mutex
	done   int
	halted error // the first error halt stopped the apply for
}

// report counts c, done with err, and tells progress.
func (t *tally) report(c plan.Change, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil && t.halt != nil && t.halted == nil {
		if t.halted = t.halt(err); t.halted != nil {
			t.cancel(t.halted)
		}
	}
	if t.halted != nil && err != nil {
		// Said once, by the apply's error; a call cut off by the stop is no failure of
		// its own.
		return
	}
	if err == nil {
		t.done++
	}
	if t.progress != nil {
		t.progress(t.done, t.total, c, err)
	}
}

// counted is how many changes were done.
func (t *tally) counted() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.done
}

// stoppedBy is the error halt stopped the apply for, nil if none.
func (t *tally) stoppedBy() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.halted
}

// phasesOf sorts p's changes into the phases of an apply, in their order: streams created or
// changed, consumers created or changed, the accounts config, consumers deleted, streams
// deleted. Conflicts are in none.
func phasesOf(p *plan.Plan) [5][]plan.Change {
	var phases [5][]plan.Change
	for _, c := range p.Changes {
		switch {
		case c.Action == plan.Conflict:
		case c.Kind == plan.KindStream && c.Action != plan.Delete:
			phases[0] = append(phases[0], c)
		case c.Kind == plan.KindConsumer && c.Action != plan.Delete:
			phases[1] = append(phases[1], c)
		case c.Kind == plan.KindAccounts:
			phases[2] = append(phases[2], c)
		case c.Kind == plan.KindConsumer:
			phases[3] = append(phases[3], c)
		case c.Kind == plan.KindStream:
			phases[4] = append(phases[4], c)
		}
	}
	return phases
}

// conflictError is the error of an apply that made done changes and left conflicts alone.
func conflictError(conflicts []plan.Change, done int) error {
	ids := make([]string, len(conflicts))
	for i, c := range conflicts {
		ids[i] = c.ID()
	}
	return fmt.Errorf("%w: %s left alone, with what depends on them; the other %d change(s) were made",
		ErrConflict, strings.Join(ids, ", "), done)
}

func runPhase(ctx context.Context, changes []plan.Change, do func(context.Context, plan.Change) error) error {
	if len(changes) == 0 {
		return nil
	}
	sem := make(chan struct{}, applyConcurrency)
	var wg sync.WaitGroup
	errs := make([]error, len(changes))
	for i, c := range changes {
		if ctx.Err() != nil {
			errs[i] = ctx.Err()
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = do(ctx, c)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func applyOne(ctx context.Context, c plan.Change, p *plan.Plan, api jsapi.API, conf accounts.File, created *answers) error {
	var err error
	switch c.Kind {
	case plan.KindStream:
		switch c.Action {
		case plan.Create:
			err = api.CreateStream(ctx, *c.After.(*jetstream.StreamConfig))
		case plan.Update:
			if !p.AllowDataLoss {
				err = jsapi.StillKept(ctx, api, *c.After.(*jetstream.StreamConfig))
			}
			if err == nil {
				err = api.UpdateStream(ctx, *c.After.(*jetstream.StreamConfig))
			}
		case plan.Replace, plan.Delete:
			err = drain(ctx, api, c, p.AllowDataLoss)
		}
	case plan.KindConsumer:
		switch c.Action {
		case plan.Create:
			var info *jetstream.ConsumerInfo
			if info, err = api.CreateConsumer(ctx, c.Stream, *c.After.(*jetstream.ConsumerConfig)); err == nil {
				created.add(c.Stream, c.Name, info)
			}
		case plan.Update:
			err = api.UpdateConsumer(ctx, c.Stream, *c.After.(*jetstream.ConsumerConfig))
		case plan.Replace:
			if err = api.DeleteConsumer(ctx, c.Stream, c.Name); err == nil {
				_, err = api.CreateConsumer(ctx, c.Stream, *c.After.(*jetstream.ConsumerConfig))
			}
		case plan.Delete:
			err = api.DeleteConsumer(ctx, c.Stream, c.Name)
		}
	case plan.KindAccounts:
		err = conf.Write(ctx, p.Accounts)
	}
	if err != nil && !errors.Is(err, accounts.ErrNotLive) {
		return fmt.Errorf("%s %s: %w", c.Action, c.ID(), err)
	}
	return err
}
