package plan

import (
	"testing"

	"github.com/meshbus/meshctl/render"
)

// A renamed seat whose new work queue's name is taken by someone else's stream: the work
// cannot move there, so the old queue stays, with its consumers and its messages, until the
// conflict is resolved. Deleting it would lose the work the rename is meant to keep.
func TestARenamedSeatsQueueStaysWhileItsNewQueueIsInConflict(t *testing.T) {
	t.Parallel()
	before := meshOf(t, "nodes:\n  - name: one\nseats:\n  - name: postbox\n    accepts: [send]\n")
	after := meshOf(t, "nodes:\n  - name: one\nseats:\n  - name: mailbox\n    formerly: [postbox]\n    accepts: [send]\n")
	live := serverView(LiveOf(before))
	for i := range live.Streams {
		if live.Streams[i].Config.Name == render.SeatStreamName("postbox") {
			live.Streams[i].Messages = 3
		}
	}
	foreign := live.Streams[0]
	foreign.Config.Name = render.SeatStreamName("mailbox")
	foreign.Config.Subjects = []string{"someone.elses.>"}
	foreign.Config.Metadata = nil
	live.Streams = append(live.Streams, foreign)

	p := Compute(after, live, Options{})
	for _, c := range p.Changes {
		if c.Kind == KindStream && c.Name == render.SeatStreamName("postbox") && c.Action == Delete {
			t.Fatalf("the old queue is deleted though its work has nowhere to go: %s (%s)", c.ID(), c.Reason)
		}
		if c.Kind == KindConsumer && c.Stream == render.SeatStreamName("postbox") {
			t.Fatalf("the old queue's consumer is changed: %s %s", c.Action, c.ID())
		}
	}
	if len(p.Conflicts()) != 1 {
		t.Fatalf("want the new queue's name reported as the one conflict, got %d", len(p.Conflicts()))
	}
}
