package explain

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// decl is one declaration an advice asks for: who writes it, what it says in the YAML, and
// what it does to a copy of the description.
type decl struct {
	who  string // "module shop", "seat mailer", "the controller"; "" for a section of its own
	says string // "calls: [telegram/status]"
	note string // said after it: what it replaces
	add  func(*model.Mesh)
}

func moduleDecl(module, says string, add func(*model.Module)) decl {
	return decl{who: "module " + module, says: says, add: func(m *model.Mesh) {
		if i := slices.IndexFunc(m.Modules, func(mod model.Module) bool { return mod.Name == module }); i >= 0 {
			add(&m.Modules[i])
		}
	}}
}

func seatDecl(seat, says string, add func(*model.Seat)) decl {
	return decl{who: "seat " + seat, says: says, add: func(m *model.Mesh) {
		if i := slices.IndexFunc(m.Seats, func(s model.Seat) bool { return s.Name == seat }); i >= 0 {
			add(&m.Seats[i])
		}
	}}
}

func controllerDecl(says string, add func(*model.Controller)) decl {
	return decl{who: "the controller", says: says, add: func(m *model.Mesh) { add(&m.Controller) }}
}

func consumersKind(kind string) decl {
	return decl{says: "bus: {consumers: " + kind + "}", add: func(m *model.Mesh) { m.Bus.Consumers = kind }}
}

// with is list and v, never sharing list's array: the copy of the description shares its
// declarations' lists with the description itself.
func with[T any](list []T, v T) []T { return append(slices.Clip(list), v) }

// follows, calls and sends are the declarations of the refused principal that use ref.
func (e *explainer) follows(ref model.EventRef) decl {
	says := "follows: [" + ref.String() + "]"
	if e.w.ctl {
		return controllerDecl(says, func(c *model.Controller) { c.Follows = with(c.Follows, ref) })
	}
	return moduleDecl(e.w.mod.Name, says, func(mod *model.Module) { mod.Follows = with(mod.Follows, ref) })
}

func (e *explainer) calls(ref model.ToolRef) decl {
	says := "calls: [" + ref.String() + "]"
	if e.w.ctl {
		return controllerDecl(says, func(c *model.Controller) { c.Calls = with(c.Calls, ref) })
	}
	return moduleDecl(e.w.mod.Name, says, func(mod *model.Module) { mod.Calls = with(mod.Calls, ref) })
}

func (e *explainer) sends(ref model.AcceptRef) decl {
	says := "sends: [" + ref.String() + "]"
	if e.w.ctl {
		return controllerDecl(says, func(c *model.Controller) { c.Sends = with(c.Sends, ref) })
	}
	return moduleDecl(e.w.mod.Name, says, func(mod *model.Module) { mod.Sends = with(mod.Sends, ref) })
}

// offer is what the owner of traffic must declare for name to be its (an event it emits, a
// tool it serves, work it accepts), or nothing when it declares it already.
func (e *explainer) offer(seatOwned bool, owner, verb, name string) []decl {
	key := map[string]string{"event": "emits", "tool": "serves", "accept": "accepts"}[verb]
	says := key + ": [" + name + "]"
	if seatOwned {
		s, _ := e.m.Seat(owner)
		list := map[string]*[]string{"event": &s.Emits, "tool": &s.Serves, "accept": &s.Accepts}[verb]
		if slices.Contains(*list, name) {
			return nil
		}
		return []decl{seatDecl(owner, says, func(s *model.Seat) {
			list := map[string]*[]string{"event": &s.Emits, "tool": &s.Serves, "accept": &s.Accepts}[verb]
			*list = with(*list, name)
		})}
	}
	i := slices.IndexFunc(e.m.Modules, func(mod model.Module) bool { return mod.Name == owner })
	list := map[string][]string{"event": e.m.Modules[i].Emits, "tool": e.m.Modules[i].Serves}[verb]
	if slices.Contains(list, name) {
		return nil
	}
	return []decl{moduleDecl(owner, says, func(mod *model.Module) {
		if verb == "event" {
			mod.Emits = with(mod.Emits, name)
		} else {
			mod.Serves = with(mod.Serves, name)
		}
	})}
}

// handOver advises making the refused module instance the holder of seat, with offer (what
// the seat itself must declare), the claim a module needs to hold a seat, and also.
func (e *explainer) handOver(seat, why string, offer []decl, also ...decl) Advice {
	inst := *e.w.inst
	ds := slices.Clone(offer)
	if !slices.Contains(e.w.mod.Claims, seat) {
		ds = append(ds, moduleDecl(inst.Module, "claims: ["+seat+"]", func(mod *model.Module) { mod.Claims = with(mod.Claims, seat) }))
	}
	h := model.HolderDecl{Seat: seat, Node: inst.Node, Module: inst.Module}
	d := decl{says: fmt.Sprintf("holders: [{seat: %s, node: %s, module: %s}]", seat, inst.Node, inst.Module)}
	if i := slices.IndexFunc(e.m.Holders, func(h model.HolderDecl) bool { return h.Seat == seat }); i >= 0 {
		d.note = fmt.Sprintf(" in place of {seat: %s, node: %s, module: %s}", seat, e.m.Holders[i].Node, e.m.Holders[i].Module)
	}
	d.add = func(m *model.Mesh) {
		m.Holders = with(slices.DeleteFunc(slices.Clone(m.Holders), func(h model.HolderDecl) bool { return h.Seat == seat }), h)
	}
	ds = append(append(ds, d), also...)
	return e.advise(func(wants string) string { return why + "; to hand it over: " + wants }, ds...)
}

// wants says the declarations ds in words: one as what its owner does not declare, several as
// what each owner would need.
func wants(ds []decl) string {
	if len(ds) == 1 {
		if ds[0].who == "" {
			return ds[0].says + ds[0].note
		}
		return ds[0].who + " does not declare " + ds[0].says + ds[0].note
	}
	var b strings.Builder
	for i, d := range ds {
		switch {
		case i == 0 && d.who == "":
			b.WriteString("the description would need ")
		case i == 0:
			b.WriteString(d.who + " would need ")
		case i == len(ds)-1:
			b.WriteString(", and ")
		default:
			b.WriteString(", ")
		}
		if i > 0 && d.who != "" {
			b.WriteString(d.who + " ")
		}
		b.WriteString("`" + d.says + "`" + d.note)
	}
	return b.String()
}

// advise is the advice to declare ds, said by say (given them in words; nil says them as they
// are), once a copy of the description with ds added validates and grants what was refused.
// Without ds it is the description as it stands, which may grant it already: the bus refused
// before it took the description.
func (e *explainer) advise(say func(wants string) string, ds ...decl) Advice {
	err := e.try(ds)
	switch {
	case err == nil && len(ds) == 0:
		return Advice{Text: fmt.Sprintf("the description grants %s this already: the bus refused it before it took the description (meshctl apply, or watch's next reconcile, gives it)", e.w.name)}
	case err == nil:
		if say == nil {
			return Advice{Text: wants(ds), Grantable: true}
		}
		return Advice{Text: say(wants(ds)), Grantable: true}
	case len(ds) == 0:
		return never("the description derives %s no grant of %s", e.w.name, Rule(e.r))
	}
	var said []string
	for _, d := range ds {
		said = append(said, strings.TrimSpace(d.who+" `"+d.says+"`"+d.note))
	}
	return never("%s %s", strings.Join(said, ", "), err)
}

// errWouldNotGrant is a copy of the description that validates but still does not grant the
// refused subject.
var errWouldNotGrant = errors.New("would still not grant it")

// try adds ds to a copy of the description and returns why that is no advice: the first
// problem validation finds with it, or errWouldNotGrant when what it derives does not grant
// the refusal.
func (e *explainer) try(ds []decl) error {
	c := *e.m
	c.Seats, c.Modules, c.Holders = slices.Clone(e.m.Seats), slices.Clone(e.m.Modules), slices.Clone(e.m.Holders)
	for _, d := range ds {
		d.add(&c)
	}
	checked, err := model.Check(&c)
	if err != nil {
		var invalid *model.LoadError
		if errors.As(err, &invalid) && len(invalid.Diagnostics) > 0 {
			return fmt.Errorf("would be refused: %s", invalid.Diagnostics[0].Message)
		}
		return fmt.Errorf("would be refused: %w", err)
	}
	if !Granted(render.Derive(checked), e.r) {
		return errWouldNotGrant
	}
	return nil
}

// Granted reports whether the derived bus d lets r's principal do what r says it was refused.
func Granted(d *render.Desired, r busclient.PermissionError) bool {
	p, ok := d.Principal(r.User)
	if !ok {
		return false
	}
	list := p.Publish
	if r.Op == busclient.OpSubscribe {
		list = p.Subscribe
	}
	return slices.ContainsFunc(list, func(g render.Grant) bool {
		return covers(g.Subject, r.Subject) && (g.Queue == "" || g.Queue == r.Queue)
	})
}

// covers reports whether a grant's subject (with * and >) covers subject, itself perhaps a
// subscription with wildcards, which a grant covers only with the same wildcard or a wider one.
func covers(grant, subject string) bool {
	g, s := strings.Split(grant, "."), strings.Split(subject, ".")
	for i, tok := range g {
		switch {
		case tok == ">":
			return len(s) > i
		case i >= len(s) || s[i] == ">" || tok != "*" && tok != s[i]:
			return false
		}
	}
	return len(g) == len(s)
}
