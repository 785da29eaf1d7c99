package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/printable"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
	"github.com/meshbus/meshctl/wire"
)

// Kind is what a message on a node's control subjects is.
type Kind int

// The kinds of control traffic.
const (
	KindUnknown Kind = iota
	KindReport
	KindEnrol
	KindHeartbeat
)

// Classify says what subject carries and for which node. It reads the node from the subject and
// checks the whole subject against render's spelling, so a subject the mesh does not derive
// (an extra token, another verb) is KindUnknown rather than a guess.
func Classify(subject string) (Kind, string) {
	tokens := strings.Split(subject, ".")
	if len(tokens) != 4 {
		return KindUnknown, ""
	}
	node := tokens[2]
	if !nodeName(node) {
		return KindUnknown, ""
	}
	switch subject {
	case render.ReportSubject(node):
		return KindReport, node
	case render.EnrolSubject(node):
		return KindEnrol, node
	case render.HeartbeatSubject(node):
		return KindHeartbeat, node
	}
	return KindUnknown, ""
}

// nodeName reports whether s could be a node's name as the model allows them (lowercase
// letters, digits and `-`, at most model.MaxNameLen): the node a subject names goes into every
// log line, store row and answer about the message, so no other byte may.
func nodeName(s string) bool {
	if s == "" || len(s) > model.MaxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// Verb is how a message taken from CONTROL is settled.
type Verb string

// The ways to settle a delivery.
const (
	Ack  Verb = "ack"  // taken: it leaves the work queue
	Nak  Verb = "nak"  // not yet: delivered again after Delay, and it stays in the stream meanwhile
	Term Verb = "term" // let go: never delivered again, and it leaves the work queue
)

// Settle is what to do with a delivery, and why.
type Settle struct {
	Verb   Verb
	Delay  time.Duration // for Nak
	Reason string
}

// Window is the store window (docs/design-rules.md): how long a message the store cannot take is
// held before it is let go. The message itself stays the server's, in the stream; all the window
// keeps is when the store began failing.
type Window struct {
	// Bound is how long the store may fail before a message it cannot take is let go.
	Bound time.Duration
	// Retry is the delay of each nak while the store fails.
	Retry time.Duration

	opened time.Time // when the store began failing; zero while it takes what it is given
}

// Opened is when the store began failing, or zero while it works.
func (w *Window) Opened() time.Time { return w.opened }

// After decides, once the store was given a message published at published, what to do with the
// message: ack it when the store took it (closing the window), nak it with the retry delay while
// the window is within its bound, term it once the bound has passed. A message published after
// the store began failing has its own bound from when it was published: a report filed a moment
// ago is not let go because the store has been down for an hour.
func (w *Window) After(stored error, published, now time.Time) Settle {
	if stored == nil {
		w.opened = time.Time{}
		return Settle{Verb: Ack, Reason: "recorded"}
	}
	if w.opened.IsZero() {
		w.opened = now
	}
	since := w.opened
	if published.After(since) {
		since = published
	}
	if held := now.Sub(since); held >= w.Bound {
		return Settle{Verb: Term, Reason: fmt.Sprintf("the store has not taken it for %s, past the bound of %s: %v",
			held.Round(time.Millisecond), w.Bound, stored)}
	}
	return Settle{Verb: Nak, Delay: w.Retry, Reason: fmt.Sprintf("the store did not take it: %v", stored)}
}

// ErrSuperseded is returned (wrapped) by JudgeReport for a report about a declaration that a
// newer one replaced: what it says is no longer about what the node is meant to run.
var ErrSuperseded = errors.New("the report is about a superseded declaration")

// ErrNotReport is returned (wrapped) for a payload that is not a report the controller may
// record: malformed, out of bounds, or about a generation never declared to the node. No
// store that returns could take it, so it is let go, never held.
var ErrNotReport = errors.New("not a report")

// MaxReportSize bounds a report's payload, in bytes. A report names each instance of its node
// once, with a reason where it failed: a thousand instances failing with reasons of 200 bytes
// fit. It is checked before the payload is read.
const MaxReportSize = 256 << 10

// MaxReasonLen bounds the reason a report gives for one instance it could not apply, in bytes:
// an error the agent met, with the path it met it at.
const MaxReasonLen = 4096

// JudgeReport reads node's report and decides whether it is to be recorded, given the
// generation last declared to the node (0 when none was). Each user it names must be an
// instance of that node (or the agent's ReportRemoval), each reason bounded (JSON decoding makes
// it UTF-8 already, invalid bytes replaced), and its generation one that was declared: from 1
// to the last declared. A report about an older
// generation is superseded, and settled without being acted on; one above it (or of 0, which
// no declaration carries) says the node applied what it was never told, and is not a report.
func JudgeReport(node string, payload []byte, declared uint64) (wire.Report, error) {
	if len(payload) > MaxReportSize {
		return wire.Report{}, fmt.Errorf("%w: %d bytes, above the bound of %d", ErrNotReport, len(payload), MaxReportSize)
	}
	var r wire.Report
	if err := json.Unmarshal(payload, &r); err != nil {
		return wire.Report{}, fmt.Errorf("%w: %v", ErrNotReport, err)
	}
	for _, u := range r.Applied {
		if !instanceOf(node, u) {
			return wire.Report{}, fmt.Errorf("%w: it says it applied %s, not an instance of node %s", ErrNotReport, printable.Quote(u), node)
		}
	}
	for u, why := range r.Failed {
		if u != wire.ReportRemoval && !instanceOf(node, u) {
			return wire.Report{}, fmt.Errorf("%w: it says %s failed, not an instance of node %s", ErrNotReport, printable.Quote(u), node)
		}
		if len(why) > MaxReasonLen {
			return wire.Report{}, fmt.Errorf("%w: the reason it gives for %s is %d bytes, above the bound of %d", ErrNotReport, u, len(why), MaxReasonLen)
		}
	}
	if r.Generation == 0 || r.Generation > declared {
		return wire.Report{}, fmt.Errorf("%w: generation %d was never declared to node %s (the last declared is %d)", ErrNotReport, r.Generation, node, declared)
	}
	if r.Generation < declared {
		return r, fmt.Errorf("%w: it applied generation %d, and generation %d was declared since", ErrSuperseded, r.Generation, declared)
	}
	return r, nil
}

// instanceOf reports whether user names a module instance of node, with a module name the model
// allows in length.
func instanceOf(node, user string) bool {
	inst, ok := host.InstanceOf(user)
	return ok && inst.Node == node && len(inst.Module) <= model.MaxNameLen
}

// ErrNotHeartbeat is returned (wrapped) for a heartbeat payload that is not one.
var ErrNotHeartbeat = errors.New("not a heartbeat")

// MaxHeartbeatSize bounds a heartbeat's payload, in bytes: a time and a generation in JSON take
// under a hundred.
const MaxHeartbeatSize = 1024

// JudgeHeartbeat reads a heartbeat. Its generation is the node's own word about itself, kept in
// memory and shown as said, so it is not held to what was declared (a node that lies about it
// misleads only about itself); what is bounded is what reading it costs.
func JudgeHeartbeat(payload []byte) (wire.Heartbeat, error) {
	if len(payload) > MaxHeartbeatSize {
		return wire.Heartbeat{}, fmt.Errorf("%w: %d bytes, above the bound of %d", ErrNotHeartbeat, len(payload), MaxHeartbeatSize)
	}
	var hb wire.Heartbeat
	if err := json.Unmarshal(payload, &hb); err != nil {
		return wire.Heartbeat{}, fmt.Errorf("%w: %v", ErrNotHeartbeat, err)
	}
	return hb, nil
}

// ErrRefused is returned (wrapped) for an enrolment the controller refuses: a well-formed
// request it answers, saying why.
var ErrRefused = errors.New("enrolment refused")

// EnrolAsk is an enrolment request as the controller reads it: the node its subject names, where
// the answer goes, and the key to seal it to.
type EnrolAsk struct {
	Node  string
	Reply string
	Key   []byte
}

// JudgeEnrolment reads an enrolment request and checks what can be checked without the store.
// A request that is not well formed — its answer's address not under the node's own enrolment
// inbox or out of bounds (wire.EnrolReply), its key not an X25519 public key — is
// wire.ErrNotEnrolment, and is let go unanswered: nothing it carries is fit to use. A
// well-formed one from a node not in the description is ErrRefused, answered. Whether the
// node's enrolment credential is unused is the store's to say, in the same transaction that
// uses it.
func JudgeEnrolment(m *model.Mesh, subject string, payload []byte) (EnrolAsk, error) {
	reply, err := wire.EnrolReply(subject, payload)
	if err != nil {
		return EnrolAsk{}, err
	}
	kind, node := Classify(subject)
	if kind != KindEnrol {
		return EnrolAsk{}, fmt.Errorf("%w: subject %s", wire.ErrNotEnrolment, printable.Quote(subject))
	}
	var req wire.EnrolRequest
	_ = json.Unmarshal(payload, &req) // EnrolReply read it already
	if len(req.Key) != wire.KeySize {
		return EnrolAsk{}, fmt.Errorf("%w: node %s sent a key of %d bytes, not an X25519 public key of %d", wire.ErrNotEnrolment, node, len(req.Key), wire.KeySize)
	}
	ask := EnrolAsk{Node: node, Reply: reply, Key: req.Key}
	if !slices.ContainsFunc(m.Nodes, func(n model.Node) bool { return n.Name == node }) {
		return ask, fmt.Errorf("%w: node %s is not in the mesh's description", ErrRefused, node)
	}
	return ask, nil
}

// DeclarationFor is what node runs in the mesh m, without memberships and without a generation:
// every instance on it, with the subjects it emits, follows, serves, sends to and calls, the
// seats it holds and the consumers it binds, all spelled by render.
func DeclarationFor(m *model.Mesh, node string) wire.Declaration {
	modules := make(map[string]*model.Module, len(m.Modules))
	for i := range m.Modules {
		modules[m.Modules[i].Name] = &m.Modules[i]
	}
	holds := map[string][]string{}
	for _, h := range m.Holding {
		if h.Holder.Node == node {
			holds[h.Holder.Module] = append(holds[h.Holder.Module], h.Seat)
		}
	}
	d := wire.Declaration{Node: node, Instances: []wire.Instance{}}
	for _, inst := range m.Instances() {
		if inst.Node != node {
			continue
		}
		mod := modules[inst.Module]
		in := wire.Instance{User: render.InstanceUser(inst), Module: inst.Module}
		for _, e := range mod.Emits {
			in.Emits = append(in.Emits, render.ModuleEvent(mod.Name, e))
		}
		for _, f := range mod.Follows {
			in.Follows = append(in.Follows, render.EventSubject(f))
		}
		for _, t := range mod.Serves {
			in.Serves = append(in.Serves, render.ModuleTool(mod.Name, t))
		}
		for _, s := range mod.Sends {
			in.Sends = append(in.Sends, render.AcceptSubject(s.Seat, s.Accept))
		}
		for _, t := range mod.Calls {
			in.Calls = append(in.Calls, render.ToolSubject(t))
		}
		if len(mod.Follows) > 0 {
			in.Consumers = append(in.Consumers, wire.Consumer{Stream: render.StreamEvents, Name: render.InstanceConsumer(inst)})
		}
		seats := holds[inst.Module]
		slices.Sort(seats)
		for _, name := range seats {
			in.Holds = append(in.Holds, name)
			in.Consumers = append(in.Consumers, wire.Consumer{Stream: render.SeatStreamName(name), Name: render.WorkerConsumer(name)})
			if s, ok := m.Seat(name); ok {
				for _, e := range s.Emits {
					in.Emits = append(in.Emits, render.SeatEvent(name, e))
				}
				for _, t := range s.Serves {
					in.Serves = append(in.Serves, render.SeatTool(name, t))
				}
			}
		}
		d.Instances = append(d.Instances, in)
	}
	slices.SortFunc(d.Instances, func(a, b wire.Instance) int { return strings.Compare(a.User, b.User) })
	return d
}

// DeclarationChange is what declaring a node anew changes from what it was declared last: whose
// credential is declared again, who gets a fresh one, whose was issued by hand and is left
// alone, who left the node, and whether what the node runs changed. The loop acts on it;
// deciding it reads nothing but its arguments.
type DeclarationChange struct {
	// Keep is the instances whose sealed credential from last time is declared again.
	Keep []string
	// Mint is the instances that get a freshly minted credential.
	Mint []string
	// ByHand is the instances whose credential an operator issued by hand (wire.Instance's
	// ByHand): declared without a membership, never minted or revoked by the controller.
	ByHand []string
	// Departed is the principals declared last time that are no instance of the node now,
	// sorted: their credentials are revoked.
	Departed []string
	// Digest is the new declaration's (wire.Declaration.Digest), recorded with it.
	Digest string
	// DigestChanged is whether Digest differs from the one declared last: what the node runs
	// changed, credentials aside.
	DigestChanged bool
}

// Changed reports whether the node is to be declared a new generation: what it runs changed,
// or a credential it is to hold did.
func (c DeclarationChange) Changed() bool { return c.DigestChanged || c.ChangesCredentials() }

// ChangesCredentials reports whether the declaration mints or revokes a credential, which is
// to be made live on the bus before the node hears of it.
func (c DeclarationChange) ChangesCredentials() bool { return len(c.Mint) > 0 || len(c.Departed) > 0 }

// ChangeOf decides what declaring d to its node changes, given what was declared to the node
// last and the store's hash of each principal. An instance d marks ByHand keeps the credential
// an operator issued it: the host it was given to is using it, and one minted for the agent in
// its place would lock that host out with nothing said. Any other instance keeps the credential
// declared last time when a sealed copy was kept and the store's hash for the user is still the
// one that copy was minted with; every other — new on the node, revoked (rotated, or handed
// over from the operator to the agent), or enrolled anew with another key — needs a fresh
// credential. Keep, Mint and ByHand follow d's order.
func ChangeOf(last state.Declared, hashes map[string]string, d wire.Declaration) DeclarationChange {
	c := DeclarationChange{Digest: d.Digest()}
	c.DigestChanged = c.Digest != last.Digest
	for _, in := range d.Instances {
		if in.ByHand {
			c.ByHand = append(c.ByHand, in.User)
		} else if h := last.Credentials[in.User].Hash; h != "" && h == hashes[in.User] {
			c.Keep = append(c.Keep, in.User)
		} else {
			c.Mint = append(c.Mint, in.User)
		}
	}
	for u := range last.Credentials {
		if !slices.ContainsFunc(d.Instances, func(in wire.Instance) bool { return in.User == u }) {
			c.Departed = append(c.Departed, u)
		}
	}
	slices.Sort(c.Departed)
	return c
}
