// Package explain says, in the description's terms, why the bus refused a principal something:
// the line of YAML that would grant it, when a declaration can, or why none can. It is a pure
// function of the mesh and the refusal, so an operator reading watch's log is told "module shop
// does not declare calls: [telegram/status]" rather than a subject and a timeout.
package explain

import (
	"fmt"
	"slices"
	"strings"

	"github.com/meshbus/meshctl/bus"
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

func fix(format string, a ...any) Advice {
	return Advice{Text: fmt.Sprintf(format, a...), Grantable: true}
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
}

// Refusal explains r, a refusal the bus reported, against the mesh m it carries.
func Refusal(m *model.Mesh, r bus.PermissionError) Advice {
	w, ok := principal(m, r.User)
	if !ok {
		return never("user %q is no principal of this description", r.User)
	}
	tok := strings.Split(r.Subject, ".")
	switch {
	case r.Op == bus.OpReply:
		return never("%s may not name %s as a reply subject: replies come to its own inbox, %s.>", w.name, r.Subject, render.Inbox(w.user))
	case tok[0] == "_INBOX":
		return inbox(w, r)
	case tok[0] == "_DELIVER":
		return deliver(m, w, r)
	case strings.HasPrefix(r.Subject, "$JS.API.CONSUMER.INFO.") || strings.HasPrefix(r.Subject, "$JS.API.CONSUMER.MSG.NEXT.") || tok[0] == "$JS" && len(tok) > 1 && tok[1] == "ACK":
		return consumer(m, w, r)
	case tok[0] == "$JS":
		return never("%s is the JetStream API, which is the controller's: a host binds its own consumers by name (never js.Stream, which asks STREAM.INFO, or a create)", r.Subject)
	case tok[0] == "mesh" && slices.ContainsFunc(tok, func(t string) bool { return t == "*" || t == ">" }):
		return never("%s is a wildcard over other principals' traffic", r.Subject)
	case len(tok) >= 5 && tok[0] == "mesh" && (tok[1] == "mod" || tok[1] == "seat"):
		return traffic(m, w, r.Op == bus.OpPublish, tok[1] == "seat", tok[2], tok[3], strings.Join(tok[4:], "."))
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

// handOver is the declaration that makes w the holder of seat.
func handOver(w who, seat string) string {
	return fmt.Sprintf("holders: [{seat: %s, node: %s, module: %s}]", seat, w.inst.Node, w.inst.Module)
}

func traffic(m *model.Mesh, w who, publish, seatOwned bool, owner, verb, name string) Advice {
	ref := owner + "/" + name
	if seatOwned {
		ref = "seat:" + ref
	}
	if !w.ctl && w.mod == nil {
		return never("a node's identity speaks only on its own control subjects, not on %s", ref)
	}
	switch {
	case verb == "event" && !publish:
		return fix("%s does not declare follows: [%s]", w.name, ref)
	case verb == "tool" && publish:
		return fix("%s does not declare calls: [%s]", w.name, ref)
	case verb == "accept" && publish && seatOwned:
		return fix("%s does not declare sends: [%s/%s]", w.name, owner, name)
	case w.ctl:
		return never("the controller only follows, sends and calls; %s %s is a module's or a seat holder's", verb, ref)
	case !seatOwned && owner == w.mod.Name && verb == "event":
		return fix("module %s does not declare emits: [%s]", owner, name)
	case !seatOwned && owner == w.mod.Name && verb == "tool":
		return fix("module %s does not declare serves: [%s]", owner, name)
	case !seatOwned:
		return never("only module %s's instances %s %s", owner, doing(verb, false), ref)
	case !holds(m, w, owner):
		return fix("only seat %s's holder %s %s, and %s does not hold it; to hand it over: %s", owner, doing(verb, true), ref, render.InstanceUser(*w.inst), handOver(w, owner))
	}
	key := map[string]string{"event": "emits", "tool": "serves", "accept": "accepts"}[verb]
	return fix("seat %s does not declare %s: [%s]", owner, key, name)
}

// doing is what only a traffic's owner does with it, said of one principal or of many.
func doing(verb string, one bool) string {
	do := map[string]string{"event": "emit", "tool": "serve", "accept": "take"}[verb]
	if one {
		do += "s"
	}
	return do + " the " + map[string]string{"event": "events", "tool": "tools", "accept": "work"}[verb] + " of"
}

func inbox(w who, r bus.PermissionError) Advice {
	own := render.Inbox(w.user)
	switch {
	case r.Subject == own || strings.HasPrefix(r.Subject, own+"."):
		return never("%s is %s's own inbox, which it is granted; the refusal is of something else", r.Subject, w.name)
	case r.Op == bus.OpPublish:
		return never("%s is another principal's inbox: a principal answers there only once, a request for a tool it serves", r.Subject)
	}
	return never("%s is not %s's inbox; set the client's inbox prefix to %s (nats.CustomInboxPrefix, inboxPrefix)", r.Subject, w.name, own)
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

func consumer(m *model.Mesh, w who, r bus.PermissionError) Advice {
	rest := strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(r.Subject, "$JS.API.CONSUMER.INFO."), "$JS.API.CONSUMER.MSG.NEXT."), "$JS.ACK.")
	stream, name, _ := strings.Cut(rest, ".")
	name, _, _ = strings.Cut(name, ".")
	user, seat := owner(m, stream, name)
	pull := strings.HasPrefix(r.Subject, "$JS.API.CONSUMER.MSG.NEXT.")
	switch {
	case seat != "" && user != w.user && w.inst != nil:
		return fix("only seat %s's holder takes its work, and %s does not hold it; to hand it over: %s", seat, render.InstanceUser(*w.inst), handOver(w, seat))
	case user == w.user && pull && m.Bus.Consumers == model.ConsumersPush:
		return fix("the mesh's consumers are pushed, not pulled: take deliveries on %s, or declare bus: {consumers: pull}", render.DeliverSubject(name))
	case stream == render.StreamEvents && w.mod != nil && name == render.InstanceConsumer(*w.inst):
		return fix("module %s follows nothing, so it has no consumer: declare follows: [MODULE/EVENT]", w.mod.Name)
	case user != "" && user != w.user:
		return never("consumer %s/%s is %s's", stream, name, user)
	}
	return never("%s/%s is no consumer of %s's", stream, name, w.name)
}

func deliver(m *model.Mesh, w who, r bus.PermissionError) Advice {
	name := strings.TrimPrefix(r.Subject, "_DELIVER.")
	name, _, _ = strings.Cut(name, ".")
	if m.Bus.Consumers != model.ConsumersPush {
		return fix("the mesh's consumers are pulled (bus.consumers: pull), so nothing delivers on %s: bind the consumer as a pull consumer, or declare bus: {consumers: push}", r.Subject)
	}
	for _, s := range m.Seats {
		if worker := render.WorkerConsumer(s.Name); worker == name {
			if holds(m, w, s.Name) {
				return never("seat %s's work is taken only in the worker's queue group %s, so no work is done twice", s.Name, worker)
			}
			if w.inst != nil {
				return fix("only seat %s's holder takes its work, and %s does not hold it; to hand it over: %s", s.Name, render.InstanceUser(*w.inst), handOver(w, s.Name))
			}
		}
	}
	return never("%s delivers another principal's consumer", r.Subject)
}
