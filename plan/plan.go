package plan

import (
	"bytes"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/graph"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// Action is what a change does.
type Action string

// The actions, in the order an apply performs them.
const (
	Create   Action = "create"
	Update   Action = "update"
	Replace  Action = "replace" // delete and create: the server refuses to update a field
	Delete   Action = "delete"
	Conflict Action = "conflict" // a same-named object meshctl does not own: left alone, with what depends on it
)

// Kind is what a change is about.
type Kind string

// The kinds of object.
const (
	KindStream   Kind = "stream"
	KindConsumer Kind = "consumer"
	KindAccounts Kind = "accounts"
)

// Risk grades a change for reviewers.
type Risk string

// Risks, mildest first.
const (
	RiskNone       Risk = "none"
	RiskDisruptive Risk = "disruptive" // something stops working for someone: a permission removed, a consumer recreated
	RiskDataLoss   Risk = "data-loss"  // messages or unacknowledged work would be lost
)

// FieldChange is one field that differs, as text for a reader.
type FieldChange struct {
	Field     string `json:"field"`
	Before    string `json:"before"`
	After     string `json:"after"`
	Immutable bool   `json:"immutable,omitempty"` // the server refuses to update it in place
}

// AtStake is what a replacement or deletion would lose, or what an update that lowers a
// stream's limits below what it holds discards.
type AtStake struct {
	Messages   uint64 `json:"messages"`    // stored in the stream
	Pending    uint64 `json:"pending"`     // not yet delivered by the consumer
	AckPending uint64 `json:"ack_pending"` // delivered and not yet acknowledged
	// Discards is how many of the stream's oldest messages its update discards at once: those
	// beyond a lowered max_msgs, max_bytes or max_age. AtLeast says the count stopped at a
	// bound, or could not be made (NotCounted says why), and is the least that goes.
	Discards   uint64 `json:"discards,omitempty"`
	AtLeast    bool   `json:"at_least,omitempty"`
	NotCounted string `json:"not_counted,omitempty"`
}

// Any reports whether anything is at stake.
func (a *AtStake) Any() bool {
	return a != nil && a.Messages+a.Pending+a.AckPending+a.Discards > 0
}

// UserChange is one user's difference in the accounts config. It never carries a password
// or a hash: only whether the credential changed.
type UserChange struct {
	User             string   `json:"user"`
	Action           Action   `json:"action"` // create, update or delete
	PublishAdded     []string `json:"publish_added,omitempty"`
	PublishRemoved   []string `json:"publish_removed,omitempty"`
	SubscribeAdded   []string `json:"subscribe_added,omitempty"`
	SubscribeRemoved []string `json:"subscribe_removed,omitempty"`
	// AllowResponses is "granted" or "revoked" when it changes.
	AllowResponses string `json:"allow_responses,omitempty"`
	// Credential says what happened to the user's password or nkey: "issued" (it had none
	// and now may log in), "rotated", "revoked" (locked again), CredentialReissue (locked
	// because bus.auth changed: a new membership is needed), or "" for no change.
	Credential string `json:"credential,omitempty"`
}

// Change is one planned change.
type Change struct {
	Kind   Kind   `json:"kind"`
	Name   string `json:"name"`
	Stream string `json:"stream,omitempty"` // for a consumer
	Action Action `json:"action"`
	Reason string `json:"reason"`
	Risk   Risk   `json:"risk"`
	// Refused is why an apply will not perform this change unless the operator allows
	// data loss; empty when it will.
	Refused string        `json:"refused,omitempty"`
	Fields  []FieldChange `json:"fields,omitempty"`
	AtStake *AtStake      `json:"at_stake,omitempty"`
	Users   []UserChange  `json:"users,omitempty"`
	// Move, on a stream's deletion, is where its messages go first (a renamed seat's queue).
	Move *Move `json:"move,omitempty"`
	// Before and After are the whole configs (*jetstream.StreamConfig or
	// *jetstream.ConsumerConfig); an apply sends After whole, never a partial config,
	// so no field nobody meant to change is reset.
	Before any `json:"before,omitempty"`
	After  any `json:"after,omitempty"`
}

// ID names the object a change is about: `stream EVENTS`, `consumer EVENTS/two_audit`.
func (c Change) ID() string {
	if c.Kind == KindConsumer {
		return string(c.Kind) + " " + c.Stream + "/" + c.Name
	}
	return string(c.Kind) + " " + c.Name
}

// HolderMove is a seat whose holder changes.
type HolderMove struct {
	Seat string          `json:"seat"`
	From *model.Instance `json:"from"` // nil: the seat had no holder
	To   *model.Instance `json:"to"`   // nil: the seat loses its holder
}

// Baseline is what a plan compares the target with.
type Baseline string

// The baselines.
const (
	// BaselineBus is the live bus, as read: what a replacement or deletion would lose was
	// counted, and an apply refuses to lose it unless allowed.
	BaselineBus Baseline = "bus"
	// BaselineDescription is an older description (`meshctl diff --from`): no bus was read,
	// so nothing queued was counted, and nothing at stake can be shown or refused.
	BaselineDescription Baseline = "description"
)

// Plan is every change, in the order an apply performs them: conflicts (never performed,
// and neither is what depends on them; everything else is),
// stream creations, updates and replacements, then consumers', then the accounts config,
// then consumer deletions, then stream deletions — so a user loses a permission before the
// object it named goes, and gains one only after the object exists.
type Plan struct {
	Changes []Change     `json:"changes"`
	Holders []HolderMove `json:"holders,omitempty"`
	// Graces are the seats' former holders that may still acknowledge the work they took, and
	// nothing else of the seat: those of a holder moving (Until zero, one ack wait from the
	// apply) and those of a handover applied less than an ack wait ago, whose grant the first
	// plan after Until takes away.
	Graces []render.AckGrace `json:"graces,omitempty"`
	// Baseline is what the plan was computed against.
	Baseline Baseline `json:"baseline"`
	// Accounts is the config an apply writes, when the accounts change is planned.
	Accounts []byte `json:"-"`
	// MassDelete is set when the plan deletes more than half of what meshctl owns; its
	// Refused says why an apply refuses it unless the operator allowed it.
	MassDelete *MassDelete `json:"mass_delete,omitempty"`
	// Overcommit is set when the plan changes streams whose byte limits sum to more than the
	// bus says its JetStream has; its Refused says why an apply refuses it unless allowed.
	Overcommit *Overcommit `json:"overcommit,omitempty"`
	// AllowDataLoss is the operator's leave to lose messages, which an apply needs again when
	// a stream holds messages at execution time that it did not hold when it was planned.
	AllowDataLoss bool `json:"-"`
	// Picture is who talks to whom as far as the plan changes it, which the Markdown draws:
	// set by Draw from the descriptions before and after. nil for a plan against a bus, which
	// keeps no description of what it holds.
	Picture *graph.Graph `json:"-"`
}

// Summary counts changes by action.
type Summary struct {
	Create, Update, Replace, Delete, Conflict, Refused int
}

// Summary counts the plan's changes.
func (p *Plan) Summary() Summary {
	var s Summary
	for _, c := range p.Changes {
		switch c.Action {
		case Create:
			s.Create++
		case Update:
			s.Update++
		case Replace:
			s.Replace++
		case Delete:
			s.Delete++
		case Conflict:
			s.Conflict++
		}
		if c.Refused != "" {
			s.Refused++
		}
	}
	return s
}

// Empty reports whether the bus is in sync: nothing to change, nothing in conflict.
func (p *Plan) Empty() bool { return len(p.Changes) == 0 }

// Blocked reports whether an apply must refuse the whole plan: a change is refused (it
// would lose data), or the plan deletes more than half of what meshctl owns. A conflict
// does not block a plan: the objects in conflict, and those that depend on them, are not
// planned, and an apply performs the rest.
func (p *Plan) Blocked() bool {
	return p.Summary().Refused > 0 || p.MassDeleteRefused() || p.OvercommitRefused()
}

// OvercommitRefused reports whether an apply refuses the plan for asking more of the servers
// than their JetStream has.
func (p *Plan) OvercommitRefused() bool { return p.Overcommit != nil && p.Overcommit.Refused != "" }

// MassDeleteRefused reports whether an apply refuses the plan for deleting too much.
func (p *Plan) MassDeleteRefused() bool { return p.MassDelete != nil && p.MassDelete.Refused != "" }

// Conflicts are the plan's changes in conflict: objects meshctl does not own in the way.
func (p *Plan) Conflicts() []Change {
	var out []Change
	for _, c := range p.Changes {
		if c.Action == Conflict {
			out = append(out, c)
		}
	}
	return out
}

// Target is the bus that should be: the derivation and the accounts config rendered with
// the stored hashes.
type Target struct {
	// Bus is the derivation. In a target made by TargetOfMesh its principals are derived when
	// a plan needs them (Principals): until then Bus.Principals is nil, and what reads them
	// reads them through Principals.
	Bus *render.Desired
	// Accounts is the accounts config rendered with Hashes; nil in a target made by
	// TargetOfMesh, which renders it only when it is needed whole (Rendering).
	Accounts []byte
	Hashes   map[string]string
	// Known are the principals whose entry on the server the planning store may change: it
	// minted their credential or revoked it (state's Known). nil for a target without a
	// store (diff --from); see Strands.
	Known map[string]bool
	// Mesh is the identity of the store the target is planned for, which every stream and
	// consumer it derives names (render.MeshKey); "" for a target without a store.
	Mesh string
	// JWTUsers are the principals the store holds a user JWT for, in a mesh whose bus.auth
	// is no longer jwt: each host among them needs a new membership (AuthMigration).
	JWTUsers []string

	// lazy, in a target made by TargetOfMesh, derives its principals and renders its accounts
	// config once each is needed, for every copy of the target.
	lazy *lazyTarget
}

type lazyTarget struct {
	mu     sync.Mutex
	mesh   *model.Mesh // what the principals are derived from
	text   []byte      // the accounts config, once rendered
	digest string      // its digest, once computed
}

// TargetOf is the target of a derivation, its accounts config rendered with hashes (nil
// renders every user locked: `meshctl diff --from` compares two descriptions, where no
// credential plays a part).
func TargetOf(d *render.Desired, hashes map[string]string) Target {
	return Target{Bus: d, Accounts: render.AccountsConfig(d.Principals, hashes), Hashes: hashes}
}

// TargetOfMesh is the target of m's derivation with graces (render.DeriveWithGraces), with its
// accounts config rendered with hashes once needed whole (Rendering) — to show and write a
// change — and its principals derived once needed (Principals). A plan of a mesh whose accounts
// config in use is the rendering compares the two by digest, and holds neither the config,
// megabytes at scale, nor the principals, a 20,000-instance mesh's largest part
// (plan.Live.AccountsRendered).
func TargetOfMesh(m *model.Mesh, graces []render.AckGrace, hashes map[string]string) Target {
	d := render.DeriveObjects(m)
	d.Graces = graces
	return Target{Bus: d, Hashes: hashes, lazy: &lazyTarget{mesh: m}}
}

// Principals are the target's principals (Bus.Principals), derived on the first call in a
// target made by TargetOfMesh, and kept in Bus for every reader after it.
func (t Target) Principals() []render.Principal {
	if t.lazy == nil {
		return t.Bus.Principals
	}
	t.lazy.mu.Lock()
	defer t.lazy.mu.Unlock()
	return t.principalsLocked()
}

// principal is the target's principal of that user (Principals).
func (t Target) principal(user string) (render.Principal, bool) {
	t.Principals()
	return t.Bus.Principal(user)
}

func (t Target) principalsLocked() []render.Principal {
	if t.Bus.Principals == nil {
		t.Bus.Principals = render.DerivePrincipals(t.lazy.mesh, t.Bus.Graces)
	}
	return t.Bus.Principals
}

// Rendering is the target's accounts config: Accounts, or for a target made by TargetOfMesh
// its rendering, made once.
func (t Target) Rendering() []byte {
	if t.Accounts != nil || t.lazy == nil {
		return t.Accounts
	}
	t.lazy.mu.Lock()
	defer t.lazy.mu.Unlock()
	if t.lazy.text == nil {
		t.lazy.text = render.AccountsConfig(t.principalsLocked(), t.Hashes)
	}
	return t.lazy.text
}

// RenderingDigest is the SHA-256, in hex, of the target's accounts config (Rendering),
// computed without rendering it whole, or deriving the principals to keep them, when that
// has not been done.
func (t Target) RenderingDigest() string {
	if t.Accounts != nil || t.lazy == nil {
		return render.Digest(t.Accounts)
	}
	l := t.lazy
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.digest != "":
	case l.text != nil:
		l.digest = render.Digest(l.text)
	case t.Bus.Principals != nil:
		l.digest = render.AccountsDigest(t.Bus.Principals, t.Hashes)
	default:
		l.digest = render.AccountsDigestOf(l.mesh, t.Bus.Graces, t.Hashes)
	}
	return l.digest
}

// rendersAs reports whether conf is the target's accounts config, byte for byte, without
// rendering the config whole when it has not been: by its digest where that is known, and
// otherwise a user at a time.
func (t Target) rendersAs(conf []byte) bool {
	if t.Accounts != nil || t.lazy == nil {
		return bytes.Equal(conf, t.Accounts)
	}
	t.lazy.mu.Lock()
	digest := t.lazy.digest
	t.lazy.mu.Unlock()
	if digest != "" {
		return render.Digest(conf) == digest
	}
	return render.IsAccountsConfig(conf, t.Principals(), t.Hashes)
}

// Live is the bus that is, as read: every stream and consumer on it (owned or not), the
// accounts config in use, and the last applied holders.
type Live struct {
	Streams   []LiveStream
	Consumers []LiveConsumer
	// Accounts is the accounts config in use; AccountsKnown is false when it could not be
	// read (an external server's file elsewhere) or does not exist yet.
	Accounts      []byte
	AccountsKnown bool
	Holding       []model.Holding
	// Baseline says where this value came from; empty means a bus that was read.
	Baseline Baseline

	// AccountsNotServed, when set, says why the server is not known to serve Accounts (a
	// reload it refused, one left to the operator, a file edited by hand): the accounts
	// config is then planned even when Accounts equals the rendering.
	AccountsNotServed string
	// AccountsRendered says that the accounts config in use was found, as it was read, to
	// be the target's rendering byte for byte (by digest: Target.RenderingDigest), and was
	// not kept: Accounts is nil and stands for that rendering. A converged bus then holds
	// neither text of a config of megabytes.
	AccountsRendered bool
	// ReadUsers reads Accounts, or the part of it that differs from the rendering, as the
	// server would serve it, for a plan that compares its users with the target's: needed
	// wherever Accounts is known and may differ from the rendering (UsersReader).
	ReadUsers UsersReader
	// CountDiscards counts what a stream's lowered limits discard, reading the stream; nil
	// where no bus is read. The plan asks only about a stream whose update lowers a limit
	// below what it holds.
	CountDiscards DiscardCounter
	// ReadCapacity asks the bus what its JetStream has for the mesh's streams; nil where no
	// bus is read. The plan asks only when it creates or changes a stream (Overcommit).
	ReadCapacity func() (Capacity, error)
}

// LiveStream is a stream as the server reports it: its config, and how many messages and
// bytes it holds.
type LiveStream struct {
	Config   jetstream.StreamConfig
	Messages uint64
	Bytes    uint64
}

// LiveConsumer is a consumer as the server reports it.
type LiveConsumer struct {
	Stream     string
	Config     jetstream.ConsumerConfig
	Pending    uint64
	AckPending uint64
}

// Options changes what a plan allows.
type Options struct {
	// AllowDataLoss lets an apply replace or delete objects holding messages or
	// unacknowledged work. Without it such changes are planned, and refused.
	AllowDataLoss bool
	// AllowMassDelete lets an apply delete more than half of what meshctl owns. Without it
	// such a plan is refused whole.
	AllowMassDelete bool
	// AllowReissue lets an apply change bus.auth while hosts log in with credentials of
	// the old kind, each of which then needs a new membership. Without it such a plan is
	// refused whole.
	AllowReissue bool
	// AllowOvercommit lets an apply create or change streams whose byte limits sum to more
	// than the bus says its JetStream has. Without it such a plan is refused whole.
	AllowOvercommit bool
}

// Owned reports whether an object's metadata carries meshctl's ownership marker.
func Owned(metadata map[string]string) bool { return metadata[render.OwnerKey] == render.OwnerValue }

// ForMesh is the target for the mesh of store id: every stream and consumer it derives names
// id in its metadata (render.MeshKey), and it changes no object that names another.
func (t Target) ForMesh(id string) Target {
	// The objects of a derivation carry the same metadata, so each run of equal metadata gets
	// one map, shared and never written, rather than a copy for every consumer.
	var from, to map[string]string
	withMesh := func(metadata map[string]string) map[string]string {
		if to != nil && maps.Equal(from, metadata) {
			return to
		}
		from, to = metadata, make(map[string]string, len(metadata)+1)
		maps.Copy(to, metadata)
		to[render.MeshKey] = id
		return to
	}
	for i := range t.Bus.Streams {
		t.Bus.Streams[i].Metadata = withMesh(t.Bus.Streams[i].Metadata)
	}
	for i := range t.Bus.Consumers {
		t.Bus.Consumers[i].Config.Metadata = withMesh(t.Bus.Consumers[i].Config.Metadata)
	}
	t.Mesh = id
	return t
}

// owns reports whether the target may change or delete an object: it carries meshctl's marker,
// and names no other mesh than the target's (render.MeshKey). An object that names none was
// made before meshctl marked which mesh; it is the target's to claim.
func (t Target) owns(metadata map[string]string) bool {
	if !Owned(metadata) {
		return false
	}
	mesh := metadata[render.MeshKey]
	return t.Mesh == "" || mesh == "" || mesh == t.Mesh
}

// notOwned says why an object the target derives is one it will not change.
func (t Target) notOwned(what string, metadata map[string]string) string {
	if Owned(metadata) {
		return fmt.Sprintf("%s belongs to another mesh (%s=%s; this one is %s); meshctl will not change it: two meshes on one bus must name their objects apart",
			what, render.MeshKey, metadata[render.MeshKey], t.Mesh)
	}
	return ""
}

// Between plans the description after against the bus before derives, as though before had
// been applied and nothing had happened since (`meshctl diff --from`): it reads no bus and no
// store, and renders no credential. As an apply does, it lets each seat's former holder that
// after takes the seat from acknowledge the work it took for one ack wait (render.AckGraces),
// and draws who talks to whom as the change alters it.
func Between(before, after *model.Mesh) *Plan {
	graces := render.AckGraces(after, before.Holding, nil, time.Time{})
	p := Compute(TargetOf(render.DeriveWithGraces(after, graces), nil), LiveOf(TargetOf(render.Derive(before), nil)), Options{})
	p.Draw(before, after)
	return p
}

// LiveOf is the bus exactly as a target describes it, as though it had been applied and
// nothing had happened since: `meshctl diff --from OLD` plans from it, without a bus. Nothing
// is at stake in it, since no bus says how much is queued. Its accounts config is t's
// rendering, whose users are read from t without a parser (renderingReader).
func LiveOf(t Target) Live {
	l := Live{Accounts: t.Rendering(), AccountsKnown: true, Holding: t.Bus.Holding, Baseline: BaselineDescription,
		ReadUsers: t.renderingReader()}
	for _, s := range t.Bus.Streams {
		l.Streams = append(l.Streams, LiveStream{Config: s})
	}
	for _, c := range t.Bus.Consumers {
		l.Consumers = append(l.Consumers, LiveConsumer{Stream: c.Stream, Config: c.Config})
	}
	return l
}
