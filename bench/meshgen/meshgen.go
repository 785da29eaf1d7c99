// Package meshgen writes realistic mesh descriptions of any size, for benchmarks and scale
// tests: the same YAML an operator would keep in git, split over files the way a large
// description is, deterministic for a given Mesh so two runs measure the same thing.
//
// The shape, scaled with the number of module instances:
//   - two fleet modules (an agent and a metrics shipper) run on every node;
//   - the remaining instances are application modules on one to three nodes each, spread
//     evenly over the nodes;
//   - every module emits one to three events, a third serve a tool, and all but one in
//     twenty-five follow one to three events of modules declared before them or of seats
//     (so almost every instance has its own consumer, as on a real bus);
//   - a quarter send work to a seat, a fifth call another module's tool;
//   - nine seats in ten are claimed by an application module, a third of those by a
//     standby too, and one in twenty is handed to its standby by an explicit holder; one
//     in fifty was renamed and lists its former name;
//   - the controller follows and sends to a few seats.
package meshgen

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/meshbus/meshctl/model"
)

// Mesh is what to generate.
type Mesh struct {
	Nodes     int
	Instances int // module instances: (node, module) pairs
	Seats     int
	// Touched application modules, each on one node, follow one event more than in the base
	// mesh (the agent's node.drained, which nothing else follows): the smallest edit that
	// changes a consumer and a user, and nothing else.
	Touched int
	// Listen is bus.listen; empty leaves the embedded bus's default. Tests use
	// "127.0.0.1:-1" for a free port.
	Listen string
	// Server, when its URL is set, is the external nats-server the bus section names instead
	// of an embedded bus: meshctl then writes the accounts config the server includes, reloads
	// the server by its pid file, and keeps its state store on that bus.
	Server Server
	// Auth is bus.auth, the kind of credential every principal has: "password", "nkey" or
	// "jwt" (with Operator); empty leaves the default.
	Auth string
	// Operator, when its Servers are set, is an external cluster in operator mode that the bus
	// section names instead of an embedded bus (bus.servers and bus.operator): the mesh is one
	// account of the operator, its JWT pushed to the servers' resolvers.
	Operator Operator
}

// Operator is an operator-mode cluster and the operator's store as a bus section names them.
type Operator struct {
	Servers     []string // bus.servers' URLs
	Store       string   // bus.operator.store: the root holding stores/ and keys/
	Account     string   // bus.operator.account: the mesh's account, made by the admin
	SystemCreds string   // bus.operator.system_creds: a system-account user's creds
}

// Server is an external nats-server as a bus section names it.
type Server struct {
	URL          string // bus.url, tls://host:port
	Fingerprint  string // bus.fingerprint: the hex SHA-256 of its certificate
	AccountsFile string // bus.accounts_file: the file the server's config includes
	PIDFile      string // bus.reload.pid_file: the server's pid, to reload it by SIGHUP
}

// Sizes are the numbers of module instances the benchmarks measure: a tenth of the
// reference mesh, the reference mesh, and four times it.
var Sizes = []int{500, 5000, 20000}

// Scaled is a mesh of n module instances in the proportions of the reference mesh
// (1,000 nodes, 5,000 instances, 200 seats): five instances per node, a seat per 25.
func Scaled(instances int) Mesh {
	return Mesh{Nodes: max(instances/5, 1), Instances: instances, Seats: max(instances/25, 1)}
}

// String names the mesh in benchmark names: `instances=5000`.
func (m Mesh) String() string { return fmt.Sprintf("instances=%d", m.Instances) }

// modulesPerFile bounds a modules file: large descriptions are split so reviews and merges
// stay readable, and loading many files is part of what is measured.
const modulesPerFile = 250

// fleet modules run on every node.
var fleet = []string{"agent", "metrics"}

// touchEvent is the event touched modules follow in addition.
const touchEvent = "node.drained"

type module struct {
	name    string
	on      []string
	claims  []string
	emits   []string
	serves  []string
	follows []string
	sends   []string
	calls   []string
}

type seat struct {
	name     string
	scope    string
	formerly string
	accepts  []string
	emits    []string
	serves   []string
}

type holder struct{ seat, node, module string }

// Files generates the description as files, named as Load would name them.
func (m Mesh) Files() []model.File {
	if m.Nodes < 1 || m.Instances < 1 || m.Seats < 0 {
		panic(fmt.Sprintf("meshgen: a mesh needs a node and an instance: %+v", m))
	}
	rng := rand.New(rand.NewPCG(uint64(m.Nodes), uint64(m.Instances)<<20|uint64(m.Seats)))
	nodes := nodeNames(m.Nodes)
	seats := seatList(m.Seats)
	mods, perFleet := m.placeModules(rng, nodes)
	wireReferences(rng, mods, seats)
	apps := mods[len(mods)-countApps(mods):]
	holders := claimSeats(apps, seats)
	m.touch(apps, perFleet)
	return m.files(nodes, seats, holders, mods)
}

// nodeNames is the names of n nodes, node-00001 on.
func nodeNames(n int) []string {
	nodes := make([]string, n)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("node-%05d", i+1)
	}
	return nodes
}

// seatList is n seats: one in ten mesh-scoped, a third also taking cancellations and serving
// a status tool, one in fifty renamed.
func seatList(n int) []seat {
	seats := make([]seat, n)
	for i := range seats {
		s := seat{name: fmt.Sprintf("seat-%04d", i+1), scope: model.ScopeModule,
			accepts: []string{"job"}, emits: []string{"done", "failed"}}
		if i%10 == 9 {
			s.scope = model.ScopeMesh
		}
		if i%3 == 0 {
			s.accepts = append(s.accepts, "job.cancel")
			s.serves = []string{"status"}
		}
		if i%50 == 49 {
			s.formerly = fmt.Sprintf("old-seat-%04d", i+1)
		}
		seats[i] = s
	}
	return seats
}

// placeModules declares the fleet modules, then application modules on one to three nodes
// each until m.Instances are placed, and returns them with the instances per fleet module.
func (m Mesh) placeModules(rng *rand.Rand, nodes []string) ([]module, int) {
	// Fleet modules first: they run everywhere, so they take two instances per node when
	// the mesh has that many; the rest are application modules.
	var mods []module
	perFleet := 0
	if m.Instances >= 4*m.Nodes {
		perFleet = m.Nodes
	}
	for i, name := range fleet {
		if perFleet == 0 {
			break
		}
		mod := module{name: name, on: nodes, emits: []string{"heartbeat.missed", "disk.full"}}
		if i == 0 {
			mod.emits = append(mod.emits, touchEvent)
			mod.serves = []string{"status"}
		}
		mods = append(mods, mod)
	}
	left := m.Instances - perFleet*len(mods)
	cursor := 0
	for i := 0; left > 0; i++ {
		k := min([]int{1, 1, 1, 2, 3}[i%5], left, m.Nodes)
		mod := module{name: fmt.Sprintf("app-%05d", i+1)}
		for j := range k {
			mod.on = append(mod.on, nodes[(cursor+j)%m.Nodes])
		}
		cursor = (cursor + k) % m.Nodes
		left -= k
		mod.emits = pick(rng, []string{"item.created", "item.updated", "item.deleted", "state.changed"}, 1+rng.IntN(3))
		if rng.IntN(3) == 0 {
			mod.serves = []string{"status"}
		}
		mods = append(mods, mod)
	}
	return mods, perFleet
}

// wireReferences has every module follow, send to and call what was declared before it.
// References only point backwards (to modules declared earlier) or at seats, as a mesh
// grown over time does; the fleet modules follow what the seats report.
func wireReferences(rng *rand.Rand, mods []module, seats []seat) {
	var servers []int // modules serving a tool
	for i := range mods {
		mod := &mods[i]
		if i > 0 && len(mods[i-1].serves) > 0 {
			servers = append(servers, i-1)
		}
		n := 1 + rng.IntN(3)
		if i >= len(fleet) && i%25 == 24 {
			n = 0 // a source: emits, follows nothing, has no consumer
		}
		mod.follows = followRefs(rng, mods[:i], seats, n)
		if len(seats) > 0 && i%4 == 3 {
			s := seats[rng.IntN(len(seats))]
			mod.sends = []string{s.name + "/" + s.accepts[rng.IntN(len(s.accepts))]}
		}
		if len(servers) > 0 && i%5 == 4 {
			mod.calls = []string{mods[servers[rng.IntN(len(servers))]].name + "/status"}
		}
	}
}

// followRefs draws up to n distinct events for a module to follow: a seat's report one time
// in five (always for the first module), otherwise an event of a module in before.
func followRefs(rng *rand.Rand, before []module, seats []seat, n int) []string {
	var follows []string
	seen := map[string]bool{}
	for range n {
		var ref string
		if len(before) == 0 || len(seats) > 0 && rng.IntN(5) == 0 {
			if len(seats) == 0 {
				break
			}
			s := seats[rng.IntN(len(seats))]
			ref = "seat:" + s.name + "/" + s.emits[rng.IntN(len(s.emits))]
		} else {
			from := before[rng.IntN(len(before))]
			events := followable(from)
			ref = from.name + "/" + events[rng.IntN(len(events))]
		}
		if !seen[ref] {
			seen[ref] = true
			follows = append(follows, ref)
		}
	}
	return follows
}

// claimSeats has application modules, spread over the list, claim the seats, a standby for
// every third seat, and returns the explicit holders of one seat in twenty.
func claimSeats(apps []module, seats []seat) []holder {
	var holders []holder
	for i, s := range seats {
		if i%10 == 7 || len(apps) == 0 {
			continue // unclaimed: its work queues until somebody takes the role
		}
		primary := &apps[(i*7919)%len(apps)]
		primary.claims = append(primary.claims, s.name)
		if i%3 == 0 && len(apps) > 1 {
			standby := &apps[(i*7919+len(apps)/2)%len(apps)]
			if standby.name == primary.name || contains(standby.claims, s.name) {
				continue
			}
			// An old name in a claim still resolves: the rename is not finished everywhere.
			claim := s.name
			if s.formerly != "" {
				claim = s.formerly
			}
			standby.claims = append(standby.claims, claim)
			if i%20 == 0 {
				holders = append(holders, holder{seat: s.name, node: standby.on[0], module: standby.name})
			}
		}
	}
	return holders
}

// touch has m.Touched single-node application modules that already follow something follow
// the touch event too, evenly spread over the list so the changed consumers are not all in
// one page.
func (m Mesh) touch(apps []module, perFleet int) {
	if m.Touched <= 0 {
		return
	}
	var single []int
	for i := range apps {
		if len(apps[i].on) == 1 && len(apps[i].follows) > 0 {
			single = append(single, i)
		}
	}
	if m.Touched > len(single) || perFleet == 0 {
		panic(fmt.Sprintf("meshgen: cannot touch %d modules of %+v", m.Touched, m))
	}
	for t := range m.Touched {
		a := &apps[single[t*len(single)/m.Touched]]
		a.follows = append(a.follows, fleet[0]+"/"+touchEvent)
	}
}

// files renders the description: the bus and controller, the nodes, the seats, the holders
// if any, and the modules split into files of modulesPerFile.
func (m Mesh) files(nodes []string, seats []seat, holders []holder, mods []module) []model.File {
	files := []model.File{
		{Name: "mesh.yaml", Data: m.meshFile(seats)},
		{Name: "nodes.yaml", Data: nodesFile(nodes)},
		{Name: "seats.yaml", Data: seatsFile(seats)},
	}
	if len(holders) > 0 {
		files = append(files, model.File{Name: "holders.yaml", Data: holdersFile(holders)})
	}
	for i := 0; i < len(mods); i += modulesPerFile {
		files = append(files, model.File{
			Name: fmt.Sprintf("modules/%03d.yaml", i/modulesPerFile+1),
			Data: modulesFile(mods[i:min(i+modulesPerFile, len(mods))]),
		})
	}
	return files
}

// Write writes the description under dir, creating it.
func (m Mesh) Write(dir string) error {
	for _, f := range m.Files() {
		path := filepath.Join(dir, filepath.FromSlash(f.Name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, f.Data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func countApps(mods []module) int {
	n := 0
	for _, m := range mods {
		if !contains(fleet, m.name) {
			n++
		}
	}
	return n
}

func contains(list []string, s string) bool { return slices.Contains(list, s) }

// pick returns n distinct entries of from, in from's order.
func pick(rng *rand.Rand, from []string, n int) []string {
	idx := rng.Perm(len(from))[:min(n, len(from))]
	slices.Sort(idx)
	out := make([]string, len(idx))
	for i, x := range idx {
		out[i] = from[x]
	}
	return out
}

// followable is what the base mesh may follow of a module: everything it emits but the
// event kept for touched modules.
func followable(m module) []string {
	return slices.DeleteFunc(slices.Clone(m.emits), func(e string) bool { return e == touchEvent })
}

func (m Mesh) meshFile(seats []seat) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# A generated mesh of %d nodes, %d module instances and %d seats (bench/meshgen).\n", m.Nodes, m.Instances, m.Seats)
	b.WriteString("bus:\n")
	// Every stream's settings, as a production mesh writes them, and small enough that the
	// seats' queues of a 20,000-instance mesh (800 of them) fit a test machine's disk: the
	// server reserves each stream's max_bytes against its store.
	b.WriteString(jetstreamSettings)
	if m.Auth != "" {
		fmt.Fprintf(&b, "  auth: %s\n", m.Auth)
	}
	if m.Listen != "" {
		fmt.Fprintf(&b, "  listen: %q\n", m.Listen)
	}
	if x := m.Server; x.URL != "" {
		fmt.Fprintf(&b, "  url: %q\n  fingerprint: %q\n  accounts_file: %q\n  reload: { pid_file: %q }\n", x.URL, x.Fingerprint, x.AccountsFile, x.PIDFile)
	}
	if o := m.Operator; len(o.Servers) > 0 {
		b.WriteString("  servers:\n")
		for _, u := range o.Servers {
			fmt.Fprintf(&b, "    - url: %q\n", u)
		}
		fmt.Fprintf(&b, "  operator:\n    store: %q\n    account: %q\n    system_creds: %q\n", o.Store, o.Account, o.SystemCreds)
	}
	var follows, sends []string
	for _, s := range seats[:min(5, len(seats))] {
		follows = append(follows, "seat:"+s.name+"/done")
		sends = append(sends, s.name+"/job")
	}
	if len(seats) == 0 {
		return []byte(b.String())
	}
	b.WriteString("controller:\n")
	list(&b, "  ", "follows", follows)
	list(&b, "  ", "sends", sends)
	return []byte(b.String())
}

func nodesFile(nodes []string) []byte {
	var b strings.Builder
	b.WriteString("nodes:\n")
	for _, n := range nodes {
		fmt.Fprintf(&b, "  - name: %s\n", n)
	}
	return []byte(b.String())
}

// jetstreamSettings is the generated mesh's bus.jetstream: every stream bounded, its seats'
// queues small, and its hosts' consumers redelivering on a backoff.
const jetstreamSettings = `  jetstream:
    streams:
      events: { max_bytes: 2GiB, max_age: 72h }
      control: { max_bytes: 128MiB }
      nodes: { max_bytes: 256MiB }
      seats: { max_bytes: 4MiB }
    consumers: { ack_wait: 1m, max_ack_pending: 2000 }
`

// seatSettings is what one seat in ten says of its own queue and worker.
const seatSettings = "    stream: { max_bytes: 16MiB, max_age: 24h }\n    consumer: { backoff: [10s, 1m, 5m], max_deliver: 10 }\n"

func seatsFile(seats []seat) []byte {
	var b strings.Builder
	b.WriteString("seats:\n")
	for i, s := range seats {
		fmt.Fprintf(&b, "  - name: %s\n", s.name)
		if s.scope != model.ScopeModule {
			fmt.Fprintf(&b, "    scope: %s\n", s.scope)
		}
		list(&b, "    ", "accepts", s.accepts)
		list(&b, "    ", "emits", s.emits)
		list(&b, "    ", "serves", s.serves)
		if s.formerly != "" {
			list(&b, "    ", "formerly", []string{s.formerly})
		}
		if i%10 == 4 {
			b.WriteString(seatSettings)
		}
	}
	return []byte(b.String())
}

func holdersFile(hs []holder) []byte {
	var b strings.Builder
	b.WriteString("# Explicit handovers: these standbys hold their seats.\nholders:\n")
	for _, h := range hs {
		fmt.Fprintf(&b, "  - seat: %s\n    node: %s\n    module: %s\n", h.seat, h.node, h.module)
	}
	return []byte(b.String())
}

func modulesFile(mods []module) []byte {
	var b strings.Builder
	b.WriteString("modules:\n")
	for i, m := range mods {
		fmt.Fprintf(&b, "  - name: %s\n", m.name)
		list(&b, "    ", "on", m.on)
		list(&b, "    ", "claims", m.claims)
		list(&b, "    ", "emits", m.emits)
		list(&b, "    ", "serves", m.serves)
		list(&b, "    ", "follows", m.follows)
		list(&b, "    ", "sends", m.sends)
		list(&b, "    ", "calls", m.calls)
		if i%50 == 49 {
			b.WriteString("    consumer: { ack_wait: 2m }\n") // one module in fifty waits longer for its acks
		}
	}
	return []byte(b.String())
}

// list writes a key and its list: inline when short, one entry a line when long (a fleet
// module's nodes), as a person would.
func list(b *strings.Builder, indent, key string, items []string) {
	if len(items) == 0 {
		return
	}
	if len(items) <= 6 {
		fmt.Fprintf(b, "%s%s: [%s]\n", indent, key, strings.Join(items, ", "))
		return
	}
	fmt.Fprintf(b, "%s%s:\n", indent, key)
	for _, it := range items {
		fmt.Fprintf(b, "%s  - %s\n", indent, it)
	}
}
