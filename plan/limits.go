package plan

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// A stream's limits are updated in place, but a limit lowered below what the stream holds
// discards its oldest messages the moment the server takes the update: as surely as a
// replacement loses what it holds. Such an update carries what it discards as at stake, and is
// refused like a replacement unless the operator allows data loss.

// Limits are the limits of a stream's update that discard at once what lies beyond them: a
// limit that does not, because the stream refuses new messages at it instead or it was not
// lowered, is unset (Unlimited, or 0 for MaxAge).
type Limits struct {
	MaxMsgs  int64
	MaxBytes int64
	MaxAge   time.Duration
}

// Any reports whether some limit discards what it holds.
func (l Limits) Any() bool { return l.MaxMsgs >= 0 || l.MaxBytes >= 0 || l.MaxAge > 0 }

// DiscardCounter counts the messages of a stream on the bus that limits discard at once: its
// oldest, up to the first message every limit lets stay. It reads the stream; exact is false
// when it stopped reading at a bound, the count being then at least n.
type DiscardCounter func(stream string, limits Limits) (n uint64, exact bool, err error)

// Discarding is the limits of want that discard what have holds at once. The server drops a
// stream's oldest messages over a lowered max_msgs or max_bytes only when it discards old ones
// at its limits (with discard new it refuses new messages until the stream is under them
// again); over a lowered max_age, whatever its discard policy (docs/nats-behaviour.md).
func Discarding(have *LiveStream, want jetstream.StreamConfig) Limits {
	l := Limits{MaxMsgs: model.Unlimited, MaxBytes: model.Unlimited}
	if have.Messages == 0 {
		return l
	}
	if want.Discard == jetstream.DiscardOld {
		if want.MaxMsgs > 0 && have.Messages > uint64(want.MaxMsgs) {
			l.MaxMsgs = want.MaxMsgs
		}
		if want.MaxBytes > 0 && have.Bytes > uint64(want.MaxBytes) {
			l.MaxBytes = want.MaxBytes
		}
	}
	if want.MaxAge > 0 && (have.Config.MaxAge <= 0 || want.MaxAge < have.Config.MaxAge) {
		l.MaxAge = want.MaxAge
	}
	return l
}

// overLimit reports whether a stream that refuses new messages at its limits (discard new)
// holds more than want's: it then takes no message until it holds less.
func overLimit(have *LiveStream, want jetstream.StreamConfig) bool {
	return want.Discard == jetstream.DiscardNew &&
		(want.MaxMsgs > 0 && have.Messages > uint64(want.MaxMsgs) || want.MaxBytes > 0 && have.Bytes > uint64(want.MaxBytes))
}

// discards counts what an update of have to want discards at once, as at stake; nil when it
// discards nothing. Over max_msgs alone the stream's state says how many go; over anything
// else the live bus counts them (Live.CountDiscards). Without a count, what the state proves
// is said as a least: one message, or those over max_msgs; a count that failed is said too.
func (d *objectDiff) discards(have *LiveStream, want jetstream.StreamConfig) *AtStake {
	l := Discarding(have, want)
	if !l.Any() {
		return nil
	}
	least := uint64(1)
	if l.MaxMsgs > 0 {
		least = have.Messages - uint64(l.MaxMsgs)
	}
	if l.MaxBytes < 0 && l.MaxAge <= 0 {
		return &AtStake{Discards: least}
	}
	if d.live.CountDiscards == nil {
		if l.MaxBytes < 0 && l.MaxMsgs < 0 {
			return nil // an age alone: whether anything is that old, only the bus can tell
		}
		return &AtStake{Discards: least, AtLeast: true}
	}
	n, exact, err := d.live.CountDiscards(want.Name, l)
	if err != nil {
		return &AtStake{Discards: least, AtLeast: true, NotCounted: err.Error()}
	}
	if n == 0 {
		// Nothing lies beyond the limits after all: a max_age lowered to keep all it holds.
		return nil
	}
	return &AtStake{Discards: max(n, least), AtLeast: !exact}
}

// Capacity is what the bus says its JetStream has for the mesh's streams on each server, on
// disk and in memory: -1 where it does not say.
type Capacity struct {
	File   int64 `json:"file"`
	Memory int64 `json:"memory"`
	// Source says where the numbers come from: the account's JetStream limits, or the
	// server's own store when meshctl runs it.
	Source string `json:"source"`
	// Replicated says the numbers bound every replica of every stream together (an account's
	// limits do), not what one server holds.
	Replicated bool `json:"replicated,omitempty"`
}

// Overcommit is a plan's streams asking more of each server than its JetStream has: the sum
// of their byte limits against the capacity the bus says it has. The server reserves every
// stream's max_bytes when it is created or raised and refuses one past its store ("insufficient
// storage resources", 10047), so an apply would stop half way; it is refused whole instead,
// unless the operator allows it.
type Overcommit struct {
	Footprint render.Footprint `json:"footprint"`
	Capacity  Capacity         `json:"capacity"`
	// Refused says why an apply will not perform the plan; empty when the operator allowed
	// it (--allow-overcommit).
	Refused string `json:"refused,omitempty"`
}

// overcommit is the plan's Overcommit: nil unless it creates or changes a stream and the
// target's streams may hold more than the bus has. The capacity is asked only then, so a plan
// that touches no stream asks nothing more of the bus.
func overcommit(p *Plan, target Target, live Live, o Options) *Overcommit {
	if live.ReadCapacity == nil || !changesStreams(p) {
		return nil
	}
	c, err := live.ReadCapacity()
	if err != nil {
		// Not a refusal: the server still refuses what does not fit, stream by stream.
		return nil
	}
	f := render.FootprintOf(target.Bus.Streams)
	if c.Replicated {
		f = replicatedFootprint(target.Bus.Streams)
	}
	over := c.File >= 0 && f.File > uint64(c.File) || c.Memory >= 0 && f.Memory > uint64(c.Memory)
	if !over {
		return nil
	}
	oc := &Overcommit{Footprint: f, Capacity: c}
	if !o.AllowOvercommit {
		where := "on each server"
		if c.Replicated {
			where = "with every replica"
		}
		oc.Refused = fmt.Sprintf("the description lets its streams hold up to %s %s, more than %s says it has (%s): "+
			"the server would refuse the streams past it half way through the apply; lower their max_bytes, or pass --allow-overcommit if it is meant",
			held(f), where, c.Source, has(c))
	}
	return oc
}

// replicatedFootprint is the footprint of streams with every replica counted.
func replicatedFootprint(streams []jetstream.StreamConfig) render.Footprint {
	scaled := make([]jetstream.StreamConfig, len(streams))
	for i, s := range streams {
		scaled[i] = jetstream.StreamConfig{Name: s.Name, Storage: s.Storage, MaxBytes: s.MaxBytes * int64(max(s.Replicas, 1))}
	}
	return render.FootprintOf(scaled)
}

// changesStreams reports whether p creates, updates or replaces a stream.
func changesStreams(p *Plan) bool {
	for _, c := range p.Changes {
		if c.Kind == KindStream && (c.Action == Create || c.Action == Update || c.Action == Replace) {
			return true
		}
	}
	return false
}

func held(f render.Footprint) string {
	s := model.HumanSize(f.File) + " on disk"
	if f.Memory > 0 {
		s += " and " + model.HumanSize(f.Memory) + " in memory"
	}
	return s
}

func has(c Capacity) string {
	var parts []string
	if c.File >= 0 {
		parts = append(parts, model.HumanSize(uint64(c.File))+" on disk")
	}
	if c.Memory >= 0 {
		parts = append(parts, model.HumanSize(uint64(c.Memory))+" in memory")
	}
	if len(parts) == 0 {
		return "nothing said"
	}
	return parts[0] + map[bool]string{true: " and " + parts[len(parts)-1], false: ""}[len(parts) > 1]
}
