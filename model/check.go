package model

import (
	"context"

	"github.com/meshbus/meshctl/internal/printable"
)

// Check validates m, a description changed in memory rather than read from YAML, by the rules
// Load applies to what the YAML declares, and returns the mesh Load would have made of it:
// references resolved and the holder of each seat decided again from its holders and claims.
// explain tries each declaration it would advise on a copy of the description this way, so
// that it never tells an operator to write something meshctl would refuse.
//
// The bus section is carried as it is but for its kind of consumer, which is checked: nothing
// else in the description refers to the bus, and the rest of it was checked when it was read.
// Problems point at the positions m carries; something added in memory has none of its own and
// is placed where its owner was declared.
func Check(m *Mesh) (*Mesh, error) {
	ctx := context.Background()
	var diags diagnostics
	raw := rawOf(m)
	out, err := raw.validate(ctx, &diags)
	if err != nil {
		return nil, err
	}
	out.Bus = m.Bus
	keepSettings(m, out)
	for _, mod := range m.Modules {
		if len(mod.On) == 0 {
			// Load says so as it reads the YAML, before validation.
			diags.add(placed(mod.Pos, Pos{}), "module %s runs on no node: list at least one in `on`", printable.Quote(mod.Name))
		}
	}
	if m.Bus.Consumers != ConsumersPull && m.Bus.Consumers != ConsumersPush {
		diags.add(placed(m.Bus.Pos, Pos{}), "bus.consumers must be pull or push, not %s", printable.Quote(m.Bus.Consumers))
	}
	if err := diags.err(ctx); err != nil {
		return nil, err
	}
	return out, nil
}

// placed is where a value declared in memory is reported: its own position, else its owner's,
// else the description as a whole. A name without a position counts as one already reported
// where it was read (checkName), so nothing checked here may be without one.
func placed(own, owner Pos) Pos {
	switch {
	case own != (Pos{}):
		return own
	case owner != (Pos{}):
		return owner
	}
	return Pos{File: "."}
}

// rawOf turns a mesh back into the declarations that would have made it.
func rawOf(m *Mesh) *rawMesh {
	r := &rawMesh{firstFile: "."}
	names := func(list []string, at Pos) []name {
		out := make([]name, len(list))
		for i, v := range list {
			out[i] = name{val: v, pos: at}
		}
		return out
	}
	events := func(list []EventRef, owner Pos) []name {
		out := make([]name, len(list))
		for i, e := range list {
			out[i] = name{val: e.String(), pos: placed(e.Pos, owner)}
		}
		return out
	}
	accepts := func(list []AcceptRef, owner Pos) []name {
		out := make([]name, len(list))
		for i, a := range list {
			out[i] = name{val: a.String(), pos: placed(a.Pos, owner)}
		}
		return out
	}
	tools := func(list []ToolRef, owner Pos) []name {
		out := make([]name, len(list))
		for i, t := range list {
			out[i] = name{val: t.String(), pos: placed(t.Pos, owner)}
		}
		return out
	}
	c := m.Controller
	if c.Pos != (Pos{}) || len(c.Follows)+len(c.Sends)+len(c.Calls) > 0 {
		at := placed(c.Pos, Pos{})
		r.controller = &rawController{follows: events(c.Follows, at), sends: accepts(c.Sends, at), calls: tools(c.Calls, at), pos: c.Pos}
	}
	for _, n := range m.Nodes {
		at := placed(n.Pos, Pos{})
		r.nodes = append(r.nodes, rawNode{name: name{val: n.Name, pos: at}, pos: n.Pos})
	}
	for _, s := range m.Seats {
		at := placed(s.Pos, Pos{})
		r.seats = append(r.seats, rawSeat{
			name: name{val: s.Name, pos: at}, scope: name{val: s.Scope, pos: at},
			accepts: names(s.Accepts, at), emits: names(s.Emits, at), serves: names(s.Serves, at),
			formerly: names(s.Formerly, at), pos: s.Pos,
		})
	}
	for _, mod := range m.Modules {
		at := placed(mod.Pos, Pos{})
		r.modules = append(r.modules, rawModule{
			name: name{val: mod.Name, pos: at}, on: names(mod.On, at), claims: names(mod.Claims, at),
			emits: names(mod.Emits, at), serves: names(mod.Serves, at), follows: events(mod.Follows, at),
			sends: accepts(mod.Sends, at), calls: tools(mod.Calls, at), pos: mod.Pos,
		})
	}
	for _, h := range m.Holders {
		at := placed(h.Pos, Pos{})
		r.holders = append(r.holders, rawHolder{seat: name{val: h.Seat, pos: at}, node: name{val: h.Node, pos: at},
			module: name{val: h.Module, pos: at}, pos: h.Pos})
	}
	for _, o := range m.Observers {
		r.observers = append(r.observers, rawObserver{name: name{val: o.Name, pos: placed(o.Pos, Pos{})}, pos: o.Pos})
	}
	return r
}

// keepSettings gives out's seats and modules the settings m's of the same name carry: they were
// resolved when the description was read, and nothing changed in memory refers to them. One
// added in memory, its settings left zero, has the mesh's.
func keepSettings(m, out *Mesh) {
	seats := make(map[string]*Seat, len(m.Seats))
	for i := range m.Seats {
		seats[m.Seats[i].Name] = &m.Seats[i]
	}
	for i := range out.Seats {
		out.Seats[i].Stream, out.Seats[i].Consumer = m.Bus.Streams.Seats, m.Bus.ConsumerDefaults
		if s, ok := seats[out.Seats[i].Name]; ok && s.Stream.Storage != "" {
			out.Seats[i].Stream, out.Seats[i].Consumer = s.Stream, s.Consumer
		}
	}
	modules := make(map[string]*Module, len(m.Modules))
	for i := range m.Modules {
		modules[m.Modules[i].Name] = &m.Modules[i]
	}
	for i := range out.Modules {
		out.Modules[i].Consumer = m.Bus.ConsumerDefaults
		if mod, ok := modules[out.Modules[i].Name]; ok && mod.Consumer.AckWait != 0 {
			out.Modules[i].Consumer = mod.Consumer
		}
	}
}
