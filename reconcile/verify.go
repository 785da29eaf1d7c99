package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/plan"
)

// ErrNotConverged is returned (wrapped) when the bus, read again after an apply and a
// second apply of what was still different, still differs from the description in what
// the plan touched: meshctl does not claim what the server does not show.
var ErrNotConverged = errors.New("the bus does not show what was applied")

// touched names what a plan changes, by change ID, and what a verification reads again: the
// whole consumer list of a stream it creates, replaces or deletes, or whose consumers it
// changes by the many; otherwise each consumer it changes, on its own.
//
// A stream whose list would be read, and whose every consumer change was a creation the
// server answered (created), is read by name instead: its consumers' names as the server
// has them now, each created one taken as the server's answer described it. That proves
// what the list would — the server acknowledged exactly this consumer, and serves it still —
// without the server gathering and encoding the config and state of every consumer of the
// stream once more (a first apply's EVENTS has one per module instance).
func touched(p *plan.Plan, created *answers) (ids map[string]bool, scope *readScope) {
	ids = map[string]bool{}
	scope = &readScope{lists: map[string]bool{}, consumers: map[string][]string{}, named: map[string]map[string]*jetstream.ConsumerInfo{}}
	byName := map[string]bool{} // streams every consumer change of which was an answered creation
	for _, c := range p.Changes {
		if c.Action == plan.Conflict {
			continue
		}
		ids[c.ID()] = true
		switch c.Kind {
		case plan.KindStream:
			scope.lists[c.Name] = true
			if c.Action == plan.Replace || c.Action == plan.Delete {
				byName[c.Name] = false
			}
		case plan.KindConsumer:
			scope.consumers[c.Stream] = append(scope.consumers[c.Stream], c.Name)
			ok, seen := byName[c.Stream]
			byName[c.Stream] = (ok || !seen) && c.Action == plan.Create && created.has(c.Stream, c.Name)
		}
	}
	for stream, names := range scope.consumers {
		if scope.lists[stream] || len(names) > readOnItsOwn {
			scope.lists[stream] = true
			delete(scope.consumers, stream)
		}
	}
	for stream := range scope.lists {
		if byName[stream] {
			scope.named[stream] = created.of(stream)
			delete(scope.lists, stream)
		}
	}
	return ids, scope
}

// answers are the server's answers to the consumers an apply created, by stream and name:
// each consumer as the server said it created it. A nil *answers keeps none.
type answers struct {
	mu      sync.Mutex
	streams map[string]map[string]*jetstream.ConsumerInfo
}

func (a *answers) add(stream, name string, info *jetstream.ConsumerInfo) {
	if a == nil || info == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.streams == nil {
		a.streams = map[string]map[string]*jetstream.ConsumerInfo{}
	}
	if a.streams[stream] == nil {
		a.streams[stream] = map[string]*jetstream.ConsumerInfo{}
	}
	a.streams[stream][name] = info
}

func (a *answers) has(stream, name string) bool {
	if a == nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.streams[stream][name] != nil
}

func (a *answers) of(stream string) map[string]*jetstream.ConsumerInfo {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.streams[stream]
}

// readOnItsOwn is how many consumers of one stream a verification reads one request each;
// past it, the stream's list in pages (a few hundred consumers a page) is fewer requests.
const readOnItsOwn = 32

// stillDifferent re-reads what p touched — the stream list, the consumers it changed, the
// accounts config in use — plans t against it, and returns the changes still planned for the
// objects p touched. Only what the plan touched is compared: the consumers not read are not
// planned again either, so the re-read of a small change costs a small read.
//
// created holds the server's answers to the consumers p created (touched reads by name the
// streams they allow); nil reads every list.
func (s *Session) stillDifferent(ctx context.Context, t plan.Target, p *plan.Plan, o plan.Options, created *answers) (*plan.Plan, []plan.Change, error) {
	ids, scope := touched(p, created)
	live, err := s.readLive(ctx, nil, scope, func() (plan.Target, bool) { return t, true })
	if err != nil {
		return nil, nil, fmt.Errorf("reading the bus at %s again to verify the apply: %w", s.Target.Address(), err)
	}
	again := plan.Compute(cutTo(t, ids, scope), live, o)
	var left []plan.Change
	kept := again.Changes[:0:0]
	for _, c := range again.Changes {
		if ids[c.ID()] {
			left = append(left, c)
			kept = append(kept, c)
		}
	}
	// What was not read (the consumers it did not change) is not planned again either.
	again.Changes, again.Holders, again.MassDelete, again.Overcommit = kept, nil, nil, nil
	return again, left, nil
}

// cutTo is t with only the consumers a verification compares: those p touched (ids), and
// every one of a stream whose consumers are read whole or by name. The consumers not read are
// not on the bus as read, and planning each of a large mesh's tens of thousands of them as a
// creation, only for the creations to be dropped, was most of a small change's verification.
func cutTo(t plan.Target, ids map[string]bool, scope *readScope) plan.Target {
	bus := *t.Bus
	bus.Consumers = nil
	for _, c := range t.Bus.Consumers {
		if scope.lists[c.Stream] || scope.named[c.Stream] != nil || ids[plan.Change{Kind: plan.KindConsumer, Stream: c.Stream, Name: c.Name()}.ID()] {
			bus.Consumers = append(bus.Consumers, c)
		}
	}
	t.Bus = &bus
	return t
}

// verify proves an apply of p: what it touched is read again and must show no change left.
// What still differs is applied once more (a call the server acknowledged and then lost, a
// consumer created as the server went down) and read again; what differs after that is an
// error wrapping ErrNotConverged, naming each object. It returns the changes made again.
func (s *Session) verify(ctx context.Context, t plan.Target, p *plan.Plan, o plan.Options, progress Progress, created *answers) (int, error) {
	again, left, err := s.stillDifferent(ctx, t, p, o, created)
	if err != nil || len(left) == 0 {
		return 0, err
	}
	s.logf("the bus read again after the apply still differs in %d object(s) (%s); applying them once more", len(left), ids(left))
	gate := watchBus(s.Conn.Conn, s.Target.Address())
	n, err := apply(ctx, again, s.API, s.Accounts, progress, gate, nil, s.halting)
	gate.stop()
	if err != nil {
		return n, err
	}
	// Read again in full: what differed once is read as the server serves it now.
	if _, left, err = s.stillDifferent(ctx, t, p, o, nil); err != nil || len(left) == 0 {
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
