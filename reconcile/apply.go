package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/plan"
)

// ErrBlocked is returned when a plan holds a conflict or a refused change: an apply does all
// of a plan or none of it.
var ErrBlocked = errors.New("the plan is blocked")

// applyConcurrency is how many API calls an apply keeps in flight within one phase.
const applyConcurrency = 16

// Progress is told about each change as it completes.
type Progress func(done, total int, c plan.Change, err error)

// Apply performs a plan: streams, then consumers, then the accounts config, then consumer
// deletions, then stream deletions. Within a phase calls run concurrently; a phase starts
// only when the one before it has succeeded, so a failure leaves a bus the next apply
// converges. It returns how many changes were done.
//
// What a plan counted in a stream is history by the time the stream goes: a deletion or a
// replacement runs as drain.go decides, and a renamed seat's queue stops handing out work
// before the accounts config is reloaded.
func Apply(ctx context.Context, p *plan.Plan, api API, accounts Accounts, progress Progress) (int, error) {
	if p.Blocked() {
		return 0, fmt.Errorf("%w: %s; nothing was changed", ErrBlocked, p.Summary())
	}
	var phases [5][]plan.Change
	for _, c := range p.Changes {
		switch {
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
	total := len(p.Changes)
	var mu sync.Mutex
	done := 0
	report := func(c plan.Change, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			done++
		}
		if progress != nil {
			progress(done, total, c, err)
		}
	}
	for i, phase := range phases {
		if i == 2 {
			// Before the reload takes holders' grants away, the queues whose work moves stop
			// handing it out (drain.go).
			resume, err := quiesce(ctx, api, phases[4], p.AllowDataLoss)
			defer resume()
			if err != nil {
				return done, err
			}
		}
		if err := runPhase(ctx, phase, func(ctx context.Context, c plan.Change) error {
			err := applyOne(ctx, c, p, api, accounts)
			report(c, err)
			return err
		}); err != nil {
			return done, err
		}
	}
	return done, nil
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

func applyOne(ctx context.Context, c plan.Change, p *plan.Plan, api API, accounts Accounts) error {
	var err error
	switch c.Kind {
	case plan.KindStream:
		switch c.Action {
		case plan.Create:
			err = api.CreateStream(ctx, *c.After.(*jetstream.StreamConfig))
		case plan.Update:
			err = api.UpdateStream(ctx, *c.After.(*jetstream.StreamConfig))
		case plan.Replace, plan.Delete:
			err = drain(ctx, api, c, p.AllowDataLoss)
		}
	case plan.KindConsumer:
		switch c.Action {
		case plan.Create:
			err = api.CreateConsumer(ctx, c.Stream, *c.After.(*jetstream.ConsumerConfig))
		case plan.Update:
			err = api.UpdateConsumer(ctx, c.Stream, *c.After.(*jetstream.ConsumerConfig))
		case plan.Replace:
			if err = api.DeleteConsumer(ctx, c.Stream, c.Name); err == nil {
				err = api.CreateConsumer(ctx, c.Stream, *c.After.(*jetstream.ConsumerConfig))
			}
		case plan.Delete:
			err = api.DeleteConsumer(ctx, c.Stream, c.Name)
		}
	case plan.KindAccounts:
		err = accounts.write(ctx, p.Accounts)
	}
	if err != nil && !errors.Is(err, ErrNotLive) {
		return fmt.Errorf("%s %s: %w", c.Action, c.ID(), err)
	}
	return err
}
