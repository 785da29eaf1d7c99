package model

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/meshbus/meshctl/internal/printable"
)

// Unlimited is a limit the description sets to `unlimited`: the stream or consumer is not
// bounded by it.
const Unlimited = -1

// Where a stream keeps its messages.
const (
	StorageFile   = "file"
	StorageMemory = "memory"
)

// What a stream at one of its limits does with a new message: drop its oldest (old) or
// refuse the new one (new).
const (
	DiscardOld = "old"
	DiscardNew = "new"
)

// Binary size units, as the description writes them (1GiB).
const (
	KiB int64 = 1 << 10
	MiB int64 = 1 << 20
	GiB int64 = 1 << 30
	TiB int64 = 1 << 40
	PiB int64 = 1 << 50
)

// StreamSettings is what a stream may hold and how: its limits, where it keeps its messages,
// on how many servers, and what it does at a limit. Every field is resolved: the mesh's
// default where the description says nothing.
type StreamSettings struct {
	MaxBytes   int64         // bytes, or Unlimited
	MaxAge     time.Duration // 0: no age limit
	MaxMsgs    int64         // messages, or Unlimited
	MaxMsgSize int64         // bytes, or Unlimited
	Storage    string        // StorageFile or StorageMemory
	Replicas   int
	Discard    string // DiscardOld or DiscardNew
}

// Streams are the settings of the mesh's own streams, and Seats the default of every seat's
// work queue (a seat's own `stream:` overrides it).
type Streams struct {
	Control, Events, Nodes, Seats StreamSettings
}

// ConsumerSettings is how a host's consumer redelivers: how long it waits for an ack, how
// many deliveries may wait for one, and how often a message is delivered, at which
// intervals. A message that reaches MaxDeliver is delivered no more: it stays in its stream
// until the stream's limits drop it, and the server announces it (docs/description.md).
type ConsumerSettings struct {
	// AckWait is how long a delivery waits for its ack before it is delivered again; with a
	// Backoff, its first step.
	AckWait time.Duration
	// MaxAckPending bounds the deliveries waiting for an ack; 0 leaves it to the server
	// (1,000), Unlimited lifts it.
	MaxAckPending int
	// MaxDeliver bounds the deliveries of one message, or Unlimited.
	MaxDeliver int
	// Backoff is the wait before each redelivery, the last repeated; nil for AckWait each time.
	Backoff []time.Duration
}

// The defaults. Every stream is bounded in bytes, so a follower that stops acknowledging fills
// its stream, not the server's disk; docs/description.md says why each bound is what it is.
const (
	DefaultControlMaxBytes = 64 * MiB
	DefaultEventsMaxBytes  = 1 * GiB
	DefaultNodesMaxBytes   = 256 * MiB
	DefaultSeatMaxBytes    = 64 * MiB
	// DefaultEventsMaxAge is how long EVENTS keeps an event nobody has consumed.
	DefaultEventsMaxAge = 7 * 24 * time.Hour
	// DefaultAckWait is the server's own: 30 seconds for a delivery's ack.
	DefaultAckWait = 30 * time.Second
)

// DefaultStreams is the settings of every stream the description leaves unset, each on
// replicas servers. A seat's queue refuses new work when full rather than dropping the
// oldest: work dropped unseen is work lost, while a refused publish tells its sender. The
// others drop their oldest: an old event, a superseded report or declaration matters less
// than the next one.
func DefaultStreams(replicas int) Streams {
	base := StreamSettings{MaxMsgs: Unlimited, MaxMsgSize: Unlimited, Storage: StorageFile, Replicas: replicas, Discard: DiscardOld}
	s := Streams{Control: base, Events: base, Nodes: base, Seats: base}
	s.Control.MaxBytes = DefaultControlMaxBytes
	s.Events.MaxBytes, s.Events.MaxAge = DefaultEventsMaxBytes, DefaultEventsMaxAge
	s.Nodes.MaxBytes = DefaultNodesMaxBytes
	s.Seats.MaxBytes, s.Seats.Discard = DefaultSeatMaxBytes, DiscardNew
	return s
}

// DefaultConsumer is the settings of every host's consumer the description leaves unset:
// the server's own defaults, a delivery redelivered every 30 seconds until it is acknowledged.
func DefaultConsumer() ConsumerSettings {
	return ConsumerSettings{AckWait: DefaultAckWait, MaxDeliver: Unlimited}
}

// The ranges of the settings, as the loader checks them and the schema states them.
const (
	minMaxBytes   = KiB
	maxMaxBytes   = PiB // a sum of thousands of them stays far from overflowing
	maxMsgSizeMax = GiB // far above any server's max_payload, and within the server's int32
	maxReplicas   = 5
	minAge        = time.Second
)

// sizeUnits are the units a size may be written in: binary (1GiB = 2^30 bytes) and decimal
// (1GB = 10^9 bytes), as nats-server's own config reads them.
var sizeUnits = map[string]int64{
	"B": 1, "KiB": KiB, "MiB": MiB, "GiB": GiB, "TiB": TiB, "PiB": PiB,
	"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "PB": 1e15,
}

// sizeUnitOrder is the units FormatSize tries, largest first.
var sizeUnitOrder = []string{"PiB", "PB", "TiB", "TB", "GiB", "GB", "MiB", "MB", "KiB", "KB"}

var sizeForm = regexp.MustCompile(`^([0-9]+) ?(B|KiB|MiB|GiB|TiB|PiB|KB|MB|GB|TB|PB)$`)

// ParseSize reads a size as the description writes it: a whole number and a unit (512MiB,
// 1GiB, 10GB, 4096B).
func ParseSize(s string) (int64, error) {
	m := sizeForm.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("not a size: %s", printable.Quote(s))
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	unit := sizeUnits[m[2]]
	if err != nil || n > math.MaxInt64/unit {
		return 0, fmt.Errorf("size %s is too large", printable.Quote(s))
	}
	return n * unit, nil
}

// FormatSize writes a size as the description would, exactly and in as few digits as a unit
// allows (64MiB, 1GiB, 10GB, 1536KiB, 1000B), or "unlimited".
func FormatSize(n int64) string {
	if n < 0 {
		return "unlimited"
	}
	best := strconv.FormatInt(n, 10) + "B"
	for _, u := range sizeUnitOrder {
		size := sizeUnits[u]
		if n >= size && n%size == 0 {
			if v := strconv.FormatInt(n/size, 10) + u; len(v) < len(best) {
				best = v
			}
		}
	}
	return best
}

// HumanSize writes a size for a sentence, rounded to a tenth of its unit: 1.4 GiB, 64 MiB.
func HumanSize(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return strconv.FormatUint(n, 10) + " B"
	}
	return strings.TrimSuffix(strconv.FormatFloat(v, 'f', 1, 64), ".0") + " " + units[i]
}

// FormatAge writes a stream's age limit: its duration, or "unlimited" for none.
func FormatAge(d time.Duration) string {
	if d <= 0 {
		return "unlimited"
	}
	return d.String()
}

// FormatCount writes a count limit: the number, or "unlimited".
func FormatCount(n int64) string {
	if n < 0 {
		return "unlimited"
	}
	return strconv.FormatInt(n, 10)
}

// The keys of the settings' sections (schema.go's tables list them).
var (
	streamSettingsKeys = []key{
		{name: "max_bytes", kind: sizeValue, min: minMaxBytes, max: maxMaxBytes, unlimited: true,
			doc: "The most the stream holds, with a unit (64MiB, 1GiB, 10GB) or unlimited. At the limit it drops its oldest message or refuses the new one, as discard says."},
		{name: "max_age", kind: durationValue, min: int64(minAge), unlimited: true,
			doc: "How long the stream keeps a message, as a Go duration (72h, 30m), at least 1s, or unlimited."},
		{name: "max_msgs", kind: countValue, min: 1, max: math.MaxInt64, unlimited: true,
			doc: "The most messages the stream holds, or unlimited (the default)."},
		{name: "max_msg_size", kind: sizeValue, min: 1, max: maxMsgSizeMax, unlimited: true,
			doc: "The largest message the stream takes, with a unit (1MiB), at most max_bytes, or unlimited (the default: the server's max_payload bounds it)."},
		{name: "storage", kind: enumValue, enum: []string{StorageFile, StorageMemory},
			doc: "Where the stream keeps its messages: file (the default) or memory. Changing it replaces the stream."},
		{name: "replicas", kind: integerValue, min: 1, max: maxReplicas,
			doc: "On how many servers the stream is kept, 1 to 5; bus.replicas by default."},
		{name: "discard", kind: enumValue, enum: []string{DiscardOld, DiscardNew},
			doc: "What the stream does at a limit: old drops its oldest message, new refuses the new one."},
	}
	consumerSettingsKeys = []key{
		{name: "ack_wait", kind: durationValue, min: int64(minAge),
			doc: "How long a delivery waits for its ack before it is delivered again, as a Go duration (30s, the default); with backoff, its first step."},
		{name: "max_ack_pending", kind: countValue, min: 1, max: math.MaxInt32, unlimited: true,
			doc: "How many deliveries may wait for their ack at once (1000, the server's default), or unlimited."},
		{name: "max_deliver", kind: countValue, min: 1, max: math.MaxInt32, unlimited: true,
			doc: "How many times one message is delivered before the consumer gives up on it (unlimited, the default). The message then stays in its stream until the stream's limits drop it."},
		{name: "backoff", kind: durationsValue, min: int64(minAge),
			doc: "The waits before each redelivery, as Go durations ([10s, 1m, 10m]), the last repeated; the first is the ack wait. No more steps than max_deliver."},
	}
)

// streamDecl is what one place of the description says about a stream's settings: each field
// it sets, with where. pos is the mapping's.
type streamDecl struct {
	maxBytes, maxMsgs, maxMsgSize, replicas optInt
	maxAge                                  optInt // nanoseconds
	storage, discard                        name
	pos                                     Pos
}

// consumerDecl is what one place of the description says about a consumer's settings.
type consumerDecl struct {
	ackWait                   optInt // nanoseconds
	maxAckPending, maxDeliver optInt
	backoff                   []time.Duration
	backoffPos                Pos // zero when backoff is not set
	pos                       Pos
}

// optInt is a number the description may set, with where; pos is zero when it does not.
type optInt struct {
	v   int64
	pos Pos
}

func (o optInt) set() bool { return o.pos != (Pos{}) }

// rawJetStream is bus.jetstream: the mesh's own streams and the default of the seats' queues,
// and the default of the hosts' consumers.
type rawJetStream struct {
	control, events, nodes, seats *streamDecl
	consumers                     *consumerDecl
}

func (d *decoder) jetstream(n *yaml.Node) *rawJetStream {
	js := &rawJetStream{}
	f := d.section(n, jetstreamSection)
	if v, ok := f["streams"]; ok {
		s := d.section(v.val, streamsSection)
		for _, x := range []struct {
			key  string
			into **streamDecl
		}{{"control", &js.control}, {"events", &js.events}, {"nodes", &js.nodes}, {"seats", &js.seats}} {
			if v, ok := s[x.key]; ok {
				*x.into = d.streamDecl(v.val, "bus.jetstream.streams."+x.key)
			}
		}
	}
	if v, ok := f["consumers"]; ok {
		js.consumers = d.consumerDecl(v.val, "bus.jetstream.consumers")
	}
	return js
}

// streamDecl reads a mapping of stream settings; what names it in errors
// (bus.jetstream.streams.events, seat.stream).
func (d *decoder) streamDecl(n *yaml.Node, what string) *streamDecl {
	s := &streamDecl{pos: d.pos(n)}
	f := d.fields(n, what, streamSettingsSection.names)
	for _, k := range streamSettingsKeys {
		v, ok := f[k.name]
		if !ok {
			continue
		}
		path := what + "." + k.name
		switch k.name {
		case "max_bytes":
			s.maxBytes = d.setting(v.val, path, k)
		case "max_age":
			s.maxAge = d.setting(v.val, path, k)
		case "max_msgs":
			s.maxMsgs = d.setting(v.val, path, k)
		case "max_msg_size":
			s.maxMsgSize = d.setting(v.val, path, k)
		case "replicas":
			s.replicas = d.setting(v.val, path, k)
		case "storage":
			s.storage = d.enum(v.val, path, k)
		case "discard":
			s.discard = d.enum(v.val, path, k)
		}
	}
	return s
}

// consumerDecl reads a mapping of consumer settings; what names it in errors.
func (d *decoder) consumerDecl(n *yaml.Node, what string) *consumerDecl {
	c := &consumerDecl{pos: d.pos(n)}
	f := d.fields(n, what, consumerSettingsSection.names)
	for _, k := range consumerSettingsKeys {
		v, ok := f[k.name]
		if !ok {
			continue
		}
		path := what + "." + k.name
		switch k.name {
		case "ack_wait":
			c.ackWait = d.setting(v.val, path, k)
		case "max_ack_pending":
			c.maxAckPending = d.setting(v.val, path, k)
		case "max_deliver":
			c.maxDeliver = d.setting(v.val, path, k)
		case "backoff":
			c.backoff, c.backoffPos = d.durations(v.val, path, k)
		}
	}
	return c
}

// setting reads one number-like setting of kind k.kind (a size, a count, a duration in
// nanoseconds, a whole number) within k's range; the zero optInt when it is not one (said).
func (d *decoder) setting(n *yaml.Node, what string, k key) optInt {
	if k.unlimited && n.Kind == yaml.ScalarNode && n.Tag == "!!str" && n.Value == "unlimited" {
		return optInt{v: Unlimited, pos: d.pos(n)}
	}
	var v int64
	var ok bool
	switch k.kind {
	case sizeValue:
		v, ok = d.size(n, what, k)
	case durationValue:
		v, ok = d.duration(n, what, k)
	default:
		v, ok = d.count(n, what, k)
	}
	if !ok {
		return optInt{}
	}
	return optInt{v: v, pos: d.pos(n)}
}

// orUnlimited is the end of an error naming what a setting must be, for a key that may be
// unlimited.
func orUnlimited(k key) string {
	if k.unlimited {
		return ", or unlimited"
	}
	return ""
}

func (d *decoder) size(n *yaml.Node, what string, k key) (int64, bool) {
	var v int64
	var err error
	switch {
	case n.Kind == yaml.ScalarNode && n.Tag == "!!int":
		err = n.Decode(&v)
	case n.Kind == yaml.ScalarNode && n.Tag == "!!str":
		v, err = ParseSize(n.Value)
	default:
		err = fmt.Errorf("not a size")
	}
	if err != nil {
		d.errorf(n, "%s must be a size with a unit, such as 64MiB or 1GiB (B, KiB, MiB, GiB, TiB, PiB, KB, MB, GB, TB, PB)%s, not %s", what, orUnlimited(k), kindName(n))
		return 0, false
	}
	if v < k.min || v > k.max {
		d.errorf(n, "%s must be between %s and %s, not %s", what, FormatSize(k.min), FormatSize(k.max), kindName(n))
		return 0, false
	}
	return v, true
}

func (d *decoder) duration(n *yaml.Node, what string, k key) (int64, bool) {
	var v time.Duration
	var err error
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		v, err = time.ParseDuration(n.Value)
	} else {
		err = fmt.Errorf("not a duration")
	}
	if err != nil {
		d.errorf(n, "%s must be a Go duration such as 30s, 10m or 72h%s, not %s", what, orUnlimited(k), kindName(n))
		return 0, false
	}
	if int64(v) < k.min {
		d.errorf(n, "%s must be at least %s, not %s", what, time.Duration(k.min), kindName(n))
		return 0, false
	}
	return int64(v), true
}

func (d *decoder) count(n *yaml.Node, what string, k key) (int64, bool) {
	var v int64
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil {
		d.errorf(n, "%s must be a whole number%s, not %s", what, orUnlimited(k), kindName(n))
		return 0, false
	}
	switch {
	case v < k.min:
		d.errorf(n, "%s must be at least %d%s, not %d", what, k.min, orUnlimited(k), v)
	case v > k.max:
		d.errorf(n, "%s must be at most %d%s, not %d", what, k.max, orUnlimited(k), v)
	default:
		return v, true
	}
	return 0, false
}

func (d *decoder) enum(n *yaml.Node, what string, k key) name {
	v, ok := d.scalar(n, what)
	if !ok {
		return name{}
	}
	for _, e := range k.enum {
		if v.val == e {
			return v
		}
	}
	d.errorf(n, "%s must be %s, not %s", what, strings.Join(k.enum, " or "), printable.Quote(v.val))
	return name{}
}

func (d *decoder) durations(n *yaml.Node, what string, k key) ([]time.Duration, Pos) {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		got := kindName(n)
		if n.Kind == yaml.SequenceNode {
			got = "an empty list"
		}
		d.errorf(n, "%s must be a list of Go durations such as [10s, 1m, 10m], not %s", what, got)
		return nil, Pos{}
	}
	out := make([]time.Duration, 0, len(n.Content))
	for _, item := range n.Content {
		v, ok := d.duration(item, what+" entry", k)
		if !ok {
			return nil, Pos{}
		}
		out = append(out, time.Duration(v))
	}
	return out, d.pos(n)
}

// resolveStream is base with what decl sets in its place, after checking what the two say
// together. servers is how many servers bus.servers names (0: none are named).
func resolveStream(diags *diagnostics, base StreamSettings, decl *streamDecl, what string, servers int) StreamSettings {
	if decl == nil {
		return base
	}
	s := base
	if decl.maxBytes.set() {
		s.MaxBytes = decl.maxBytes.v
	}
	if decl.maxAge.set() {
		s.MaxAge = time.Duration(max(decl.maxAge.v, 0))
	}
	if decl.maxMsgs.set() {
		s.MaxMsgs = decl.maxMsgs.v
	}
	if decl.maxMsgSize.set() {
		s.MaxMsgSize = decl.maxMsgSize.v
	}
	if decl.storage.val != "" {
		s.Storage = decl.storage.val
	}
	if decl.discard.val != "" {
		s.Discard = decl.discard.val
	}
	if decl.replicas.set() {
		if servers > 0 && int(decl.replicas.v) > servers {
			diags.add(decl.replicas.pos, "%s.replicas is %d, but bus.servers names %d server(s): a stream cannot have more replicas than the cluster has servers",
				what, decl.replicas.v, servers)
		} else {
			s.Replicas = int(decl.replicas.v)
		}
	}
	// The server refuses a stream whose largest message would not fit in it.
	if (decl.maxBytes.set() || decl.maxMsgSize.set()) && s.MaxBytes >= 0 && s.MaxMsgSize > s.MaxBytes {
		at, key := decl.maxMsgSize.pos, "max_msg_size"
		if !decl.maxMsgSize.set() {
			at, key = decl.maxBytes.pos, "max_bytes"
		}
		diags.add(at, "%s.%s: max_msg_size %s is larger than max_bytes %s; a stream cannot take a message it could not hold",
			what, key, FormatSize(s.MaxMsgSize), FormatSize(s.MaxBytes))
	}
	return s
}

// resolveConsumer is base with what decl sets in its place, after checking what the two say
// together: a backoff's first step is the ack wait, and a message is not delivered fewer times
// than the backoff has steps.
func resolveConsumer(diags *diagnostics, base ConsumerSettings, decl *consumerDecl, what string) ConsumerSettings {
	if decl == nil {
		return base
	}
	c := base
	inherited := len(base.Backoff) > 0
	if decl.backoffPos != (Pos{}) {
		c.Backoff = decl.backoff
		c.AckWait = decl.backoff[0]
		inherited = false
	}
	if decl.ackWait.set() {
		switch {
		case decl.backoffPos != (Pos{}) && time.Duration(decl.ackWait.v) != decl.backoff[0]:
			diags.add(decl.ackWait.pos, "%s.ack_wait is %s, but backoff's first step is %s: with a backoff, its first step is the ack wait; leave ack_wait out, or make the two equal",
				what, time.Duration(decl.ackWait.v), decl.backoff[0])
		case inherited && time.Duration(decl.ackWait.v) != base.Backoff[0]:
			diags.add(decl.ackWait.pos, "%s.ack_wait is %s, but the backoff it inherits begins with %s, which the server takes as the ack wait: set backoff here too",
				what, time.Duration(decl.ackWait.v), base.Backoff[0])
		default:
			c.AckWait = time.Duration(decl.ackWait.v)
		}
	}
	if decl.maxAckPending.set() {
		c.MaxAckPending = int(decl.maxAckPending.v)
	}
	if decl.maxDeliver.set() {
		c.MaxDeliver = int(decl.maxDeliver.v)
	}
	if c.MaxDeliver > 0 && len(c.Backoff) > c.MaxDeliver && (decl.maxDeliver.set() || decl.backoffPos != (Pos{})) {
		at := decl.backoffPos
		if decl.maxDeliver.set() {
			at = decl.maxDeliver.pos
		}
		diags.add(at, "%s: max_deliver %d is fewer than backoff's %d steps; the server refuses a backoff longer than the deliveries it spaces",
			what, c.MaxDeliver, len(c.Backoff))
	}
	return c
}

// validateJetStream resolves the bus's stream and consumer settings into b: the defaults, then
// bus.jetstream, with bus.events_max_age (the older spelling of
// bus.jetstream.streams.events.max_age) between them.
func validateJetStream(diags *diagnostics, rb *rawBus, b *Bus) {
	b.Streams = DefaultStreams(b.Replicas)
	b.ConsumerDefaults = DefaultConsumer()
	if rb == nil {
		return
	}
	if rb.eventsMaxAge.val != "" {
		d, err := time.ParseDuration(rb.eventsMaxAge.val)
		if err != nil || d <= 0 {
			diags.add(rb.eventsMaxAge.pos, "bus.events_max_age %s must be a positive duration such as 168h", printable.Quote(rb.eventsMaxAge.val))
		} else {
			b.Streams.Events.MaxAge = d
		}
	}
	js := rb.jetstream
	if js == nil {
		return
	}
	if js.events != nil && js.events.maxAge.set() && rb.eventsMaxAge.val != "" {
		diags.add(js.events.maxAge.pos, "bus.jetstream.streams.events.max_age and bus.events_max_age (at %s) both say how long EVENTS keeps an event: keep one", rb.eventsMaxAge.pos)
	}
	servers := len(b.Servers)
	if rb.serversPos == (Pos{}) {
		servers = 0
	}
	b.Streams.Control = resolveStream(diags, b.Streams.Control, js.control, "bus.jetstream.streams.control", servers)
	b.Streams.Events = resolveStream(diags, b.Streams.Events, js.events, "bus.jetstream.streams.events", servers)
	b.Streams.Nodes = resolveStream(diags, b.Streams.Nodes, js.nodes, "bus.jetstream.streams.nodes", servers)
	b.Streams.Seats = resolveStream(diags, b.Streams.Seats, js.seats, "bus.jetstream.streams.seats", servers)
	b.ConsumerDefaults = resolveConsumer(diags, b.ConsumerDefaults, js.consumers, "bus.jetstream.consumers")
}

// resolveSettings gives each seat its queue's and worker's settings and each module its
// consumer's: the mesh's, with what the seat or module says in their place.
func (r *rawMesh) resolveSettings(diags *diagnostics, ix *index, m *Mesh) {
	servers := 0
	if r.bus != nil && r.bus.serversPos != (Pos{}) {
		servers = len(m.Bus.Servers)
	}
	for i := range m.Seats {
		s := &m.Seats[i]
		raw := ix.seats[s.Name]
		s.Stream = resolveStream(diags, m.Bus.Streams.Seats, raw.stream, "seat.stream", servers)
		s.Consumer = resolveConsumer(diags, m.Bus.ConsumerDefaults, raw.consumer, "seat.consumer")
	}
	for i := range m.Modules {
		mod := &m.Modules[i]
		mod.Consumer = resolveConsumer(diags, m.Bus.ConsumerDefaults, ix.modules[mod.Name].consumer, "module.consumer")
	}
}
