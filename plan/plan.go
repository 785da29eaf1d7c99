package plan

import (
	"fmt"

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

// AtStake is what a replacement or deletion would lose.
type AtStake struct {
	Messages   uint64 `json:"messages"`    // stored in the stream
	Pending    uint64 `json:"pending"`     // not yet delivered by the consumer
	AckPending uint64 `json:"ack_pending"` // delivered and not yet acknowledged
}

// Any reports whether anything is at stake.
func (a *AtStake) Any() bool {
	return a != nil && a.Messages+a.Pending+a.AckPending > 0
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
	// Credential says what happened to the user's password: "issued" (it had none and now
	// may log in), "rotated", "revoked" (locked again), or "" for no change.
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
	// Baseline is what the plan was computed against.
	Baseline Baseline `json:"baseline"`
	// Accounts is the config an apply writes, when the accounts change is planned.
	Accounts []byte `json:"-"`
	// MassDelete is set when the plan deletes more than half of what meshctl owns; its
	// Refused says why an apply refuses it unless the operator allowed it.
	MassDelete *MassDelete `json:"mass_delete,omitempty"`
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
	return p.Summary().Refused > 0 || p.MassDeleteRefused()
}

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
	Bus      *render.Desired
	Accounts []byte
	Hashes   map[string]string
	// Known are the principals whose entry on the server the planning store may change: it
	// minted their credential or revoked it (state's Known). nil for a target without a
	// store (diff --from); see Strands.
	Known map[string]bool
	// Mesh is the identity of the store the target is planned for, which every stream and
	// consumer it derives names (render.MeshKey); "" for a target without a store.
	Mesh string
}

// TargetOf is the target of a derivation, its accounts config rendered with hashes (nil
// renders every user locked: `meshctl diff --from` compares two descriptions, where no
// credential plays a part).
func TargetOf(d *render.Desired, hashes map[string]string) Target {
	return Target{Bus: d, Accounts: render.AccountsConfig(d.Principals, hashes), Hashes: hashes}
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
}

// LiveStream is a stream as the server reports it.
type LiveStream struct {
	Config   jetstream.StreamConfig
	Messages uint64
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
}

// Owned reports whether an object's metadata carries meshctl's ownership marker.
func Owned(metadata map[string]string) bool { return metadata[render.OwnerKey] == render.OwnerValue }

// ForMesh is the target for the mesh of store id: every stream and consumer it derives names
// id in its metadata (render.MeshKey), and it changes no object that names another.
func (t Target) ForMesh(id string) Target {
	withMesh := func(metadata map[string]string) map[string]string {
		out := make(map[string]string, len(metadata)+1)
		for k, v := range metadata {
			out[k] = v
		}
		out[render.MeshKey] = id
		return out
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

// LiveOf is the bus exactly as a target describes it, as though it had been applied and
// nothing had happened since: `meshctl diff --from OLD` plans from it, without a bus. Nothing
// is at stake in it, since no bus says how much is queued.
func LiveOf(t Target) Live {
	l := Live{Accounts: t.Accounts, AccountsKnown: true, Holding: t.Bus.Holding, Baseline: BaselineDescription}
	for _, s := range t.Bus.Streams {
		l.Streams = append(l.Streams, LiveStream{Config: s})
	}
	for _, c := range t.Bus.Consumers {
		l.Consumers = append(l.Consumers, LiveConsumer{Stream: c.Stream, Config: c.Config})
	}
	return l
}
