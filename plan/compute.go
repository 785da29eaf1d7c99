package plan

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// Compute plans the changes that make live equal to target.
func Compute(target Target, live Live, o Options) *Plan {
	p := &Plan{Baseline: live.Baseline, AllowDataLoss: o.AllowDataLoss}
	if p.Baseline == "" {
		p.Baseline = BaselineBus
	}
	d := newObjectDiff(target, live, o)
	d.diffStreams()
	d.diffConsumers()
	d.deleteConsumers()
	d.deleteStreams()

	var accounts []Change
	if c, ok := diffAccounts(target, live); ok {
		// A change is shown and written whole: the rendering is made now, and a config in use
		// known to be that rendering (AccountsRendered) is its text.
		target.Accounts = target.Rendering()
		if live.AccountsRendered {
			live.Accounts = target.Accounts
		}
		authChange(&c, target, live, o)
		accounts = append(accounts, c)
		p.Accounts = target.Accounts
	} else if hosts := JWTHolders(target.JWTUsers); len(hosts) > 0 {
		// The config in use is the rendering, yet hosts still hold user JWTs of a jwt mesh
		// (an apply stopped before it dropped them).
		c := Change{Kind: KindAccounts, Name: "config", Action: Update, Risk: RiskNone}
		AuthMigration{To: target.Auth(), Hosts: hosts}.Mark(&c, o)
		accounts = append(accounts, c)
		p.Accounts = target.Rendering()
	}

	sortChanges(d.conflicts)
	for _, group := range [][]Change{d.conflicts, byAction(d.streamChanges), byAction(d.consumerChanges), accounts, d.consumerDeletes, d.streamDeletes} {
		p.Changes = append(p.Changes, group...)
	}
	if p.Baseline == BaselineDescription {
		// No bus was read, so nothing was counted: a zero would read as "nothing is
		// queued", which nobody checked.
		for i := range p.Changes {
			p.Changes[i].AtStake = nil
		}
	}
	p.Holders = holderMoves(live.Holding, target.Bus.Holding, target.Bus.Formerly)
	p.Graces = target.Bus.Graces
	p.MassDelete = massDelete(p, target, live, o)
	p.Overcommit = overcommit(p, target, live, o)
	return p
}

// objectDiff compares the streams and consumers of a target with those on the bus, and
// collects the changes in the groups an apply performs them in.
type objectDiff struct {
	target Target
	live   Live
	o      Options

	liveStreams   map[string]*LiveStream
	liveConsumers map[consumerKey]*LiveConsumer
	// desiredStreams and desiredConsumers are what the target derives, once compared.
	desiredStreams   map[string]bool
	desiredConsumers map[consumerKey]bool
	// A stream that is replaced, or in conflict, takes its consumers with it: they are
	// created afresh after it (recreated), or left alone with it (blocked). Nothing else
	// depends on a conflict, so the rest of the plan is applied: the accounts config grants
	// subjects, and its grants naming the consumers of a stream in conflict reach nothing
	// until meshctl's own stream and consumers are there.
	recreated, blocked map[string]bool

	conflicts, streamChanges, consumerChanges, consumerDeletes, streamDeletes []Change
}

// newObjectDiff indexes the streams and consumers on the bus by name, for a diff of target's.
func newObjectDiff(target Target, live Live, o Options) *objectDiff {
	d := &objectDiff{target: target, live: live, o: o,
		liveStreams:      make(map[string]*LiveStream, len(live.Streams)),
		liveConsumers:    make(map[consumerKey]*LiveConsumer, len(live.Consumers)),
		desiredStreams:   map[string]bool{},
		desiredConsumers: make(map[consumerKey]bool, len(target.Bus.Consumers)),
		recreated:        map[string]bool{},
		blocked:          map[string]bool{},
	}
	for i := range live.Streams {
		d.liveStreams[live.Streams[i].Config.Name] = &live.Streams[i]
	}
	// Consumers are keyed by stream and name as they stand: a key joined into one string
	// would be made for each of tens of thousands of consumers, on either side.
	for i := range live.Consumers {
		c := &live.Consumers[i]
		d.liveConsumers[consumerKey{c.Stream, c.Config.Durable}] = c
	}
	return d
}

// diffStreams plans each stream the target derives: created where the bus has none, in
// conflict where the bus's is not meshctl's, updated or replaced where its config differs.
func (d *objectDiff) diffStreams() {
	for i := range d.target.Bus.Streams {
		want := &d.target.Bus.Streams[i]
		d.desiredStreams[want.Name] = true
		have, ok := d.liveStreams[want.Name]
		switch {
		case !ok:
			d.streamChanges = append(d.streamChanges, Change{Kind: KindStream, Name: want.Name, Action: Create,
				Reason: "derived from the mesh and not on the bus", Risk: RiskNone, After: want})
		case !d.target.owns(have.Config.Metadata):
			d.blocked[want.Name] = true
			reason := d.target.notOwned("the stream "+want.Name, have.Config.Metadata)
			if reason == "" {
				reason = fmt.Sprintf("a stream named %s exists without meshctl's ownership marker (%s=%s); meshctl will not adopt or change it: rename or remove it, or mark it deliberately",
					want.Name, render.OwnerKey, render.OwnerValue)
			}
			d.conflicts = append(d.conflicts, Change{Kind: KindStream, Name: want.Name, Action: Conflict,
				Reason: reason, Risk: RiskNone, Before: &have.Config})
		default:
			fields := diffStream(have.Config, *want)
			if len(fields) == 0 {
				continue
			}
			c := Change{Kind: KindStream, Name: want.Name, Action: Update, Risk: RiskNone,
				Fields: fields, Before: &have.Config, After: want}
			if imm := immutable(fields); len(imm) > 0 {
				c.Action = Replace
				d.recreated[want.Name] = true
				c.AtStake = &AtStake{Messages: have.Messages}
				c.Reason = "the server refuses to update " + strings.Join(imm, ", ") + " in place"
				grade(&c, d.o, "replacing")
			} else {
				c.Reason = "its config differs from the derivation"
				if c.AtStake = d.discards(have, *want); c.AtStake != nil {
					grade(&c, d.o, "updating")
				} else if overLimit(have, *want) {
					c.Reason += "; it holds more than its new limits, and takes no new message until it holds less"
					c.Risk = RiskDisruptive
				}
			}
			d.streamChanges = append(d.streamChanges, c)
		}
	}
}

// diffConsumers plans each consumer the target derives, as diffStreams plans streams: but
// none on a stream in conflict, and each one afresh on a stream that is replaced.
func (d *objectDiff) diffConsumers() {
	for i := range d.target.Bus.Consumers {
		want := &d.target.Bus.Consumers[i]
		key := consumerKey{want.Stream, want.Name()}
		d.desiredConsumers[key] = true
		if d.blocked[want.Stream] {
			continue
		}
		have, ok := d.liveConsumers[key]
		switch {
		case !ok || d.recreated[want.Stream]:
			reason := "derived from the mesh and not on the bus"
			if ok {
				reason = "its stream is replaced"
			}
			d.consumerChanges = append(d.consumerChanges, Change{Kind: KindConsumer, Name: want.Name(), Stream: want.Stream,
				Action: Create, Reason: reason, Risk: RiskNone, After: &want.Config})
		case !d.target.owns(have.Config.Metadata):
			reason := d.target.notOwned("the consumer "+want.Name()+" on "+want.Stream, have.Config.Metadata)
			if reason == "" {
				reason = fmt.Sprintf("a consumer named %s on %s exists without meshctl's ownership marker; meshctl will not adopt or change it", want.Name(), want.Stream)
			}
			d.conflicts = append(d.conflicts, Change{Kind: KindConsumer, Name: want.Name(), Stream: want.Stream, Action: Conflict,
				Reason: reason, Risk: RiskNone, Before: &have.Config})
		default:
			fields := diffConsumer(have.Config, want.Config)
			if len(fields) == 0 {
				continue
			}
			c := Change{Kind: KindConsumer, Name: want.Name(), Stream: want.Stream, Action: Update, Risk: RiskNone,
				Fields: fields, Before: &have.Config, After: &want.Config, Reason: "its config differs from the derivation"}
			if imm := immutable(fields); len(imm) > 0 {
				c.Action = Replace
				c.Reason = "the server refuses to update " + strings.Join(imm, ", ") + " in place"
				c.AtStake = &AtStake{Pending: have.Pending, AckPending: have.AckPending}
				grade(&c, d.o, "replacing")
			}
			d.consumerChanges = append(d.consumerChanges, c)
		}
	}
}

// deleteConsumers plans the deletion of each consumer of meshctl's the target no longer
// derives, unless its stream goes or is replaced, which takes it along.
func (d *objectDiff) deleteConsumers() {
	for i := range d.live.Consumers {
		have := &d.live.Consumers[i]
		key := consumerKey{have.Stream, have.Config.Durable}
		if d.desiredConsumers[key] || !d.target.owns(have.Config.Metadata) {
			continue
		}
		if !d.desiredStreams[have.Stream] || d.recreated[have.Stream] {
			continue // goes with its stream
		}
		c := Change{Kind: KindConsumer, Name: have.Config.Durable, Stream: have.Stream, Action: Delete,
			Reason: "meshctl made it and the mesh no longer derives it", Before: &have.Config,
			AtStake: &AtStake{Pending: have.Pending, AckPending: have.AckPending}}
		grade(&c, d.o, "deleting")
		d.consumerDeletes = append(d.consumerDeletes, c)
	}
}

// deleteStreams plans the deletion of each stream of meshctl's the target no longer derives;
// a renamed seat's queue moves its work to the new one first.
func (d *objectDiff) deleteStreams() {
	for i := range d.live.Streams {
		have := &d.live.Streams[i]
		if d.desiredStreams[have.Config.Name] || !d.target.owns(have.Config.Metadata) {
			continue
		}
		c := Change{Kind: KindStream, Name: have.Config.Name, Action: Delete,
			Reason: "meshctl made it and the mesh no longer derives it", Before: &have.Config,
			AtStake: &AtStake{Messages: have.Messages}}
		m := moveOf(d.target.Bus, have.Config.Name)
		if m != nil && d.blocked[m.Stream] {
			// Its work has nowhere to go while the new queue's name is someone else's: it
			// stays, with its consumers, until the conflict is resolved.
			continue
		}
		if m != nil {
			// Its work moves to the new queue first (reconcile/drain.go): nothing is lost.
			c.Reason = "seat " + m.Seat + " was renamed: its work queue is now " + m.Stream + movedWork(have.Messages)
			c.Move, c.AtStake, c.Risk = m, nil, RiskDisruptive
		} else {
			grade(&c, d.o, "deleting")
		}
		d.streamDeletes = append(d.streamDeletes, c)
	}
}

// consumerKey names a consumer: its stream and its durable name.
type consumerKey struct{ stream, name string }

// grade sets the risk of a replacement or deletion, and refuses it when it would lose
// messages or unacknowledged work and the operator has not allowed that.
func grade(c *Change, o Options, doing string) {
	c.Risk = RiskDisruptive
	if !c.AtStake.Any() {
		return
	}
	c.Risk = RiskDataLoss
	if !o.AllowDataLoss {
		c.Refused = fmt.Sprintf("%s %s would lose %s; pass --allow-data-loss to do it anyway", doing, c.ID(), describeStake(c.AtStake))
	}
}

func describeStake(a *AtStake) string {
	var parts []string
	if a.Messages > 0 {
		parts = append(parts, plural(a.Messages, "stored message"))
	}
	if a.Pending > 0 {
		parts = append(parts, plural(a.Pending, "undelivered message"))
	}
	if a.AckPending > 0 {
		parts = append(parts, plural(a.AckPending, "unacknowledged delivery", "unacknowledged deliveries"))
	}
	if a.Discards > 0 {
		least := ""
		if a.AtLeast {
			least = "at least "
		}
		what := least + plural(a.Discards, "message") + " its lowered limits discard (its oldest)"
		if a.NotCounted != "" {
			what += ", not counted: " + a.NotCounted
		}
		parts = append(parts, what)
	}
	return strings.Join(parts, " and ")
}

func plural(n uint64, one string, many ...string) string {
	if n == 1 {
		return "1 " + one
	}
	if len(many) > 0 {
		return strconv.FormatUint(n, 10) + " " + many[0]
	}
	return strconv.FormatUint(n, 10) + " " + one + "s"
}

// byAction orders creates, updates and replaces, each by name.
func byAction(cs []Change) []Change {
	sortChanges(cs)
	return cs
}

func sortChanges(cs []Change) {
	sort.SliceStable(cs, func(i, j int) bool {
		if cs[i].Stream != cs[j].Stream {
			return cs[i].Stream < cs[j].Stream
		}
		return cs[i].Name < cs[j].Name
	})
}

func immutable(fields []FieldChange) []string {
	var out []string
	for _, f := range fields {
		if f.Immutable {
			out = append(out, f.Field)
		}
	}
	return out
}

func holderMoves(before, after []model.Holding, formerly map[string]string) []HolderMove {
	was := map[string]model.Instance{}
	for _, h := range before {
		// A renamed seat is the same seat: recorded under its former name, its holder has
		// not moved unless the holder itself changed.
		if now, ok := formerly[h.Seat]; ok {
			h.Seat = now
		}
		was[h.Seat] = h.Holder
	}
	now := map[string]model.Instance{}
	for _, h := range after {
		now[h.Seat] = h.Holder
	}
	var out []HolderMove
	for seat, to := range now {
		if from, ok := was[seat]; !ok {
			out = append(out, HolderMove{Seat: seat, To: &to})
		} else if from != to {
			out = append(out, HolderMove{Seat: seat, From: &from, To: &to})
		}
	}
	for seat, from := range was {
		if _, ok := now[seat]; !ok {
			out = append(out, HolderMove{Seat: seat, From: &from})
		}
	}
	slices.SortFunc(out, func(a, b HolderMove) int { return strings.Compare(a.Seat, b.Seat) })
	return out
}

// field compares one projected field.
func field(out *[]FieldChange, name string, before, after string, immutable bool) {
	if before != after {
		*out = append(*out, FieldChange{Field: name, Before: before, After: after, Immutable: immutable})
	}
}

func i64(v int64) string         { return strconv.FormatInt(v, 10) }
func dur(d time.Duration) string { return d.String() }
func durations(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = d.String()
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
func boolean(b bool) string { return strconv.FormatBool(b) }

// storage and discard name a stream's storage and discard policy as the description does.
func storage(s jetstream.StorageType) string {
	if s == jetstream.MemoryStorage {
		return model.StorageMemory
	}
	return model.StorageFile
}

func discard(d jetstream.DiscardPolicy) string {
	if d == jetstream.DiscardNew {
		return model.DiscardNew
	}
	return model.DiscardOld
}
func list(s []string) string {
	s = slices.Clone(s)
	slices.Sort(s)
	return "[" + strings.Join(s, ", ") + "]"
}
func orNeg(v int64) int64 { return map[bool]int64{true: -1, false: v}[v == 0] }
func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// metadata renders the keys meshctl compares: every key except the server's own `_nats.`
// ones, which it adds and changes by version.
func metadata(m map[string]string) string {
	var keys []string
	for k := range m {
		if !strings.HasPrefix(k, "_nats.") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// NormalizeStream fills in what the server fills in for a field left unset, so a config
// and the server's report of it compare equal.
func NormalizeStream(c jetstream.StreamConfig) jetstream.StreamConfig {
	c.MaxMsgs = orNeg(c.MaxMsgs)
	c.MaxBytes = orNeg(c.MaxBytes)
	c.MaxMsgsPerSubject = orNeg(c.MaxMsgsPerSubject)
	c.MaxMsgSize = int32(orNeg(int64(c.MaxMsgSize)))
	c.MaxConsumers = int(orNeg(int64(c.MaxConsumers)))
	c.Replicas = orDefault(c.Replicas, 1)
	if c.Duplicates == 0 {
		c.Duplicates = 2 * time.Minute
		if c.MaxAge > 0 && c.MaxAge < c.Duplicates {
			c.Duplicates = c.MaxAge
		}
	}
	if len(c.Subjects) == 0 {
		c.Subjects = []string{c.Name}
	}
	return c
}

func diffStream(have, want jetstream.StreamConfig) []FieldChange {
	a, b := NormalizeStream(have), NormalizeStream(want)
	var out []FieldChange
	field(&out, "description", a.Description, b.Description, false)
	field(&out, "subjects", list(a.Subjects), list(b.Subjects), false)
	// Retention may move between limits and interest, never to or from a work queue.
	field(&out, "retention", a.Retention.String(), b.Retention.String(),
		a.Retention != b.Retention && (a.Retention == jetstream.WorkQueuePolicy || b.Retention == jetstream.WorkQueuePolicy))
	field(&out, "storage", storage(a.Storage), storage(b.Storage), true)
	field(&out, "replicas", strconv.Itoa(a.Replicas), strconv.Itoa(b.Replicas), false)
	// Limits read as the description writes them (1GiB, 72h0m0s, unlimited), put in words
	// only when they differ: a large mesh's hundreds of seat queues are compared, all equal.
	if a.MaxAge != b.MaxAge {
		field(&out, "max_age", model.FormatAge(a.MaxAge), model.FormatAge(b.MaxAge), false)
	}
	if a.MaxMsgs != b.MaxMsgs {
		field(&out, "max_msgs", model.FormatCount(a.MaxMsgs), model.FormatCount(b.MaxMsgs), false)
	}
	if a.MaxBytes != b.MaxBytes {
		field(&out, "max_bytes", model.FormatSize(a.MaxBytes), model.FormatSize(b.MaxBytes), false)
	}
	field(&out, "max_msgs_per_subject", i64(a.MaxMsgsPerSubject), i64(b.MaxMsgsPerSubject), false)
	if a.MaxMsgSize != b.MaxMsgSize {
		field(&out, "max_msg_size", model.FormatSize(int64(a.MaxMsgSize)), model.FormatSize(int64(b.MaxMsgSize)), false)
	}
	field(&out, "max_consumers", strconv.Itoa(a.MaxConsumers), strconv.Itoa(b.MaxConsumers), false)
	field(&out, "discard", discard(a.Discard), discard(b.Discard), false)
	field(&out, "duplicate_window", dur(a.Duplicates), dur(b.Duplicates), false)
	// The server refuses to unseal a stream or undo deny-delete and deny-purge.
	field(&out, "sealed", boolean(a.Sealed), boolean(b.Sealed), a.Sealed && !b.Sealed)
	field(&out, "deny_delete", boolean(a.DenyDelete), boolean(b.DenyDelete), a.DenyDelete && !b.DenyDelete)
	field(&out, "deny_purge", boolean(a.DenyPurge), boolean(b.DenyPurge), a.DenyPurge && !b.DenyPurge)
	field(&out, "metadata", metadata(a.Metadata), metadata(b.Metadata), false)
	return out
}

// NormalizeConsumer fills in the server's defaults for a consumer config.
func NormalizeConsumer(c jetstream.ConsumerConfig) jetstream.ConsumerConfig {
	c.AckWait = orDefault(c.AckWait, 30*time.Second)
	c.MaxDeliver = int(orNeg(int64(c.MaxDeliver)))
	c.MaxAckPending = orDefault(c.MaxAckPending, 1000)
	filters := slices.Clone(c.FilterSubjects)
	if c.FilterSubject != "" {
		filters = append(filters, c.FilterSubject)
	}
	slices.Sort(filters)
	c.FilterSubject, c.FilterSubjects = "", filters
	return c
}

func diffConsumer(have, want jetstream.ConsumerConfig) []FieldChange {
	a, b := NormalizeConsumer(have), NormalizeConsumer(want)
	var out []FieldChange
	// Each field is put in words only when it differs: a converged mesh compares six
	// thousand consumers, all equal.
	if a.Description != b.Description {
		field(&out, "description", a.Description, b.Description, false)
	}
	// A push consumer cannot become a pull consumer or back.
	if a.DeliverSubject != b.DeliverSubject {
		field(&out, "deliver_subject", a.DeliverSubject, b.DeliverSubject, (a.DeliverSubject == "") != (b.DeliverSubject == ""))
	}
	if a.DeliverGroup != b.DeliverGroup {
		field(&out, "deliver_group", a.DeliverGroup, b.DeliverGroup, false)
	}
	if a.DeliverPolicy != b.DeliverPolicy {
		field(&out, "deliver_policy", a.DeliverPolicy.String(), b.DeliverPolicy.String(), true)
	}
	if a.AckPolicy != b.AckPolicy {
		field(&out, "ack_policy", a.AckPolicy.String(), b.AckPolicy.String(), true)
	}
	if a.ReplayPolicy != b.ReplayPolicy {
		field(&out, "replay_policy", a.ReplayPolicy.String(), b.ReplayPolicy.String(), true)
	}
	if a.AckWait != b.AckWait {
		field(&out, "ack_wait", dur(a.AckWait), dur(b.AckWait), false)
	}
	if a.MaxDeliver != b.MaxDeliver {
		field(&out, "max_deliver", model.FormatCount(int64(a.MaxDeliver)), model.FormatCount(int64(b.MaxDeliver)), false)
	}
	if !slices.Equal(a.BackOff, b.BackOff) {
		field(&out, "backoff", durations(a.BackOff), durations(b.BackOff), false)
	}
	if a.MaxAckPending != b.MaxAckPending {
		field(&out, "max_ack_pending", model.FormatCount(int64(a.MaxAckPending)), model.FormatCount(int64(b.MaxAckPending)), false)
	}
	if !slices.Equal(a.FilterSubjects, b.FilterSubjects) {
		field(&out, "filter_subjects", list(a.FilterSubjects), list(b.FilterSubjects), false)
	}
	if a.FlowControl != b.FlowControl {
		field(&out, "flow_control", boolean(a.FlowControl), boolean(b.FlowControl), true)
	}
	if a.IdleHeartbeat != b.IdleHeartbeat {
		field(&out, "idle_heartbeat", dur(a.IdleHeartbeat), dur(b.IdleHeartbeat), true)
	}
	if a.HeadersOnly != b.HeadersOnly {
		field(&out, "headers_only", boolean(a.HeadersOnly), boolean(b.HeadersOnly), false)
	}
	if a.RateLimit != b.RateLimit {
		field(&out, "rate_limit_bps", strconv.FormatUint(a.RateLimit, 10), strconv.FormatUint(b.RateLimit, 10), false)
	}
	if a.InactiveThreshold != b.InactiveThreshold {
		field(&out, "inactive_threshold", dur(a.InactiveThreshold), dur(b.InactiveThreshold), false)
	}
	if a.MemoryStorage != b.MemoryStorage {
		field(&out, "mem_storage", boolean(a.MemoryStorage), boolean(b.MemoryStorage), true)
	}
	if !sameMetadata(a.Metadata, b.Metadata) {
		field(&out, "metadata", metadata(a.Metadata), metadata(b.Metadata), false)
	}
	return out
}

// sameMetadata reports whether a and b hold the same keys meshctl compares (metadata's).
func sameMetadata(a, b map[string]string) bool {
	n := 0
	for k, v := range a {
		if strings.HasPrefix(k, "_nats.") {
			continue
		}
		if w, ok := b[k]; !ok || w != v {
			return false
		}
		n++
	}
	for k := range b {
		if !strings.HasPrefix(k, "_nats.") {
			n--
		}
	}
	return n == 0
}
