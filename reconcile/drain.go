package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/jsapi"
	"github.com/meshbus/meshctl/plan"
)

// ErrNotEmpty is a stream that holds messages when its deletion or replacement runs, which the
// operator has not allowed to lose.
var ErrNotEmpty = errors.New("the stream is not empty")

// drainStep is one step of taking a stream out of service.
type drainStep int

const (
	// pauseConsumers stops every consumer of the stream handing out messages.
	pauseConsumers drainStep = iota
	// awaitAcks waits until what they handed out is acknowledged, or its ack wait is over.
	awaitAcks
	// stopIntake moves the stream's subjects away: publishers are no longer answered by it.
	stopIntake
	// moveAndDelete copies each message into the move's stream, readdressed, and deletes it
	// from this one once the other acknowledged it.
	moveAndDelete
	// seal makes the stream refuse every message from here on.
	seal
	// moveRest copies what came in before the seal (sealed, nothing can be deleted from it).
	moveRest
	// expectEmpty reads the stream again and fails the change unless it holds nothing.
	expectEmpty
	// deleteStream deletes the stream.
	deleteStream
	// createStream creates it anew, as the change's After (a replacement).
	createStream
)

var drainStepNames = [...]string{
	pauseConsumers: "pause its consumers",
	awaitAcks:      "wait for their deliveries to be acknowledged",
	stopIntake:     "move its subjects away",
	moveAndDelete:  "move its messages, deleting each once moved",
	seal:           "seal it",
	moveRest:       "move what came in before the seal",
	expectEmpty:    "expect it empty",
	deleteStream:   "delete it",
	createStream:   "create it anew",
}

func (s drainStep) String() string { return drainStepNames[s] }

// drainSequence is how a stream's deletion or replacement is performed: Quiesce before the
// accounts config is reloaded, Steps when the change itself runs.
type drainSequence struct {
	Quiesce, Steps []drainStep
}

// sequenceFor decides how change c (a stream's Delete or Replace) is performed. allowLoss is
// the operator's leave to lose messages.
//
// A renamed seat's queue (c.Move) moves its work. Its consumers stop handing work out before
// the reload, while the holder may still acknowledge what it has: the reload takes its grants
// on the old queue away, and a delivery it could no longer acknowledge would be moved and
// delivered again. After the reload nobody may publish to the old name, and the queue holds
// only work never handed out. Its subjects go, each message moves and is deleted once the new
// queue acknowledged it — a move cut short resumes where it stopped — and the seal catches
// anything routed to it just before its subjects went, which moves too. Data loss is never at
// stake, so leave to lose it changes nothing.
//
// Any other deletion or replacement, unless loss is allowed, stops taking messages and must
// then be seen empty: if it is not, its subjects are given back and the change fails, leaving
// the stream as it was. Only an empty stream is sealed, and if something slipped in before the
// seal the change fails again. With leave to lose messages, it is deleted at once.
func sequenceFor(c plan.Change, allowLoss bool) drainSequence {
	if c.Move != nil {
		return drainSequence{
			Quiesce: []drainStep{pauseConsumers, awaitAcks},
			Steps:   []drainStep{stopIntake, moveAndDelete, seal, moveRest, deleteStream},
		}
	}
	var steps []drainStep
	if !allowLoss {
		steps = []drainStep{stopIntake, expectEmpty, seal, expectEmpty}
	}
	steps = append(steps, deleteStream)
	if c.Action == plan.Replace {
		steps = append(steps, createStream)
	}
	return drainSequence{Steps: steps}
}

// drain performs c, a stream's Delete or Replace, in the steps sequenceFor decides. What the
// plan counted is history by the time the change runs, since publishers kept publishing: so the
// stream is made unable to take messages, read again, and deleted only when what it holds is
// nothing or safely elsewhere. What each step relies on the server to do, and why sourcing the
// old queue into the new one would lose messages, is docs/nats-behaviour.md, "Taking a stream
// out of service".
func drain(ctx context.Context, api jsapi.API, c plan.Change, allowLoss bool) error {
	d := &drainer{api: api, c: c}
	for _, step := range sequenceFor(c, allowLoss).Steps {
		if err := d.do(ctx, step); err != nil {
			return err
		}
	}
	return nil
}

// quiesce runs the Quiesce steps of every change that has them, before the accounts config is
// reloaded. resume lets the paused consumers deliver again; it is for an apply that stops
// before their stream is deleted (a refused reload must not leave a seat's holder without
// work), and does nothing to a consumer gone with its stream. A pause also ends by itself,
// pauseFor after it began, should meshctl stop before either.
func quiesce(ctx context.Context, api jsapi.API, changes []plan.Change, allowLoss bool) (resume func(), err error) {
	var ds []*drainer
	resume = func() {
		for _, d := range ds {
			d.resume(context.WithoutCancel(ctx))
		}
	}
	for _, c := range changes {
		steps := sequenceFor(c, allowLoss).Quiesce
		if len(steps) == 0 {
			continue
		}
		d := &drainer{api: api, c: c}
		ds = append(ds, d)
		for _, step := range steps {
			if err := d.do(ctx, step); err != nil {
				return resume, fmt.Errorf("%s %s: %w", c.Action, c.ID(), err)
			}
		}
	}
	return resume, nil
}

// pauseFor bounds a pause: long enough for the reload that follows it, short enough that a
// meshctl stopped in between leaves the seat's holder without work only briefly.
const pauseFor = 2 * time.Minute

// awaitPoll is how often awaitAcks reads the consumers again.
const awaitPoll = 20 * time.Millisecond

// drainer carries out one stream's steps, remembering what it found and did.
type drainer struct {
	api jsapi.API
	c   plan.Change
	// found is the stream's config as found, before its subjects were moved away; created
	// names its messages' copies.
	found   jetstream.StreamConfig
	created time.Time
	// gone: the stream was not there; away: its subjects were moved away; sealed: it is.
	gone, away, sealed bool
	paused             []string
}

func (d *drainer) do(ctx context.Context, step drainStep) error {
	if d.gone && step != createStream {
		return nil // already deleted: the goal is reached
	}
	name := d.c.Name
	switch step {
	case pauseConsumers:
		if _, err := d.info(ctx); err != nil || d.gone {
			return err
		}
		consumers, err := d.api.ListConsumers(ctx, name)
		if err != nil {
			return err
		}
		until := time.Now().Add(pauseFor)
		for _, ci := range consumers {
			if err := d.api.PauseConsumer(ctx, name, ci.Name, until); err != nil {
				return fmt.Errorf("pausing consumer %s/%s: %w", name, ci.Name, err)
			}
			d.paused = append(d.paused, ci.Name)
		}
	case awaitAcks:
		return d.awaitAcks(ctx)
	case stopIntake:
		info, err := d.info(ctx)
		if err != nil || d.gone {
			return err
		}
		d.found, d.created, d.sealed = info.Config, info.Created, info.Config.Sealed
		if d.sealed {
			return nil // it takes nothing already
		}
		away := info.Config
		away.Subjects = nil
		if err := d.api.UpdateStream(ctx, away); err != nil {
			return fmt.Errorf("moving the subjects of %s away: %w", name, err)
		}
		d.away = true
	case moveAndDelete:
		// A stream sealed by a move cut short refuses deletes: what that move copied is copied
		// again, and the new queue drops the repeat by its id.
		return d.move(ctx, !d.sealed)
	case seal:
		info, err := d.info(ctx)
		if err != nil || d.gone {
			return err
		}
		if !info.Config.Sealed {
			sealed := info.Config
			sealed.Sealed = true
			if err := d.api.UpdateStream(ctx, sealed); err != nil {
				return fmt.Errorf("sealing %s: %w", name, err)
			}
		}
		d.sealed = true
	case moveRest:
		return d.move(ctx, false)
	case expectEmpty:
		info, err := d.info(ctx)
		if err != nil || d.gone || info.State.Msgs == 0 {
			return err
		}
		return d.notEmpty(ctx, info.State.Msgs)
	case deleteStream:
		return d.api.DeleteStream(ctx, name)
	case createStream:
		return d.api.CreateStream(ctx, *d.c.After.(*jetstream.StreamConfig))
	}
	return nil
}

// info reads the stream now, noting when it is gone.
func (d *drainer) info(ctx context.Context) (*jetstream.StreamInfo, error) {
	info, err := d.api.StreamInfo(ctx, d.c.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		d.gone = true
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", d.c.Name, err)
	}
	return info, nil
}

// awaitAcks waits until no consumer of the stream has a delivery out that someone could still
// acknowledge, for at most the longest ack wait among them: past it the server would hand the
// message out again itself, so the holder is taken not to have done it.
func (d *drainer) awaitAcks(ctx context.Context) error {
	var deadline time.Time
	for {
		consumers, err := d.api.ListConsumers(ctx, d.c.Name)
		if err != nil {
			return err
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(longestAckWait(consumers))
		}
		if !handedOut(consumers) || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(awaitPoll):
		}
	}
}

// handedOut reports whether a consumer has deliveries out that its taker can still
// acknowledge: a push consumer nobody is bound to has no taker left to do it.
func handedOut(consumers []*jetstream.ConsumerInfo) bool {
	for _, ci := range consumers {
		if ci.NumAckPending > 0 && (ci.Config.DeliverSubject == "" || ci.PushBound) {
			return true
		}
	}
	return false
}

// longestAckWait is the longest ack wait of the consumers, the server's 30 s for one unset.
func longestAckWait(consumers []*jetstream.ConsumerInfo) time.Duration {
	var longest time.Duration
	for _, ci := range consumers {
		longest = max(longest, plan.NormalizeConsumer(ci.Config).AckWait)
	}
	return longest
}

// move copies every message of the stream into the move's stream, in order, deleting each
// from here once the other acknowledged it when deleteEach (a sealed stream refuses deletes).
func (d *drainer) move(ctx context.Context, deleteEach bool) error {
	name, m := d.c.Name, d.c.Move
	for seq := uint64(0); ; {
		msg, err := d.api.NextMsg(ctx, name, seq)
		if errors.Is(err, jsapi.ErrNoMessage) {
			return nil
		}
		if err != nil {
			return err
		}
		out, err := copyOf(*m, name, d.created, msg)
		if err != nil {
			return err
		}
		ack, err := d.api.Publish(ctx, out)
		if err != nil {
			return fmt.Errorf("moving message %d of %s to %s: %w", msg.Sequence, name, m.Stream, err)
		}
		if ack.Stream != m.Stream {
			return fmt.Errorf("moving message %d of %s: stream %s took it as %s, not %s", msg.Sequence, name, ack.Stream, out.Subject, m.Stream)
		}
		if deleteEach {
			if err := d.api.DeleteMsg(ctx, name, msg.Sequence); err != nil {
				return err
			}
		}
		seq = msg.Sequence + 1
	}
}

// copyOf is the message a move publishes for msg, a message of stream (created at created):
// readdressed to the seat's new name, with msg's headers and data. Its Nats-Msg-Id is the
// sender's own when it set one — a sender that also published it under the new name is then
// not served twice — and otherwise names where it came from, so a copy repeated after a move
// was cut short is dropped by the new queue as a duplicate. The sender's Nats-Expected-*
// conditions were checked where it published, and would not hold in another stream.
func copyOf(m plan.Move, stream string, created time.Time, msg *jetstream.RawStreamMsg) (*nats.Msg, error) {
	subject, ok := m.Readdress(msg.Subject)
	if !ok {
		return nil, fmt.Errorf("message %d of %s is addressed to %s, outside %s>, and cannot be moved to %s",
			msg.Sequence, stream, msg.Subject, m.From, m.Stream)
	}
	out := nats.NewMsg(subject)
	for k, v := range msg.Header {
		if !strings.HasPrefix(k, "Nats-Expected-") {
			out.Header[k] = slices.Clone(v)
		}
	}
	if out.Header.Get(jetstream.MsgIDHeader) == "" {
		out.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("meshctl.move.%s.%d.%d", stream, created.UnixNano(), msg.Sequence))
	}
	out.Data = msg.Data
	return out, nil
}

// notEmpty fails the change for a stream found holding n messages. One not yet sealed gets its
// subjects back, so it is left as it was.
func (d *drainer) notEmpty(ctx context.Context, n uint64) error {
	doing := "deleting"
	if d.c.Action == plan.Replace {
		doing = "replacing"
	}
	counted := ""
	if d.c.AtStake != nil {
		counted = fmt.Sprintf(" (the plan counted %d)", d.c.AtStake.Messages)
	}
	held := fmt.Sprintf("%s holds %s now%s: %s it would lose them", d.c.Name, messages(n), counted, doing)
	if d.sealed {
		// Sealing is final: what came in before the seal stays, and the stream takes no more.
		return fmt.Errorf("%w: %s; it is sealed and takes no more messages (pass --allow-data-loss to do it anyway)", ErrNotEmpty, held)
	}
	if d.away {
		if err := d.api.UpdateStream(ctx, d.found); err != nil {
			return fmt.Errorf("%w: %s, and giving it its subjects back failed too: %w", ErrNotEmpty, held, err)
		}
	}
	return fmt.Errorf("%w: %s, so it is left as it was, taking messages (pass --allow-data-loss to do it anyway)", ErrNotEmpty, held)
}

func messages(n uint64) string {
	if n == 1 {
		return "1 message"
	}
	return fmt.Sprintf("%d messages", n)
}

// resume lets the consumers paused by pauseConsumers deliver again. Best effort: a consumer
// gone with its stream has nothing to resume, and one left paused resumes at its deadline.
func (d *drainer) resume(ctx context.Context) {
	for _, name := range d.paused {
		_ = d.api.PauseConsumer(ctx, d.c.Name, name, time.Time{})
	}
}
