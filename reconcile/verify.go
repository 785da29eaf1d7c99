package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/meshbus/meshctl/plan"
)

// ErrNotConverged is returned (wrapped) when the bus, read again after an apply and a
// second apply of what was still different, still differs from the description in what
// the plan touched: meshctl does not claim what the server does not show.
var ErrNotConverged = errors.New("the bus does not show what was applied")

// touched names what a plan changes, by change ID, and what a verification reads again: the
// whole consumer list of a stream it creates, replaces or deletes, or whose consumers it
// changes by the many; otherwise each consumer it changes, on its own.
func touched(p *plan.Plan) (ids map[string]bool, scope *readScope) {
	ids = map[string]bool{}
	scope = &readScope{lists: map[string]bool{}, consumers: map[string][]string{}}
	for _, c := range p.Changes {
		if c.Action == plan.Conflict {
			continue
		}
		ids[c.ID()] = true
		switch c.Kind {
		case plan.KindStream:
			scope.lists[c.Name] = true
		case plan.KindConsumer:
			scope.consumers[c.Stream] = append(scope.consumers[c.Stream], c.Name)
		}
	}
	for stream, names := range scope.consumers {
		if scope.lists[stream] || len(names) > readOnItsOwn {
			scope.lists[stream] = true
			delete(scope.consumers, stream)
		}
	}
	return ids, scope
}

// readOnItsOwn is how many consumers of one stream a verification reads one request each;
// past it, the stream's list in pages (a few hundred consumers a page) is fewer requests.
const readOnItsOwn = 32

// stillDifferent re-reads what p touched — the stream list, the consumers it changed, the
// accounts config in use — plans t against it, and returns the changes still planned for the
// objects p touched. Only what the plan touched is compared: the consumers not read are not
// planned again either, so the re-read of a small change costs a small read.
func (s *Session) stillDifferent(ctx context.Context, t plan.Target, p *plan.Plan, o plan.Options) (*plan.Plan, []plan.Change, error) {
	ids, scope := touched(p)
	live, err := s.readLive(ctx, nil, scope)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the bus at %s again to verify the apply: %w", s.Target.Address(), err)
	}
	again := plan.Compute(t, live, o)
	var left []plan.Change
	kept := again.Changes[:0:0]
	for _, c := range again.Changes {
		if ids[c.ID()] {
			left = append(left, c)
			kept = append(kept, c)
		}
	}
	// What was not read (the consumers it did not change) is not planned again either.
	again.Changes, again.Holders, again.MassDelete = kept, nil, nil
	return again, left, nil
}

// verify proves an apply of p: what it touched is read again and must show no change left.
// What still differs is applied once more (a call the server acknowledged and then lost, a
// consumer created as the server went down) and read again; what differs after that is an
// error wrapping ErrNotConverged, naming each object. It returns the changes made again.
func (s *Session) verify(ctx context.Context, t plan.Target, p *plan.Plan, o plan.Options, progress Progress) (int, error) {
	again, left, err := s.stillDifferent(ctx, t, p, o)
	if err != nil || len(left) == 0 {
		return 0, err
	}
	s.logf("the bus read again after the apply still differs in %d object(s) (%s); applying them once more", len(left), ids(left))
	gate := watchBus(s.Conn.Conn, s.Target.Address())
	n, err := apply(ctx, again, s.API, s.Accounts, progress, gate)
	gate.stop()
	if err != nil {
		return n, err
	}
	if _, left, err = s.stillDifferent(ctx, t, p, o); err != nil || len(left) == 0 {
		return n, err
	}
	return n, fmt.Errorf("%w: %s still differ(s) after applying twice: %s", ErrNotConverged, ids(left), reasons(left))
}

func ids(cs []plan.Change) string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.ID()
	}
	return strings.Join(out, ", ")
}

func reasons(cs []plan.Change) string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.ID() + " (" + string(c.Action) + ": " + c.Reason + ")"
	}
	return strings.Join(out, "; ")
}
