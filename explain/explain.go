// Package explain says, in the description's terms, why the bus refused a principal something:
// the lines of YAML that would grant it, when declarations can, or why none can. It is a pure
// function of the mesh and the refusal, so an operator reading watch's log is told "module shop
// does not declare calls: [telegram/status]" rather than a subject and a timeout.
//
// Every declaration it advises is tried first: added to a copy of the description, which must
// then validate (model.Check) and derive a grant of what was refused (render.Derive). Where one
// declaration is not enough — a call to a tool its module does not serve, a seat handed to a
// module that does not claim it — the advice names every one that is needed; where none that
// validates would grant it, it says so. An operator who follows the advice is never told next
// that the description is invalid.
package explain

import (
	"fmt"
	"slices"
	"strings"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// Advice is what to do about one refusal.
type Advice struct {
	// Text is the fix (what the description does not declare) or why no declaration can grant
	// the subject.
	Text string
	// Grantable reports whether a change to the description would grant it.
	Grantable bool
}

func never(format string, a ...any) Advice {
	return Advice{Text: fmt.Sprintf(format, a...) + ": no declaration grants it"}
}

// who is the principal refused, as the description knows it.
type who struct {
	name string // how the advice names it: "module shop", "the controller"
	user string
	inst *model.Instance
	mod  *model.Module
	ctl  bool
	// observer is a principal that only looks (model.Observer): no declaration grants it
	// more than it has.
	observer bool
}

// explainer explains one refusal r of principal w against the mesh m.
type explainer struct {
	m *model.Mesh
	r busclient.PermissionError
	w who
}

// Refusal explains r, a refusal the bus reported, against the mesh m it carries. The advice
// depends on r's subject only as far as Rule keeps it: every refusal of one Group is explained
// alike.
func Refusal(m *model.Mesh, r busclient.PermissionError) Advice {
	w, ok := principal(m, r.User)
	if !ok {
		return never("user %q is no principal of this description", r.User)
	}
	e := &explainer{m: m, r: r, w: w}
	tok := strings.Split(r.Subject, ".")
	switch {
	case r.Op == busclient.OpReply:
		return never("%s may name as a reply subject only its own inbox, %s.>", w.name, render.Inbox(w.user))
	case tok[0] == "$JS" && r.Op == busclient.OpSubscribe && (len(tok) > 1 && tok[1] == "ACK" || strings.HasPrefix(r.Subject, "$JS.API.")):
		return never("%s is published, never subscribed: a request to the JetStream API or an acknowledgement, answered at the asker's own inbox", Rule(r))
	case tok[0] == "_DELIVER" && r.Op == busclient.OpPublish:
		return never("%s is where the server delivers a consumer's messages: principals subscribe there, and only the server publishes", r.Subject)
	case tok[0] == "_INBOX":
		return e.inbox()
	case w.observer && r.Op == busclient.OpPublish:
		return never("%s only looks: of the JetStream API it asks only what reads the mesh's streams and consumers (their info, names and lists), and it publishes nothing else", w.name)
	case w.observer:
		return never("%s only looks: it hears its own inbox and the nodes' heartbeats (%s), nothing else", w.name, render.HeartbeatSubjects)
	case tok[0] == "_DELIVER":
		return e.deliver()
	case strings.HasPrefix(r.Subject, "$JS.API.CONSUMER.INFO.") || strings.HasPrefix(r.Subject, "$JS.API.CONSUMER.MSG.NEXT.") || tok[0] == "$JS" && len(tok) > 1 && tok[1] == "ACK":
		return e.consumer()
	case tok[0] == "$JS":
		return never("%s is the JetStream API, which is the controller's: a host binds its own consumers by name (never js.Stream, which asks STREAM.INFO, or a create)", r.Subject)
	case tok[0] == "mesh" && slices.ContainsFunc(tok, func(t string) bool { return t == "*" || t == ">" }):
		return never("%s is a wildcard over other principals' traffic", r.Subject)
	case len(tok) >= 5 && tok[0] == "mesh" && (tok[1] == "mod" || tok[1] == "seat"):
		return e.traffic(r.Op == busclient.OpPublish, tok[1] == "seat", tok[2], tok[3], strings.Join(tok[4:], "."))
	case tok[0] == "mesh" && len(tok) > 1 && (tok[1] == "control" || tok[1] == "node"):
		return never("%s is the control plane's traffic between the controller and node %s", r.Subject, strings.Join(tok[2:3], ""))
	}
	return never("%s is outside the subjects the mesh derives", r.Subject)
}

func principal(m *model.Mesh, user string) (who, bool) {
	if user == render.ControllerUser {
		return who{name: "the controller", user: user, ctl: true}, true
	}
	for _, n := range m.Nodes {
		if user == render.NodeUser(n.Name) {
			return who{name: "node " + n.Name, user: user}, true
		}
		if user == render.EnrolUser(n.Name) {
			return who{name: "node " + n.Name + "'s enrolment identity", user: user}, true
		}
	}
	for _, o := range m.Observers {
		if user == render.ObserverUser(o.Name) {
			return who{name: "observer " + o.Name, user: user, observer: true}, true
		}
	}
	for i := range m.Modules {
		for _, n := range m.Modules[i].On {
			inst := model.Instance{Node: n, Module: m.Modules[i].Name}
			if render.InstanceUser(inst) == user {
				return who{name: "module " + inst.Module, user: user, inst: &inst, mod: &m.Modules[i]}, true
			}
		}
	}
	return who{}, false
}

// holds reports whether w holds seat.
func holds(m *model.Mesh, w who, seat string) bool {
	return w.inst != nil && slices.ContainsFunc(m.Holding, func(h model.Holding) bool { return h.Seat == seat && h.Holder == *w.inst })
}

func (e *explainer) traffic(publish, seatOwned bool, owner, verb, name string) Advice {
	w := e.w
	ref := owner + "/" + name
	if seatOwned {
		ref = "seat:" + ref
	}
	if !w.ctl && w.mod == nil {
		return never("a node's identity speaks only on its own control subjects, not on %s", ref)
	}
	if verb != "event" && verb != "tool" && (verb != "accept" || !seatOwned) {
		return never("%s is outside the subjects the mesh derives", e.r.Subject)
	}
	if advice, known := e.unknownOwner(seatOwned, owner); !known {
		return advice
	}
	offer := e.offer(seatOwned, owner, verb, name)
	switch {
	case verb == "event" && !publish:
		return e.advise(nil, append(offer, e.follows(model.EventRef{Seat: seatOwned, Owner: owner, Event: name}))...)
	case verb == "tool" && publish:
		return e.advise(nil, append(offer, e.calls(model.ToolRef{Seat: seatOwned, Owner: owner, Tool: name}))...)
	case verb == "accept" && publish:
		return e.advise(nil, append(offer, e.sends(model.AcceptRef{Seat: owner, Accept: name}))...)
	case w.ctl:
		return never("the controller only follows, sends and calls; %s %s is a module's or a seat holder's", verb, ref)
	case !seatOwned && owner == w.mod.Name:
		return e.advise(nil, offer...)
	case !seatOwned:
		return never("only module %s's instances %s %s", owner, doing(verb, false), ref)
	case !holds(e.m, w, owner):
		return e.handOver(owner, fmt.Sprintf("only seat %s's holder %s %s, and %s does not hold it", owner, doing(verb, true), ref, w.user), offer)
	}
	return e.advise(nil, offer...)
}

// unknownOwner is the advice for traffic of a module or seat the description does not
// declare; known when it does.
func (e *explainer) unknownOwner(seatOwned bool, owner string) (Advice, bool) {
	if !seatOwned {
		if slices.ContainsFunc(e.m.Modules, func(mod model.Module) bool { return mod.Name == owner }) {
			return Advice{}, true
		}
		return never("%s is the traffic of module %s, which the description does not declare", e.r.Subject, owner), false
	}
	if _, ok := e.m.Seat(owner); ok {
		return Advice{}, true
	}
	for _, s := range e.m.Seats {
		if slices.Contains(s.Formerly, owner) {
			return never("%s names seat %s by a former name: its subjects are now mesh.seat.%s.…", e.r.Subject, s.Name, s.Name), false
		}
	}
	return never("%s is the traffic of seat %s, which the description does not declare", e.r.Subject, owner), false
}

// doing is what only a traffic's owner does with it, said of one principal or of many.
func doing(verb string, one bool) string {
	do := map[string]string{"event": "emit", "tool": "serve", "accept": "take"}[verb]
	if one {
		do += "s"
	}
	return do + " the " + map[string]string{"event": "events", "tool": "tools", "accept": "work"}[verb] + " of"
}

func (e *explainer) inbox() Advice {
	w := e.w
	own := render.Inbox(w.user)
	switch {
	case Rule(e.r) == own+".>" && e.r.Op == busclient.OpPublish:
		return never("%s.> is %s's own inbox, where the answers to its requests come: it subscribes there, and those answering publish", own, w.name)
	case Rule(e.r) == own+".>":
		return e.advise(nil)
	case e.r.Op == busclient.OpPublish:
		return never("%s published into another principal's inbox: a principal answers there only once, a request for a tool it serves", w.name)
	}
	how := "nats.CustomInboxPrefix, inboxPrefix"
	if w.observer {
		how = "the nats CLI's --inbox-prefix, nats.CustomInboxPrefix"
	}
	return never("inbox prefix not set: %s subscribes to inboxes outside its own, %s.>; set the client's inbox prefix to %s (%s)", w.name, own, own, how)
}

// owner is whose consumer stream/name is, as a principal's user, and the seat when it is a
// seat's worker.
func owner(m *model.Mesh, stream, name string) (user, seat string) {
	switch stream {
	case render.StreamControl:
		return render.ControllerUser, ""
	case render.StreamNodes:
		return render.NodeUser(name), ""
	case render.StreamEvents:
		if name == render.ControllerUser {
			return name, ""
		}
		for _, inst := range m.Instances() {
			if render.InstanceConsumer(inst) == name {
				return render.InstanceUser(inst), ""
			}
		}
	}
	for _, s := range m.Seats {
		if render.SeatStreamName(s.Name) == stream {
			for _, h := range m.Holding {
				if h.Seat == s.Name {
					return render.InstanceUser(h.Holder), s.Name
				}
			}
			return "", s.Name
		}
	}
	return "", ""
}

func (e *explainer) consumer() Advice {
	w := e.w
	rest := strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(e.r.Subject, "$JS.API.CONSUMER.INFO."), "$JS.API.CONSUMER.MSG.NEXT."), "$JS.ACK.")
	stream, name, _ := strings.Cut(rest, ".")
	name, _, _ = strings.Cut(name, ".")
	user, seat := owner(e.m, stream, name)
	pull := strings.HasPrefix(e.r.Subject, "$JS.API.CONSUMER.MSG.NEXT.")
	pushed := e.m.Bus.Consumers == model.ConsumersPush
	switch {
	case stream == render.StreamEvents && w.mod != nil && name == render.InstanceConsumer(*w.inst) && len(w.mod.Follows) == 0:
		return e.noEventsConsumer()
	case seat != "" && user != w.user && w.inst != nil:
		var kind []decl
		if pull && pushed {
			kind = append(kind, consumersKind(model.ConsumersPull))
		}
		return e.handOver(seat, fmt.Sprintf("only seat %s's holder takes its work, and %s does not hold it", seat, w.user), nil, kind...)
	case user == w.user && pull && pushed:
		return e.advise(func(string) string {
			return fmt.Sprintf("the mesh's consumers are pushed, not pulled: take deliveries on %s, or declare bus: {consumers: pull}", render.DeliverSubject(name))
		}, consumersKind(model.ConsumersPull))
	case user == w.user:
		return e.advise(nil)
	case user != "":
		return never("consumer %s/%s is %s's", stream, name, user)
	}
	return never("%s/%s is no consumer of %s's", stream, name, w.name)
}

func (e *explainer) deliver() Advice {
	w := e.w
	name := strings.TrimPrefix(e.r.Subject, "_DELIVER.")
	name, _, _ = strings.Cut(name, ".")
	pulled := e.m.Bus.Consumers != model.ConsumersPush
	pulledText := func(string) string {
		return fmt.Sprintf("the mesh's consumers are pulled (bus.consumers: pull), so nothing delivers on %s: bind the consumer as a pull consumer, or declare bus: {consumers: push}", e.r.Subject)
	}
	var kind []decl
	if pulled {
		kind = append(kind, consumersKind(model.ConsumersPush))
	}
	if w.mod != nil && name == render.InstanceConsumer(*w.inst) && len(w.mod.Follows) == 0 {
		return e.noEventsConsumer()
	}
	for _, s := range e.m.Seats {
		if worker := render.WorkerConsumer(s.Name); worker == name {
			switch {
			case e.r.Queue != worker:
				return never("seat %s's work is taken only in the worker's queue group %s, so no work is done twice", s.Name, worker)
			case holds(e.m, w, s.Name) && pulled:
				return e.advise(pulledText, kind...)
			case holds(e.m, w, s.Name):
				return e.advise(nil)
			case w.inst != nil:
				return e.handOver(s.Name, fmt.Sprintf("only seat %s's holder takes its work, and %s does not hold it", s.Name, w.user), nil, kind...)
			}
		}
	}
	own := w.ctl && name == render.ControllerUser ||
		w.inst != nil && name == render.InstanceConsumer(*w.inst) ||
		!w.ctl && w.mod == nil && w.user == render.NodeUser(name)
	switch {
	case own && pulled:
		return e.advise(pulledText, kind...)
	case own:
		return e.advise(nil)
	}
	return never("%s delivers another principal's consumer", e.r.Subject)
}

// noEventsConsumer explains a module that follows nothing asking for the events consumer it
// would have if it did. A module with work of its own — a seat it takes work for, tools it
// serves, events it emits, work it sends or tools it calls — runs without following, and its
// host asking for an events consumer is the host's mistake; only a module that declares
// nothing at all was clearly meant to follow something.
func (e *explainer) noEventsConsumer() Advice {
	mod, inst := e.w.mod, *e.w.inst
	head := fmt.Sprintf("module %s follows nothing, so it has no events consumer %s/%s", mod.Name, render.StreamEvents, render.InstanceConsumer(inst))
	if len(mod.Claims)+len(mod.Serves)+len(mod.Emits)+len(mod.Sends)+len(mod.Calls) > 0 {
		var work []string
		for _, h := range e.m.Holding {
			if h.Holder == inst {
				work = append(work, fmt.Sprintf("seat %s's work from %s/%s", h.Seat, render.SeatStreamName(h.Seat), render.WorkerConsumer(h.Seat)))
			}
		}
		text := head + ": its host should not bind one"
		if len(work) > 0 {
			text += " (it takes " + strings.Join(work, " and ") + ")"
		}
		return Advice{Text: text}
	}
	var events []model.EventRef
	for _, m := range e.m.Modules {
		for _, ev := range m.Emits {
			events = append(events, model.EventRef{Owner: m.Name, Event: ev})
		}
	}
	for _, s := range e.m.Seats {
		for _, ev := range s.Emits {
			events = append(events, model.EventRef{Seat: true, Owner: s.Name, Event: ev})
		}
	}
	if len(events) == 0 {
		return Advice{Text: head + ", and nothing in the mesh emits an event it could follow: its host should not bind one"}
	}
	for _, ev := range events {
		if e.try([]decl{e.follows(ev)}) == nil {
			return Advice{Text: fmt.Sprintf("%s: declare what it follows, e.g. follows: [%s]", head, ev), Grantable: true}
		}
	}
	return Advice{Text: head + ": its host should not bind one"}
}
