package model

import (
	"context"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/meshbus/meshctl/internal/printable"
)

// The raw declarations, as read, with a position on every value an error may point at.
type name struct {
	val string
	pos Pos
}

type rawMesh struct {
	bus        *rawBus
	controller *rawController
	nodes      []rawNode
	seats      []rawSeat
	modules    []rawModule
	holders    []rawHolder
	observers  []rawObserver
	// nodesKey is where a `nodes:` key was written (the last one read), and firstFile the
	// first file of the description: where an error about a mesh without nodes points.
	nodesKey  Pos
	firstFile string
}

type rawBus struct {
	url, accountsFile, listen, eventsMaxAge, consumers, auth name
	caFile, certFile, keyFile                                name
	fingerprints                                             []name
	replicas                                                 int
	replicasPos                                              Pos
	allowPlaintext                                           bool
	allowPlaintextPos                                        Pos
	allowPlaintextURL                                        bool
	allowPlaintextURLPos                                     Pos
	reload                                                   *rawReload
	jetstream                                                *rawJetStream
	servers                                                  []rawServer
	accounts                                                 name
	systemUser                                               *rawSystemUser
	operator                                                 *rawOperator
	serversPos                                               Pos
	pos                                                      Pos
}

type rawReload struct {
	pidFile name
	command []string
	manual  bool
	system  bool
	pos     Pos
}

type rawController struct {
	follows, sends, calls []name
	pos                   Pos
}

type rawNode struct {
	name name
	pos  Pos
}

type rawObserver struct {
	name name
	pos  Pos
}

type rawSeat struct {
	name, scope                      name
	accepts, emits, serves, formerly []name
	stream                           *streamDecl
	consumer                         *consumerDecl
	pos                              Pos
}

type rawModule struct {
	name                                             name
	on, claims, emits, serves, follows, sends, calls []name
	consumer                                         *consumerDecl
	pos                                              Pos
}

type rawHolder struct {
	seat, node, module name
	pos                Pos
}

// MaxNameLen bounds node, module and seat names: they are joined into user, consumer and
// stream names, and an operator reading a permission list should not need to scroll.
const MaxNameLen = 32

var (
	nameRule = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	// A subject path: tokens joined by dots, no wildcards (`*`, `>`), no whitespace, no
	// empty token. Tokens keep to letters, digits, `-` and `_` so every derived subject
	// reads the same in a config file, a log line and a shell.
	subjectPath = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)
)

// maxSubjectPathLen bounds an event, tool or accept name.
const maxSubjectPathLen = 128

// ReservedNodeNames cannot name nodes: users `node.<n>`, `enrol.<n>` and `observer.<n>` would
// collide with the user `<n>.<m>` of a module on a node so named, and `controller` is the
// controller's own user and consumer.
var ReservedNodeNames = []string{"controller", "enrol", "node", "observer"}

// DefaultListen is where the embedded bus listens unless bus.listen says otherwise.
const DefaultListen = "127.0.0.1:4222"

func checkName(diags *diagnostics, n name, what string) bool {
	switch {
	case n.val == "" && n.pos == (Pos{}):
		return false // missing or not a string: already reported where it was read
	case n.val == "":
		diags.add(n.pos, "%s name must not be empty", what)
	case len(n.val) > MaxNameLen:
		diags.add(n.pos, "%s name %s is %d characters; at most %d", what, printable.Quote(n.val), len(n.val), MaxNameLen)
	case !nameRule.MatchString(n.val):
		hint := ""
		if strings.ContainsAny(n.val, "_.") {
			hint = ": `_` and `.` join names into consumer and user names, so they would make two different things collide"
		}
		diags.add(n.pos, "%s name %s must be lowercase letters, digits and `-`, starting with a letter%s", what, printable.Quote(n.val), hint)
	default:
		return true
	}
	return false
}

func checkSubjectPath(diags *diagnostics, n name, what string) bool {
	if len(n.val) > maxSubjectPathLen {
		diags.add(n.pos, "%s %s is longer than %d characters", what, printable.Quote(n.val), maxSubjectPathLen)
		return false
	}
	if !subjectPath.MatchString(n.val) {
		diags.add(n.pos, "%s %s must be subject tokens joined by dots (letters, digits, `-`, `_`), never a wildcard, a space or an empty token", what, printable.Quote(n.val))
		return false
	}
	return true
}

// uniquePaths checks a list of event, tool or accept names and returns them in order.
func uniquePaths(diags *diagnostics, list []name, what, owner string) []string {
	seen := map[string]Pos{}
	var out []string
	for _, n := range list {
		if !checkSubjectPath(diags, n, what) {
			continue
		}
		if p, dup := seen[n.val]; dup {
			diags.add(n.pos, "%s %s of %s is listed twice: first at %s", what, printable.Quote(n.val), owner, p)
			continue
		}
		seen[n.val] = n.pos
		out = append(out, n.val)
	}
	return out
}

// index is what validation looks names up in.
type index struct {
	nodes     map[string]Pos
	nodeNames []string
	seats     map[string]*rawSeat
	seatNames []string
	formerly  map[string]string // former name -> current
	modules   map[string]*rawModule
	modNames  []string
	// events and tools by owner, as sets.
	modEvents, modTools, seatEvents, seatTools, seatAccepts map[string]map[string]bool
	// second declarations of a name, reported and set aside
	dupSeats   []*rawSeat
	dupModules map[string][]*rawModule
}

// nodeList, seatList and moduleList are the names "did you mean" picks from, in
// declaration order (the first of two equally close wins).
func (ix *index) nodeList() []string   { return ix.nodeNames }
func (ix *index) seatList() []string   { return ix.seatNames }
func (ix *index) moduleList() []string { return ix.modNames }

func set(list []string) map[string]bool {
	s := make(map[string]bool, len(list))
	for _, x := range list {
		s[x] = true
	}
	return s
}

// validate checks the raw declarations and builds the mesh, returning ctx.Err() as soon as
// ctx ends: a large description is checked name by name, and an interrupted command should
// not wait for the last one.
func (r *rawMesh) validate(ctx context.Context, diags *diagnostics) (*Mesh, error) {
	m := &Mesh{}
	ix := newIndex()
	m.Bus = r.validateBus(diags)
	var err error
	if m.Nodes, err = r.validateNodes(ctx, diags, ix); err != nil {
		return nil, err
	}
	// Seats first, with their former names, so every reference below can resolve.
	if m.Seats, err = r.validateSeats(ctx, diags, ix); err != nil {
		return nil, err
	}
	// Modules: names and what they offer, before anyone's references to them.
	if m.Modules, err = r.validateModules(ctx, diags, ix); err != nil {
		return nil, err
	}
	if r.controller != nil {
		m.Controller = ix.controller(diags, r.controller)
	}
	if m.Holders, m.Holding, err = r.resolveHolders(ctx, diags, ix, m); err != nil {
		return nil, err
	}
	if m.Observers, err = r.validateObservers(ctx, diags); err != nil {
		return nil, err
	}
	r.resolveSettings(diags, ix, m)
	r.requireNodes(diags)
	return m, nil
}

// validateObservers checks the observers' names, each once. An observer's user is
// `observer.<name>`, a namespace of its own: no node may be named observer, so no module
// user shares it, and an observer's name may be any a node's could be.
func (r *rawMesh) validateObservers(ctx context.Context, diags *diagnostics) ([]Observer, error) {
	var observers []Observer
	seen := map[string]Pos{}
	for _, o := range r.observers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !checkName(diags, o.name, "observer") {
			continue
		}
		if p, dup := seen[o.name.val]; dup {
			diags.add(o.name.pos, "observer %s is declared twice: first at %s", printable.Quote(o.name.val), p)
			continue
		}
		seen[o.name.val] = o.name.pos
		observers = append(observers, Observer{Name: o.name.val, Pos: o.pos})
	}
	return observers, nil
}

// newIndex is an index with nothing in it yet.
func newIndex() *index {
	return &index{
		nodes: map[string]Pos{}, seats: map[string]*rawSeat{}, formerly: map[string]string{},
		modules: map[string]*rawModule{}, modEvents: map[string]map[string]bool{},
		modTools: map[string]map[string]bool{}, seatEvents: map[string]map[string]bool{},
		seatTools: map[string]map[string]bool{}, seatAccepts: map[string]map[string]bool{},
		dupModules: map[string][]*rawModule{},
	}
}

// validateNodes checks the node names and indexes the valid ones, each once.
func (r *rawMesh) validateNodes(ctx context.Context, diags *diagnostics, ix *index) ([]Node, error) {
	var nodes []Node
	for _, n := range r.nodes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !checkName(diags, n.name, "node") {
			continue
		}
		if slices.Contains(ReservedNodeNames, n.name.val) {
			diags.add(n.name.pos, "node name %s is reserved: the users `node.<n>`, `enrol.<n>` and `observer.<n>` would collide with a module user `<n>.<m>`, and `controller` is the controller's own", printable.Quote(n.name.val))
			continue
		}
		if p, dup := ix.nodes[n.name.val]; dup {
			diags.add(n.name.pos, "node %s is declared twice: first at %s", printable.Quote(n.name.val), p)
			continue
		}
		ix.nodes[n.name.val] = n.name.pos
		ix.nodeNames = append(ix.nodeNames, n.name.val)
		nodes = append(nodes, Node{Name: n.name.val, Pos: n.pos})
	}
	return nodes, nil
}

// validateSeats checks the seats: their names, then their former names, then what each
// accepts, emits and serves; and indexes them, duplicates merged.
func (r *rawMesh) validateSeats(ctx context.Context, diags *diagnostics, ix *index) ([]Seat, error) {
	if err := r.indexSeats(ctx, diags, ix); err != nil {
		return nil, err
	}
	r.indexFormerNames(diags, ix)
	var seats []Seat
	for i := range r.seats {
		s := &r.seats[i]
		if ix.seats[s.name.val] != s {
			continue
		}
		seats = append(seats, ix.validateSeat(diags, s))
	}
	ix.mergeDuplicateSeats()
	return seats, nil
}

// indexSeats checks the seat names and indexes each seat by its name, setting a second
// declaration of one aside.
func (r *rawMesh) indexSeats(ctx context.Context, diags *diagnostics, ix *index) error {
	for i := range r.seats {
		if err := ctx.Err(); err != nil {
			return err
		}
		s := &r.seats[i]
		if !checkName(diags, s.name, "seat") {
			continue
		}
		if prev, dup := ix.seats[s.name.val]; dup {
			diags.add(s.name.pos, "seat %s is declared twice: first at %s", printable.Quote(s.name.val), prev.name.pos)
			ix.dupSeats = append(ix.dupSeats, s)
			continue
		}
		ix.seats[s.name.val] = s
		ix.seatNames = append(ix.seatNames, s.name.val)
	}
	return nil
}

// indexFormerNames checks the former names of the indexed seats and indexes each one that
// names no current seat and no other seat's past.
func (r *rawMesh) indexFormerNames(diags *diagnostics, ix *index) {
	for i := range r.seats {
		s := &r.seats[i]
		if ix.seats[s.name.val] != s {
			continue // invalid or a duplicate, already reported
		}
		for _, old := range s.formerly {
			if !checkName(diags, old, "former seat") {
				continue
			}
			if _, current := ix.seats[old.val]; current {
				diags.add(old.pos, "seat %s lists %s as a former name, but a seat of that name is declared: one name cannot mean two seats", printable.Quote(s.name.val), printable.Quote(old.val))
				continue
			}
			if other, dup := ix.formerly[old.val]; dup && other != s.name.val {
				diags.add(old.pos, "former name %s is claimed by both seat %s and seat %s", printable.Quote(old.val), printable.Quote(other), printable.Quote(s.name.val))
				continue
			}
			ix.formerly[old.val] = s.name.val
		}
	}
}

// validateSeat checks an indexed seat's scope and what it accepts, emits and serves, and
// indexes those for the references to the seat.
func (ix *index) validateSeat(diags *diagnostics, s *rawSeat) Seat {
	seat := Seat{Name: s.name.val, Scope: ScopeModule, Pos: s.pos}
	if s.scope.val != "" {
		if s.scope.val != ScopeModule && s.scope.val != ScopeMesh {
			diags.add(s.scope.pos, "seat scope %s must be %s or %s", printable.Quote(s.scope.val), printable.Quote(ScopeModule), printable.Quote(ScopeMesh))
		} else {
			seat.Scope = s.scope.val
		}
	}
	owner := "seat " + s.name.val
	seat.Accepts = uniquePaths(diags, s.accepts, "accept", owner)
	seat.Emits = uniquePaths(diags, s.emits, "event", owner)
	seat.Serves = uniquePaths(diags, s.serves, "tool", owner)
	for _, old := range s.formerly {
		if ix.formerly[old.val] == s.name.val && !slices.Contains(seat.Formerly, old.val) {
			seat.Formerly = append(seat.Formerly, old.val)
		}
	}
	ix.seatAccepts[seat.Name] = set(seat.Accepts)
	ix.seatEvents[seat.Name] = set(seat.Emits)
	ix.seatTools[seat.Name] = set(seat.Serves)
	return seat
}

// validateModules checks the modules: first their names and what they offer, indexed with
// duplicates merged, then each one's nodes, claims and references.
func (r *rawMesh) validateModules(ctx context.Context, diags *diagnostics, ix *index) ([]Module, error) {
	for i := range r.modules {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		mod := &r.modules[i]
		if !checkName(diags, mod.name, "module") {
			continue
		}
		if prev, dup := ix.modules[mod.name.val]; dup {
			diags.add(mod.name.pos, "module %s is declared twice: first at %s", printable.Quote(mod.name.val), prev.name.pos)
			ix.dupModules[mod.name.val] = append(ix.dupModules[mod.name.val], mod)
			continue
		}
		ix.modules[mod.name.val] = mod
		ix.modNames = append(ix.modNames, mod.name.val)
		owner := "module " + mod.name.val
		ix.modEvents[mod.name.val] = set(uniquePaths(diags, mod.emits, "event", owner))
		ix.modTools[mod.name.val] = set(uniquePaths(diags, mod.serves, "tool", owner))
	}
	ix.mergeDuplicateModules()
	var modules []Module
	for i := range r.modules {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		mod := &r.modules[i]
		if ix.modules[mod.name.val] != mod {
			continue
		}
		modules = append(modules, r.validateModule(diags, ix, mod))
	}
	return modules, nil
}

// controller checks what the controller follows, sends and calls.
func (ix *index) controller(diags *diagnostics, c *rawController) Controller {
	out := Controller{Pos: c.pos}
	out.Follows = ix.follows(diags, c.follows, "the controller")
	out.Sends = ix.sends(diags, c.sends, "the controller")
	out.Calls = ix.calls(diags, c.calls, "the controller")
	return out
}

// requireNodes refuses a description without nodes.
func (r *rawMesh) requireNodes(diags *diagnostics) {
	if len(r.nodes) == 0 && len(*diags) == 0 {
		// A description with no nodes derives no principal but the controller, and an
		// apply of it would delete every user, consumer and seat stream of the mesh: an
		// emptied file or a wrong directory must not read as "the mesh is now empty". Said
		// only of a description read without other problems: a file that did not parse
		// may be the one that holds the nodes.
		at := r.nodesKey
		if at.File == "" {
			at = Pos{File: r.firstFile, Line: 1, Col: 1}
		}
		diags.add(at, "the description declares no nodes: a mesh needs at least one under `nodes:` (is this the right directory?)")
	}
}

func (r *rawMesh) validateModule(diags *diagnostics, ix *index, mod *rawModule) Module {
	owner := "module " + mod.name.val
	out := Module{Name: mod.name.val, Pos: mod.pos}
	seenNode := map[string]Pos{}
	for _, n := range mod.on {
		if _, ok := ix.nodes[n.val]; !ok {
			diags.addUnknown(n.pos, n.val, ix.nodeList, fmt.Sprintf("module %s runs on unknown node %s", printable.Quote(mod.name.val), printable.Quote(n.val)), "")
			continue
		}
		if p, dup := seenNode[n.val]; dup {
			diags.add(n.pos, "module %s lists node %s twice: first at %s", printable.Quote(mod.name.val), printable.Quote(n.val), p)
			continue
		}
		seenNode[n.val] = n.pos
		out.On = append(out.On, n.val)
	}
	seenSeat := map[string]Pos{}
	for _, c := range mod.claims {
		seat, ok := ix.seat(diags, c, owner)
		if !ok {
			continue
		}
		if p, dup := seenSeat[seat]; dup {
			diags.add(c.pos, "module %s claims seat %s twice: first at %s", printable.Quote(mod.name.val), printable.Quote(seat), p)
			continue
		}
		seenSeat[seat] = c.pos
		out.Claims = append(out.Claims, seat)
	}
	out.Emits = uniquePaths(&diagnostics{}, mod.emits, "event", owner) // reported once, above
	out.Serves = uniquePaths(&diagnostics{}, mod.serves, "tool", owner)
	out.Follows = ix.follows(diags, mod.follows, owner)
	out.Sends = ix.sends(diags, mod.sends, owner)
	out.Calls = ix.calls(diags, mod.calls, owner)
	return out
}

// seat resolves a seat reference, accepting a former name.
func (ix *index) seat(diags *diagnostics, n name, who string) (string, bool) {
	if !checkName(diags, n, "seat") {
		return "", false
	}
	if _, ok := ix.seats[n.val]; ok {
		return n.val, true
	}
	if current, ok := ix.formerly[n.val]; ok {
		return current, true
	}
	diags.addUnknown(n.pos, n.val, ix.seatList, fmt.Sprintf("%s names unknown seat %s", who, printable.Quote(n.val)), "")
	return "", false
}

// splitRef splits `owner/thing` or `seat:owner/thing`.
func splitRef(diags *diagnostics, n name, who, form string) (seat bool, owner, thing name, ok bool) {
	v := n.val
	if rest, found := strings.CutPrefix(v, "seat:"); found {
		seat, v = true, rest
	}
	o, t, found := strings.Cut(v, "/")
	if !found || o == "" || t == "" {
		diags.add(n.pos, "%s: %s must be written %s", who, printable.Quote(n.val), form)
		return false, name{}, name{}, false
	}
	return seat, name{val: o, pos: n.pos}, name{val: t, pos: n.pos}, true
}

// offered names what a reference reaches: a module's or a seat's events (followed) or
// tools (called).
type offered struct {
	verb, offer, form string // "follows", "emit", "`module/event` or `seat:seat/event`"
	what              string // "event" or "tool", for the subject-path rule
	byModule, bySeat  map[string]map[string]bool
	nobodyForModules  bool // say "nobody emits it" when a module does not
}

// resolve checks references of the form `module/name` or `seat:seat/name` against what
// modules and seats offer, and returns them resolved, in order, each once.
func (ix *index) resolve(diags *diagnostics, list []name, who string, o offered) []refTo {
	var out []refTo
	seen := map[string]Pos{}
	for _, n := range list {
		seat, owner, thing, ok := splitRef(diags, n, who, o.form)
		if !ok || !checkSubjectPath(diags, thing, o.what) {
			continue
		}
		ref := refTo{seat: seat, name: thing.val, pos: n.pos}
		if seat {
			s, ok := ix.seat(diags, owner, who)
			if !ok {
				continue
			}
			if !o.bySeat[s][thing.val] {
				diags.addUnknown(n.pos, thing.val, func() []string { return keys(o.bySeat[s]) },
					fmt.Sprintf("%s %s %s, but seat %s does not %s %s", who, o.verb, printable.Quote(n.val), printable.Quote(s), o.offer, printable.Quote(thing.val)), "")
				continue
			}
			ref.owner = s
		} else {
			if !checkName(diags, owner, "module") {
				continue
			}
			if _, known := ix.modules[owner.val]; !known {
				head := fmt.Sprintf("%s %s %s, but no module is named %s", who, o.verb, printable.Quote(n.val), printable.Quote(owner.val))
				if _, isSeat := ix.seats[owner.val]; isSeat {
					diags.add(n.pos, "%s (%s is a seat: write seat:%s)", head, printable.Quote(owner.val), plainText(n.val))
				} else {
					diags.addUnknown(n.pos, owner.val, ix.moduleList, head, "")
				}
				continue
			}
			if !o.byModule[owner.val][thing.val] {
				nobody := ""
				if o.nobodyForModules {
					nobody = "nobody " + o.offer + "s it: "
				}
				diags.addUnknown(n.pos, thing.val, func() []string { return keys(o.byModule[owner.val]) },
					fmt.Sprintf("%s %s %s, but %smodule %s does not %s %s", who, o.verb, printable.Quote(n.val), nobody, printable.Quote(owner.val), o.offer, printable.Quote(thing.val)), "")
				continue
			}
			ref.owner = owner.val
		}
		key := refString(ref.seat, ref.owner, ref.name)
		if p, dup := seen[key]; dup {
			diags.add(n.pos, "%s %s %s twice: first at %s", who, o.verb, printable.Quote(key), p)
			continue
		}
		seen[key] = n.pos
		out = append(out, ref)
	}
	return out
}

// refTo is a resolved reference to a module's or seat's event or tool.
type refTo struct {
	seat        bool
	owner, name string
	pos         Pos
}

func (ix *index) follows(diags *diagnostics, list []name, who string) []EventRef {
	refs := ix.resolve(diags, list, who, offered{verb: "follows", offer: "emit", what: "event",
		form: "`module/event` or `seat:seat/event`", byModule: ix.modEvents, bySeat: ix.seatEvents, nobodyForModules: true})
	out := make([]EventRef, len(refs))
	for i, r := range refs {
		out[i] = EventRef{Seat: r.seat, Owner: r.owner, Event: r.name, Pos: r.pos}
	}
	return out
}

func (ix *index) calls(diags *diagnostics, list []name, who string) []ToolRef {
	refs := ix.resolve(diags, list, who, offered{verb: "calls", offer: "serve", what: "tool",
		form: "`module/tool` or `seat:seat/tool`", byModule: ix.modTools, bySeat: ix.seatTools})
	out := make([]ToolRef, len(refs))
	for i, r := range refs {
		out[i] = ToolRef{Seat: r.seat, Owner: r.owner, Tool: r.name, Pos: r.pos}
	}
	return out
}

func (ix *index) sends(diags *diagnostics, list []name, who string) []AcceptRef {
	var out []AcceptRef
	seen := map[string]Pos{}
	for _, n := range list {
		isSeat, owner, acc, ok := splitRef(diags, n, who, "`seat/accept`")
		if !ok || !checkSubjectPath(diags, acc, "accept") {
			continue
		}
		_ = isSeat // `seat:` is redundant here and harmless: sends only ever go to seats
		s, ok := ix.seat(diags, owner, who)
		if !ok {
			continue
		}
		if !ix.seatAccepts[s][acc.val] {
			diags.addUnknown(n.pos, acc.val, func() []string { return keys(ix.seatAccepts[s]) },
				fmt.Sprintf("%s sends %s, but seat %s does not accept %s", who, printable.Quote(n.val), printable.Quote(s), printable.Quote(acc.val)), "")
			continue
		}
		ref := AcceptRef{Seat: s, Accept: acc.val, Pos: n.pos}
		if p, dup := seen[ref.String()]; dup {
			diags.add(n.pos, "%s sends %s twice: first at %s", who, printable.Quote(ref.String()), p)
			continue
		}
		seen[ref.String()] = n.pos
		out = append(out, ref)
	}
	return out
}

func keys(s map[string]bool) []string {
	out := make([]string, 0, len(s))
	for k := range s {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// resolveHolders checks the explicit handovers and decides who holds each seat: an explicit
// holder wins; otherwise the first module instance (modules in declaration order, each on
// its nodes in order) that claims the seat.
func (r *rawMesh) resolveHolders(ctx context.Context, diags *diagnostics, ix *index, m *Mesh) ([]HolderDecl, []Holding, error) {
	explicit := map[string]HolderDecl{}
	var decls []HolderDecl
	for _, h := range r.holders {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		who := "holder"
		seat, ok := ix.seat(diags, h.seat, who)
		nodeOK := checkName(diags, h.node, "node")
		modOK := checkName(diags, h.module, "module")
		if !ok || !nodeOK || !modOK {
			continue
		}
		if _, known := ix.nodes[h.node.val]; !known {
			diags.addUnknown(h.node.pos, h.node.val, ix.nodeList, fmt.Sprintf("holder of seat %s names unknown node %s", printable.Quote(seat), printable.Quote(h.node.val)), "")
			continue
		}
		if _, known := ix.modules[h.module.val]; !known {
			diags.addUnknown(h.module.pos, h.module.val, ix.moduleList, fmt.Sprintf("holder of seat %s names unknown module %s", printable.Quote(seat), printable.Quote(h.module.val)), "")
			continue
		}
		if !ix.runsOn(h.module.val, h.node.val) {
			diags.add(h.node.pos, "holder of seat %s: module %s does not run on node %s; add the node to its `on`, or name a node it runs on", printable.Quote(seat), printable.Quote(h.module.val), printable.Quote(h.node.val))
			continue
		}
		if !ix.claims(h.module.val, seat) {
			diags.add(h.module.pos, "holder of seat %s: module %s does not claim it; add %s to its `claims`", printable.Quote(seat), printable.Quote(h.module.val), printable.Quote(seat))
			continue
		}
		if prev, dup := explicit[seat]; dup {
			diags.add(h.pos, "seat %s has two holders: %s/%s here and %s/%s at %s; a seat has exactly one", printable.Quote(seat), h.node.val, h.module.val, prev.Node, prev.Module, prev.Pos)
			continue
		}
		d := HolderDecl{Seat: seat, Node: h.node.val, Module: h.module.val, Pos: h.pos}
		explicit[seat] = d
		decls = append(decls, d)
	}
	claimed := map[string]Instance{}
	for _, mod := range m.Modules {
		for _, seat := range mod.Claims {
			if _, taken := claimed[seat]; taken || len(mod.On) == 0 {
				continue
			}
			claimed[seat] = Instance{Node: mod.On[0], Module: mod.Name}
		}
	}
	var holding []Holding
	for _, s := range m.Seats {
		if d, ok := explicit[s.Name]; ok {
			holding = append(holding, Holding{Seat: s.Name, Holder: Instance{Node: d.Node, Module: d.Module}, Explicit: true})
		} else if inst, ok := claimed[s.Name]; ok {
			holding = append(holding, Holding{Seat: s.Name, Holder: inst})
		}
	}
	slices.SortFunc(holding, func(a, b Holding) int { return strings.Compare(a.Seat, b.Seat) })
	return decls, holding, nil
}

// validFingerprint reports whether fp (lower case, no colons) is a hex SHA-256.
func validFingerprint(fp string) bool {
	raw, err := hex.DecodeString(fp)
	return err == nil && len(raw) == 32
}

// validateBus checks the bus section and fills in the defaults of what it leaves out.
func (r *rawMesh) validateBus(diags *diagnostics) Bus {
	b := Bus{Replicas: 1, Consumers: ConsumersPull, Auth: AuthPassword}
	if r.bus == nil {
		b.Listen = DefaultListen
		validateJetStream(diags, nil, &b)
		return b
	}
	rb := r.bus
	b.Pos = rb.pos
	external := rb.url.val != "" || rb.serversPos != (Pos{})
	validateBusAddress(diags, rb, &b, external)
	if rb.serversPos != (Pos{}) {
		validateServers(diags, rb, &b)
	} else {
		validateOneServer(diags, rb, &b, external)
	}
	validateBusSettings(diags, rb, &b)
	validateSharedBus(diags, rb, &b, external)
	validateOperator(diags, rb, &b, external)
	if rb.serversPos != (Pos{}) && rb.replicasPos != (Pos{}) && b.Replicas > len(b.Servers) && len(b.Servers) > 0 {
		diags.add(rb.replicasPos, "bus.replicas is %d, but bus.servers names %d server(s): a stream cannot have more replicas than the cluster has servers",
			b.Replicas, len(b.Servers))
	}
	validateJetStream(diags, rb, &b)
	return b
}

// validateBusAddress reads into b where the bus is (bus.url, bus.fingerprint) or, for the
// embedded bus, where it listens (bus.listen, bus.allow_plaintext_listen).
func validateBusAddress(diags *diagnostics, rb *rawBus, b *Bus, external bool) {
	if rb.url.val != "" {
		b.URL = checkURL(diags, rb.url, "bus.url")
	}
	b.Fingerprint = pins(diags, rb.fingerprints, "bus.fingerprint must be the SHA-256 of the bus's leaf certificate: 64 hex digits (colons allowed)")
	validateBusTLS(diags, rb, b, external)
	b.Listen = DefaultListen
	if rb.listen.pos != (Pos{}) {
		if external {
			diags.add(rb.listen.pos, "bus.listen is for the embedded bus; with bus.url the server's own config says where it listens")
		} else if checkListen(diags, rb.listen, rb.allowPlaintext) {
			b.Listen = rb.listen.val
		}
	}
	if rb.allowPlaintextPos != (Pos{}) {
		if external {
			diags.add(rb.allowPlaintextPos, "bus.allow_plaintext_listen is for the embedded bus; with bus.url the server's own config decides about TLS, and bus.allow_plaintext says a nats:// URL off this host is trusted")
		}
		b.AllowPlaintextListen = rb.allowPlaintext
	}
	if rb.allowPlaintextURLPos != (Pos{}) {
		if !external {
			diags.add(rb.allowPlaintextURLPos, "bus.allow_plaintext is for an external bus's nats:// URLs; the embedded bus's is bus.allow_plaintext_listen, beside bus.listen")
		}
		b.AllowPlaintext = rb.allowPlaintextURL
	}
	if b.URL != "" && rb.serversPos == (Pos{}) {
		checkPlaintextURL(diags, rb.url.pos, b.URL, "bus.url", b.secured(b.Fingerprint, b.CAFile), b.AllowPlaintext)
	}
}

// pins normalises fingerprints (lower case, without colons) and returns them separated by
// spaces, the form a connection's target and a membership carry; each that is not a SHA-256
// is reported at its place with wrong.
func pins(diags *diagnostics, fingerprints []name, wrong string) string {
	var out []string
	for _, f := range fingerprints {
		fp := strings.ToLower(strings.ReplaceAll(strings.TrimSpace(f.val), ":", ""))
		if !validFingerprint(fp) {
			diags.add(f.pos, "%s", wrong)
			continue
		}
		if !slices.Contains(out, fp) {
			out = append(out, fp)
		}
	}
	return strings.Join(out, " ")
}

// validateBusTLS reads into b the CA that verifies an external bus and the client
// certificate presented to it. The embedded bus serves no TLS, so neither means anything
// there. The certificate's paths go into every membership, read on other hosts, so they
// must not depend on the directory meshctl runs in.
func validateBusTLS(diags *diagnostics, rb *rawBus, b *Bus, external bool) {
	for _, k := range []struct {
		n   name
		key string
	}{{rb.caFile, "ca_file"}, {rb.certFile, "cert_file"}, {rb.keyFile, "key_file"}} {
		if k.n.pos != (Pos{}) && !external {
			diags.add(k.n.pos, "bus.%s is for an external bus (bus.url or bus.servers): the embedded bus serves no TLS", k.key)
		}
	}
	if !external {
		return
	}
	b.CAFile = rb.caFile.val
	if given, other := rb.certFile.pos != (Pos{}), rb.keyFile.pos != (Pos{}); given != other {
		at := rb.certFile.pos
		if !given {
			at = rb.keyFile.pos
		}
		diags.add(at, "bus.cert_file and bus.key_file go together: a client certificate is presented with its key")
	}
	for _, k := range []struct {
		n   name
		key string
	}{{rb.certFile, "cert_file"}, {rb.keyFile, "key_file"}} {
		if k.n.pos != (Pos{}) && !filepath.IsAbs(k.n.val) {
			diags.add(k.n.pos, "bus.%s %s must be an absolute path: every membership names it, and a host reads it from a directory other than meshctl's", k.key, printable.Quote(k.n.val))
		}
	}
	b.CertFile, b.KeyFile = rb.certFile.val, rb.keyFile.val
}

// validateOneServer reads into b the accounts file and the reload of a bus without
// bus.servers: the embedded bus, or one external server.
func validateOneServer(diags *diagnostics, rb *rawBus, b *Bus, external bool) {
	if rb.accountsFile.val != "" {
		b.AccountsFile = rb.accountsFile.val
	} else if external && rb.auth.val != AuthJWT {
		diags.add(rb.pos, "bus.accounts_file is required with bus.url: it is the file meshctl writes the users to and the server includes")
	}
	if rb.reload != nil && !external {
		diags.add(rb.reload.pos, "bus.reload is for an external bus: meshctl reloads its embedded bus itself")
	}
	if external {
		b.Reload = rb.reload.value()
		// One server is a cluster of one: everything past the description reads Servers.
		b.Servers = []Server{{URL: b.URL, AccountsFile: b.AccountsFile, Reload: b.Reload, Fingerprint: b.Fingerprint, CAFile: b.CAFile, Pos: rb.pos}}
	} else if rb.reload != nil {
		b.Reload = rb.reload.value()
	}
}

// validateBusSettings reads into b what the streams and users are made with: bus.replicas,
// bus.consumers and bus.auth (the streams' and consumers' settings are validateJetStream's).
func validateBusSettings(diags *diagnostics, rb *rawBus, b *Bus) {
	if rb.replicasPos != (Pos{}) {
		if rb.replicas < 1 || rb.replicas > 5 {
			diags.add(rb.replicasPos, "bus.replicas must be between 1 and 5, not %d", rb.replicas)
		} else {
			b.Replicas = rb.replicas
		}
	}
	switch v := rb.consumers.val; v {
	case "":
	case ConsumersPull, ConsumersPush:
		b.Consumers = v
	default:
		diags.add(rb.consumers.pos, "bus.consumers must be pull or push, not %s", printable.Quote(v))
	}
	switch v := rb.auth.val; v {
	case "":
	case AuthPassword, AuthNkey, AuthJWT:
		b.Auth = v
	default:
		diags.add(rb.auth.pos, "bus.auth must be password, nkey or jwt, not %s", printable.Quote(v))
	}
}
