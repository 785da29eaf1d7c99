package render

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/model"
)

// Kind is what a principal is.
type Kind string

// The kinds of principal.
const (
	KindController Kind = "controller"
	KindNode       Kind = "node"
	KindEnrol      Kind = "enrol"
	KindModule     Kind = "module"
	// KindSystem is meshctl's user in the server's system account, there only when a server
	// of the bus is reloaded by request (bus reload: system).
	KindSystem Kind = "system"
)

// Grant is one subject a principal may publish or subscribe to, with the job that needs
// it. Queue, on a subscribe grant, limits the subscription to that queue group.
type Grant struct {
	Subject string `json:"subject"`
	Queue   string `json:"queue,omitempty"`
	Job     string `json:"job"`
}

// String is the grant as the accounts config writes it: a subscribe grant with a queue is
// `"<subject> <queue>"`.
func (g Grant) String() string {
	if g.Queue != "" {
		return g.Subject + " " + g.Queue
	}
	return g.Subject
}

// Principal is one user of the MESH account, or, for KindSystem, of the server's system
// account.
type Principal struct {
	User           string  `json:"user"`
	Kind           Kind    `json:"kind"`
	Node           string  `json:"node,omitempty"`
	Module         string  `json:"module,omitempty"`
	Publish        []Grant `json:"publish"`
	Subscribe      []Grant `json:"subscribe"`
	AllowResponses bool    `json:"allow_responses"`
	// Nkey is set for a host principal of a mesh whose hosts log in with nkeys (bus.auth:
	// nkey): its entry in the accounts config holds a public key, not a bcrypt hash.
	Nkey bool `json:"nkey,omitempty"`
}

// Consumer is a consumer and the stream it reads.
type Consumer struct {
	Stream string                   `json:"stream"`
	Config jetstream.ConsumerConfig `json:"config"`
}

// Name is the consumer's durable name.
func (c Consumer) Name() string { return c.Config.Durable }

// Desired is the bus a mesh derives: what should exist, nothing about what does.
type Desired struct {
	Principals []Principal              `json:"principals"`
	Streams    []jetstream.StreamConfig `json:"streams"`
	Consumers  []Consumer               `json:"consumers"`
	Holding    []model.Holding          `json:"holding"`
	// Graces are the seats' former holders that may still acknowledge the work they took
	// (AckGrace), each granted that alone.
	Graces []AckGrace `json:"graces,omitempty"`
	// Formerly maps a seat's former names to its current one, so a plan can say that a
	// work queue about to go is a renamed seat's.
	Formerly map[string]string `json:"formerly,omitempty"`
}

// Principal returns the principal of that user.
func (d *Desired) Principal(user string) (Principal, bool) {
	i, ok := slices.BinarySearchFunc(d.Principals, user, func(p Principal, u string) int { return strings.Compare(p.User, u) })
	if !ok {
		return Principal{}, false
	}
	return d.Principals[i], true
}

// Users lists every principal's user name, sorted.
func (d *Desired) Users() []string {
	out := make([]string, len(d.Principals))
	for i, p := range d.Principals {
		out[i] = p.User
	}
	return out
}

// Derive computes the desired bus of a validated mesh. It is deterministic: principals
// sorted by user, grants by subject, streams by name, consumers by stream and name.
func Derive(m *model.Mesh) *Desired { return DeriveWithGraces(m, nil) }

// DeriveWithGraces is Derive for a bus on which the former holders graces name may still
// acknowledge the work they took (AckGraces says which, when).
func DeriveWithGraces(m *model.Mesh, graces []AckGrace) *Desired {
	// The streams and consumers are derived beside the principals: neither needs the other,
	// and a large mesh's are each a tenth of a second or more of a plan's work.
	var d *Desired
	var objects sync.WaitGroup
	objects.Go(func() { d = DeriveObjects(m) })
	principals := DerivePrincipals(m, graces)
	objects.Wait()
	d.Principals, d.Graces = principals, graces
	return d
}

// DeriveObjects is Derive without the principals: the streams, consumers and holders of m.
func DeriveObjects(m *model.Mesh) *Desired {
	d := &Desired{Holding: m.Holding}
	for _, s := range m.Seats {
		for _, old := range s.Formerly {
			if d.Formerly == nil {
				d.Formerly = map[string]string{}
			}
			d.Formerly[old] = s.Name
		}
	}
	d.Streams, d.Consumers = streamsAndConsumers(m, modulesOf(m), m.Instances())
	return d
}

// DerivePrincipals is DeriveWithGraces's principals of m, sorted by user.
func DerivePrincipals(m *model.Mesh, graces []AckGrace) []Principal {
	src := newPrincipalSource(m, graces)
	principals := make([]Principal, 0, len(src.order))
	for _, r := range src.order {
		principals = append(principals, src.derive(r))
	}
	markNkeys(m, principals)
	return principals
}

func modulesOf(m *model.Mesh) map[string]*model.Module {
	modules := make(map[string]*model.Module, len(m.Modules))
	for i := range m.Modules {
		modules[m.Modules[i].Name] = &m.Modules[i]
	}
	return modules
}

// principalSource derives a mesh's principals one at a time, in the order of their users:
// what DerivePrincipals keeps, and what AccountsDigestOf writes and lets go.
type principalSource struct {
	m       *model.Mesh
	modules map[string]*model.Module
	holds   map[model.Instance][]model.Seat
	acks    map[model.Instance][]string // the seats whose work a former holder may still acknowledge
	shared  map[string]*moduleGrants    // each module's grants, made for its first instance
	pull    bool
	order   []principalRef // by user
}

// principalRef is a principal not yet derived.
type principalRef struct {
	user     string
	kind     Kind
	node     string         // of a node or enrolment identity
	inst     model.Instance // of a module instance
	observer string         // of an observer
}

func newPrincipalSource(m *model.Mesh, graces []AckGrace) *principalSource {
	seats := make(map[string]model.Seat, len(m.Seats))
	for _, s := range m.Seats {
		seats[s.Name] = s
	}
	holds := map[model.Instance][]model.Seat{}
	for _, h := range m.Holding {
		holds[h.Holder] = append(holds[h.Holder], seats[h.Seat])
	}
	instances := m.Instances()
	src := &principalSource{m: m, modules: modulesOf(m), holds: holds, acks: acksOf(graces), shared: make(map[string]*moduleGrants, len(m.Modules)),
		pull: m.Bus.Consumers != model.ConsumersPush, order: make([]principalRef, 0, 2+2*len(m.Nodes)+len(instances))}
	src.order = append(src.order, principalRef{user: ControllerUser, kind: KindController})
	if m.Bus.MintsSystemUser() {
		src.order = append(src.order, principalRef{user: SystemUser, kind: KindSystem})
	}
	for _, n := range m.Nodes {
		src.order = append(src.order, principalRef{user: NodeUser(n.Name), kind: KindNode, node: n.Name},
			principalRef{user: EnrolUser(n.Name), kind: KindEnrol, node: n.Name})
	}
	for _, inst := range instances {
		src.order = append(src.order, principalRef{user: InstanceUser(inst), kind: KindModule, inst: inst})
	}
	src.order = appendObservers(src.order, m)
	slices.SortFunc(src.order, func(a, b principalRef) int { return strings.Compare(a.user, b.user) })
	return src
}

// derive is the principal r names.
func (s *principalSource) derive(r principalRef) Principal {
	switch r.kind {
	case KindController:
		return controllerPrincipal(s.m)
	case KindSystem:
		return systemPrincipal()
	case KindNode:
		return nodePrincipal(r.node, s.pull)
	case KindEnrol:
		return enrolPrincipal(r.node)
	case KindObserver:
		return observerPrincipal(s.m, r.observer)
	}
	mod := s.modules[r.inst.Module]
	own := s.shared[mod.Name]
	if own == nil {
		own = grantsOfModule(mod)
		s.shared[mod.Name] = own
	}
	return instancePrincipal(r.inst, mod, own, s.holds[r.inst], s.acks[r.inst], s.pull)
}

// grants collects a principal's grants, once per subject (the first job to need a subject
// names it), and sorts them as the accounts config lists them. A principal has a handful of
// grants and a large mesh tens of thousands of principals, so the repeats are dropped once
// the grants are sorted (sorted), not looked up in a set of each principal's own.
type grants struct {
	list []Grant
}

func (g *grants) add(job string, subjects ...string) {
	for _, s := range subjects {
		g.addGrant(Grant{Subject: s, Job: job})
	}
}

func (g *grants) addGrant(gr Grant) { g.list = append(g.list, gr) }

// take grants what taking a consumer's messages needs, by the mesh's kind of consumer. A push
// consumer delivers on its deliver subject, which the client subscribes (in queue group queue
// when it has one). A pull consumer is asked: the client publishes the request on the pull
// subject and the messages, the server's heartbeats and its status replies come back to the
// reply subject, an inbox of its own already granted.
func take(pub, sub *grants, pull bool, job, stream, consumer, queue string) {
	if pull {
		pub.add(job, PullSubject(stream, consumer))
		return
	}
	sub.addGrant(Grant{Subject: DeliverSubject(consumer), Queue: queue, Job: job})
}

// sorted is the grants in the order of their text, each once: the sort is stable, so of the
// grants of one subject the first added comes first, and is the one kept.
func (g *grants) sorted() []Grant {
	slices.SortStableFunc(g.list, compareGrants)
	out := make([]Grant, 0, len(g.list))
	for _, gr := range g.list {
		if n := len(out); n > 0 && compareGrants(out[n-1], gr) == 0 {
			continue
		}
		out = append(out, gr)
	}
	return out
}

// compareGrants orders grants by their text (Grant.String), building it only for a grant
// with a queue: almost none has one.
func compareGrants(a, b Grant) int {
	if a.Queue == "" && b.Queue == "" {
		return strings.Compare(a.Subject, b.Subject)
	}
	return strings.Compare(a.String(), b.String())
}

// The JetStream advisories watch listens to, as the server names them
// (`$JS.EVENT.ADVISORY.STREAM.DELETED.<stream>`, `…CONSUMER.DELETED.<stream>.<consumer>`).
const (
	StreamDeletedAdvisories   = "$JS.EVENT.ADVISORY.STREAM.DELETED.*"
	StreamUpdatedAdvisories   = "$JS.EVENT.ADVISORY.STREAM.UPDATED.*"
	ConsumerDeletedAdvisories = "$JS.EVENT.ADVISORY.CONSUMER.DELETED.*.*"
	// MaxDeliveriesAdvisories say that a message reached its consumer's max_deliver: a dead letter.
	MaxDeliveriesAdvisories = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.*.*"
)

// systemPrincipal is meshctl's user in the server's system account, for a bus whose servers
// meshctl reloads by request. It may ask a server to re-read its config — which re-reads
// only what the operator and meshctl already wrote — and hear the answer at its own inbox;
// nothing else of the system account: not the servers' events, not their statistics, not
// any other request a system user could make.
func systemPrincipal() Principal {
	var pub, sub grants
	pub.add("ask each server to re-read its accounts config (bus reload: system)", ReloadRequests)
	sub.add("its own inbox, where the server answers", Inbox(SystemUser)+".>")
	return Principal{User: SystemUser, Kind: KindSystem, Publish: pub.sorted(), Subscribe: sub.sorted()}
}

// controllerPrincipal is meshctl's controller: what it needs to manage the bus, to take from
// its consumers and to run the mesh's own flows.
func controllerPrincipal(m *model.Mesh) Principal {
	var pub, sub grants
	controllerBusGrants(&pub, &sub)
	controllerConsumerGrants(&pub, &sub, m)
	controllerFlowGrants(&pub, &sub, m)
	// No allow_responses, although the reference accounts config sets it: the controller serves no
	// request at its reply subject. Enrolment is answered at the address the request's payload
	// carries, which `_INBOX.enrol.>` grants, and its acks are granted by name, because a reload
	// forgets the replies allow_responses allowed (docs/nats-behaviour.md, "Reload"). Without it on
	// a live bus every controller job is done (host's TestEveryGrantIsNeeded); with it, any message
	// with a reply subject that reached the controller would let it publish there once.
	return Principal{User: ControllerUser, Kind: KindController, Publish: pub.sorted(), Subscribe: sub.sorted()}
}

// controllerBusGrants are what the controller is granted whatever the mesh: the JetStream
// API, the store and the leases kept on the bus, the advisories watch heals by, the nodes'
// control traffic and its own inbox.
func controllerBusGrants(pub, sub *grants) {
	// The controller owns the streams: it is the only writer of stream definitions, so it
	// alone reaches the JetStream API.
	//
	// Publishing there is all it needs of the API: every call is a request whose answer comes back
	// to its own inbox. The reference also lets it subscribe to `$JS.API.>`, which would let it
	// hear every other principal's API requests and which no job of its uses; taken away on a live
	// bus, nothing the controller does is refused (host's TestEveryGrantIsNeeded), so it is not
	// granted.
	pub.add("manage the mesh's streams and consumers", "$JS.API.>")
	// The store is kept on the bus too (package replica): the controller writes its rows as
	// puts and purges of the bucket's keys, publishes on the bucket's subjects whose PubAck
	// comes back to its inbox. Creating the bucket and reading it back (stream info, direct
	// gets, a consumer of its stream) are API requests the grant above covers. No other
	// principal gets anything of it: the rows are every password's hash, nodes' keys and
	// sealed memberships, and with no `$JS.API` grant and no `$KV` subject nobody else can
	// read or write them (host's matrix refuses each kind of principal both).
	pub.add("keep the store on the bus", StateSubjects)
	// Its leases the same way (replica's lease.go): which watch leads, who holds the apply
	// lock. Nobody else may read them either; a host has no business knowing who manages it.
	pub.add("hold the lease and the apply lock on the bus", LeaseSubjects)
	// watch hears the server's own word that a stream or consumer went or a stream's config
	// changed, and heals it in seconds rather than at the next resync. By wildcard: the MESH
	// account holds the mesh alone, its streams share no name prefix a subject token could
	// narrow to, and the advisories name only objects the controller already lists through
	// the API. Not the creation advisories, nor a consumer's update (nats-server sends none):
	// nothing meshctl heals begins with an object made, only with one lost or changed.
	sub.add("hear a stream deleted behind watch's back", StreamDeletedAdvisories)
	sub.add("hear a stream's config changed behind watch's back", StreamUpdatedAdvisories)
	sub.add("hear a consumer deleted behind watch's back", ConsumerDeletedAdvisories)
	sub.add("count each message that reached its consumer's max_deliver, a dead letter", MaxDeliveriesAdvisories)
	// It hears the nodes' control traffic; it does not speak on it. The reference also lets it
	// publish on `mesh.control.>`, but what it says to a node goes to `mesh.node.>`, an
	// enrolment answer to the enrolling node's inbox, and an ack to `$JS.ACK`; with the grant
	// taken away on a live bus, none of its jobs is refused (host's TestEveryGrantIsNeeded),
	// and with it a controller could forge a node's report.
	sub.add("hear nodes' reports, enrolment requests and heartbeats", "mesh.control.>")
	pub.add("declare to each node what it runs", "mesh.node.>")
	// The enrolment answer goes to the address the request carries in its payload, under
	// the enrolling node's own inbox: the enrol identity can hear nothing else.
	pub.add("answer enrolment requests", "_INBOX.enrol.>")
	sub.add("its own inbox", Inbox(ControllerUser)+".>")
}

// controllerConsumerGrants are what taking from its CONTROL consumer, and from its EVENTS
// consumer when it follows events, needs beyond the API, by the mesh's kind of consumer.
func controllerConsumerGrants(pub, sub *grants, m *model.Mesh) {
	pub.add("acknowledge what its CONTROL consumer delivers", ackSubject(StreamControl, ControllerUser))
	// A push consumer delivers on `_DELIVER.<its name>`, and a client bound to it subscribes
	// exactly that, or the server refuses the binding. Pulling needs
	// nothing more: the pull subjects are under `$JS.API.>`, the answers come to its inbox.
	pull := m.Bus.Consumers != model.ConsumersPush
	if !pull {
		sub.add("take deliveries of its CONTROL consumer", DeliverSubject(ControllerUser))
	}
	if len(m.Controller.Follows) > 0 {
		if !pull {
			sub.add("take deliveries of its EVENTS consumer", DeliverSubject(ControllerUser)+".>")
		}
		// Without this every followed event would be redelivered for ever.
		pub.add("acknowledge what its EVENTS consumer delivers", ackSubject(StreamEvents, ControllerUser))
	}
}

// controllerFlowGrants are the mesh's own flows the controller runs: the events it follows,
// the work it sends, the tools it calls, and the work it moves out of renamed seats' queues.
func controllerFlowGrants(pub, sub *grants, m *model.Mesh) {
	c := m.Controller
	for _, f := range c.Follows {
		sub.add("follow "+f.String(), EventSubject(f))
	}
	for _, s := range c.Sends {
		// The controller is granted each seat's accepts by wildcard: it is the mesh's
		// own flows that submit work to a role.
		pub.add("send work to seat "+s.Seat, "mesh.seat."+s.Seat+".accept.>")
	}
	for _, t := range c.Calls {
		pub.add("call "+t.String(), ToolSubject(t))
	}
	for _, s := range m.Seats {
		// A renamed seat's old work queue is emptied into its new one before it is deleted:
		// the controller republishes each queued message under the seat's new name and takes
		// it out of the old queue only once the new one has acknowledged it (reconcile's
		// drain.go). Without this grant the move is refused, and the work queued under the old
		// name would be stranded or deleted with its queue.
		if len(s.Formerly) > 0 {
			pub.add("move the work queued under seat "+s.Name+"'s former names", "mesh.seat."+s.Name+".accept.>")
		}
	}
}

func nodePrincipal(node string, pull bool) Principal {
	var pub, sub grants
	user := NodeUser(node)
	// Its report and its heartbeat by name, not `mesh.control.<n>.>` as the reference grants:
	// under that wildcard lies the enrolment subject too, and a node's own credential could ask
	// to re-enrol with a key of its choosing once an operator issued enrol.<n> — the controller
	// would replace the node's key and password and use up the fresh enrolment credential,
	// cutting off the real agent. Asking to enrol is enrol.<n>'s alone.
	pub.add("report to the controller", ReportSubject(node))
	pub.add("heartbeat to the controller", HeartbeatSubject(node))
	pub.add("bind its declaration consumer", consumerInfo(StreamNodes, node))
	pub.add("acknowledge its declarations", ackSubject(StreamNodes, node))
	take(&pub, &sub, pull, "take deliveries of its declaration consumer", StreamNodes, node, "")
	sub.add("hear its declaration live", DeclareSubject(node))
	sub.add("its own inbox", Inbox(user)+".>")
	return Principal{User: user, Kind: KindNode, Node: node, Publish: pub.sorted(), Subscribe: sub.sorted()}
}

func enrolPrincipal(node string) Principal {
	var pub, sub grants
	user := EnrolUser(node)
	pub.add("ask to enrol", EnrolSubject(node))
	sub.add("hear the enrolment answer", Inbox(user)+".>")
	return Principal{User: user, Kind: KindEnrol, Node: node, Publish: pub.sorted(), Subscribe: sub.sorted()}
}

// moduleGrants are the grants every instance of a module has alike — the events it follows
// and emits, the tools it serves, the work it sends, the tools it calls — made once for the
// module: a fleet module runs on every node, and its instances share the subjects and jobs
// rather than each building its own.
type moduleGrants struct{ pub, sub []Grant }

func grantsOfModule(mod *model.Module) *moduleGrants {
	var pub, sub grants
	for _, f := range mod.Follows {
		sub.add("follow "+f.String(), EventSubject(f))
	}
	for _, e := range mod.Emits {
		pub.add("emit its event "+e, ModuleEvent(mod.Name, e))
	}
	for _, t := range mod.Serves {
		sub.add("serve its tool "+t, ModuleTool(mod.Name, t))
	}
	for _, s := range mod.Sends {
		pub.add("send work to "+s.String(), AcceptSubject(s.Seat, s.Accept))
	}
	for _, t := range mod.Calls {
		pub.add("call "+t.String(), ToolSubject(t))
	}
	return &moduleGrants{pub: pub.list, sub: sub.list}
}

// instancePrincipal is a module instance's principal: what its module grants each of its
// instances, its own consumer, each seat it holds (holds) and the acknowledgements of each seat
// it held and may still acknowledge the work of (acks, AckGrace).
func instancePrincipal(inst model.Instance, mod *model.Module, own *moduleGrants, holds []model.Seat, acks []string, pull bool) Principal {
	var pub, sub grants
	user := InstanceUser(inst)
	consumer := InstanceConsumer(inst)
	sub.add("its own inbox", Inbox(user)+".>")
	if len(mod.Follows) > 0 {
		// Binding a push consumer asks the server about it first, as the seat worker's grant shows;
		// the reference omits it for a module's own consumer. A live server decided: without it,
		// binding is refused on $JS.API.CONSUMER.INFO.EVENTS.<consumer> (host's
		// TestEveryGrantIsNeeded).
		pub.add("bind its EVENTS consumer", consumerInfo(StreamEvents, consumer))
		pub.add("acknowledge the events it follows", ackSubject(StreamEvents, consumer))
		take(&pub, &sub, pull, "take deliveries of its EVENTS consumer", StreamEvents, consumer, "")
		// A module that follows nothing has no consumer, and so no ack, info or delivery
		// grant: the reference grants every module its consumer's acks, but a
		// subject for a consumer that does not exist is a grant no job needs.
	}
	pub.list = append(pub.list, own.pub...)
	sub.list = append(sub.list, own.sub...)
	serves := len(mod.Serves) > 0
	for _, s := range holds {
		// Taking work from the role's queue: the worker consumer it binds (asked about,
		// delivered on in its queue group or pulled from, acknowledged), each on the seat's own
		// stream.
		stream, worker := SeatStreamName(s.Name), WorkerConsumer(s.Name)
		pub.add("bind the worker consumer of seat "+s.Name, consumerInfo(stream, worker))
		pub.add("acknowledge work of seat "+s.Name, ackSubject(stream, worker))
		job := "take work of seat " + s.Name + " in its queue group"
		if pull {
			job = "pull work of seat " + s.Name + " from its worker"
		}
		take(&pub, &sub, pull, job, stream, worker, worker)
		for _, a := range s.Accepts {
			sub.add("hear work of seat "+s.Name+" live", AcceptSubject(s.Name, a))
		}
		for _, e := range s.Emits {
			pub.add("report seat "+s.Name+"'s event "+e, SeatEvent(s.Name, e))
		}
		for _, t := range s.Serves {
			sub.add("serve seat "+s.Name+"'s tool "+t, SeatTool(s.Name, t))
			serves = true
		}
	}
	for _, seat := range acks {
		// Only the acknowledgement: the work it took before the handover is finished and not
		// done again by the new holder, and it takes nothing new (AckGrace).
		pub.add("acknowledge the work of seat "+seat+" it took before the seat was handed over",
			ackSubject(SeatStreamName(seat), WorkerConsumer(seat)))
	}
	return Principal{
		User: user, Kind: KindModule, Node: inst.Node, Module: inst.Module,
		Publish: pub.sorted(), Subscribe: sub.sorted(),
		// A tool is request/reply: the server must let the answer go to whatever inbox the
		// request named, once.
		AllowResponses: serves,
	}
}

// maxConsumersFor is the max_consumers set on EVENTS and NODES. nats-server caps a stream
// at 1,000 consumers unless the stream sets a limit above zero (-1 counts as unset), so a
// larger mesh's 1,001st consumer would fail. The limit moves in steps of 1,000 with at
// least 1,000 spare, so adding a module rarely changes the stream.
func maxConsumersFor(n int) int { return (n/1000 + 2) * 1000 }

// ControlPerSubject is how many messages CONTROL keeps on one subject — one node's reports, or
// its enrolment requests — before the oldest is dropped.
const ControlPerSubject = 16

// streamsAndConsumers derives the streams and consumers; modules indexes m.Modules by name,
// so a mesh of thousands of instances is derived in one pass rather than a search each.
func streamsAndConsumers(m *model.Mesh, modules map[string]*model.Module, instances []model.Instance) ([]jetstream.StreamConfig, []Consumer) {
	o := newObjectMaker(m)
	// Sized once: a consumer per module instance that follows anything, and one per node.
	events := eventsConsumers(m, modules, instances)
	consumers := make([]Consumer, 0, 1+events+len(m.Nodes)+len(m.Seats))
	consumers = o.meshConsumers(consumers, m, modules, instances)
	for _, s := range m.Seats {
		consumers = append(consumers, o.workerConsumer(s))
	}
	return o.streams(m, events), sortedConsumers(consumers)
}

// DeriveStreams is the streams of m alone, sorted by name, as Derive makes them: what the
// footprint of a description is summed from without deriving its consumers.
func DeriveStreams(m *model.Mesh) []jetstream.StreamConfig {
	return newObjectMaker(m).streams(m, eventsConsumers(m, modulesOf(m), m.Instances()))
}

// streams are the mesh's streams and every seat's work queue, sorted by name; events is how
// many consumers EVENTS has.
func (o objectMaker) streams(m *model.Mesh, events int) []jetstream.StreamConfig {
	streams := o.meshStreams(m, events)
	// A seat's work queue exists from registration, not assignment: work queues until a
	// holder appears, and "the holder is not here yet" must not mean "your messages are
	// gone". Changing or removing a holder never touches it.
	for _, s := range m.Seats {
		streams = append(streams, o.seatStream(s))
	}
	slices.SortFunc(streams, func(a, b jetstream.StreamConfig) int { return strings.Compare(a.Name, b.Name) })
	return streams
}

// objectMaker makes the streams and consumers of one mesh alike: marked as meshctl's, of the
// mesh's kind of consumer.
type objectMaker struct {
	pull bool
	// marker is every object's metadata: one map, shared and never written, rather than a
	// copy for each of a large mesh's tens of thousands of consumers.
	marker map[string]string
}

func newObjectMaker(m *model.Mesh) objectMaker {
	return objectMaker{pull: m.Bus.Consumers != model.ConsumersPush, marker: map[string]string{OwnerKey: OwnerValue}}
}

// controlPlane is the settings of the control plane's own consumers (the controller's and
// each node's), which the description does not change: the controller and the agent are
// written for them. A report or a declaration is never given up on: the controller's own
// window bounds redelivery, and a server that gave up first would drop the report the
// stream exists to keep (docs/design-rules.md).
var controlPlane = model.DefaultConsumer()

// consumer is a durable with explicit acks in either kind, redelivering as s says; a pull
// consumer has no deliver subject (the server refuses to turn one kind into the other, so a
// change of bus.consumers replaces every consumer).
func (o objectMaker) consumer(stream, name, deliver, description string, filters []string, s model.ConsumerSettings) Consumer {
	if o.pull {
		deliver = ""
	}
	// A backoff's first step is the ack wait: the server sets it so, and the model resolves
	// it so (s.AckWait). The backoff is the module's or seat's own slice, shared by its
	// consumers and never written.
	cfg := jetstream.ConsumerConfig{
		Durable: name, Description: description, DeliverSubject: deliver,
		DeliverPolicy: jetstream.DeliverAllPolicy, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: s.AckWait, MaxDeliver: s.MaxDeliver, MaxAckPending: s.MaxAckPending, BackOff: s.Backoff,
		ReplayPolicy: jetstream.ReplayInstantPolicy, Metadata: o.marker,
	}
	slices.Sort(filters)
	if len(filters) == 1 {
		cfg.FilterSubject = filters[0]
	} else if len(filters) > 1 {
		cfg.FilterSubjects = filters
	}
	return Consumer{Stream: stream, Config: cfg}
}

// eventsConsumers counts the consumers of EVENTS: the controller's when it follows anything,
// and one per module instance that does.
func eventsConsumers(m *model.Mesh, modules map[string]*model.Module, instances []model.Instance) int {
	events := 0
	if len(m.Controller.Follows) > 0 {
		events++
	}
	for _, inst := range instances {
		if len(modules[inst.Module].Follows) > 0 {
			events++
		}
	}
	return events
}

// meshConsumers appends to consumers the controller's, each following instance's on EVENTS
// and each node's on NODES.
func (o objectMaker) meshConsumers(consumers []Consumer, m *model.Mesh, modules map[string]*model.Module, instances []model.Instance) []Consumer {
	// No max-deliver on CONTROL: the controller's own window bounds redelivery, and a
	// server that dead-lettered first would discard the report the stream exists to keep.
	consumers = append(consumers, o.consumer(StreamControl, ControllerUser, DeliverSubject(ControllerUser),
		"meshctl: the controller takes nodes' reports and enrolment requests", nil, controlPlane))
	if f := m.Controller.Follows; len(f) > 0 {
		consumers = append(consumers, o.consumer(StreamEvents, ControllerUser, controllerEventsDeliver,
			"meshctl: the events the controller follows", eventSubjects(f), controlPlane))
	}
	followed := make(map[string][]string, len(m.Modules))
	for _, inst := range instances {
		mod := modules[inst.Module]
		if len(mod.Follows) == 0 {
			continue
		}
		// The subjects are the module's, made once and shared by its instances' filters.
		filters, ok := followed[mod.Name]
		if !ok {
			filters = eventSubjects(mod.Follows)
			followed[mod.Name] = filters
		}
		name := InstanceConsumer(inst)
		consumers = append(consumers, o.consumer(StreamEvents, name, DeliverSubject(name),
			"meshctl: the events "+InstanceUser(inst)+" follows", slices.Clone(filters), mod.Consumer))
	}
	for _, n := range m.Nodes {
		consumers = append(consumers, o.consumer(StreamNodes, n.Name, DeliverSubject(n.Name),
			"meshctl: declarations to node "+n.Name, []string{DeclareSubject(n.Name)}, controlPlane))
	}
	return consumers
}

// meshStreams are CONTROL, EVENTS (with room for events consumers) and NODES.
func (o objectMaker) meshStreams(m *model.Mesh, events int) []jetstream.StreamConfig {
	// CONTROL is bounded per subject, so per node and kind: a node's reports while the
	// controller cannot take them (the store down, watch stopped) keep at most
	// ControlPerSubject, and at the bound the oldest is dropped, since only a node's latest
	// report matters and a refused publish would leave the node retrying. One node cannot
	// crowd out another's, and its reports never its own enrolment request, which has a
	// subject of its own. The field updates in place (docs/nats-behaviour.md, "Streams").
	return []jetstream.StreamConfig{
		withSettings(jetstream.StreamConfig{
			Name: StreamControl, Description: "meshctl: nodes' reports and enrolment requests, until the controller takes them",
			Metadata:          o.marker,
			Subjects:          []string{"mesh.control.*.enrol", "mesh.control.*.report"},
			Retention:         jetstream.WorkQueuePolicy,
			MaxMsgsPerSubject: ControlPerSubject,
		}, m.Bus.Streams.Control),
		withSettings(jetstream.StreamConfig{
			Name: StreamEvents, Description: "meshctl: module and seat events", Metadata: o.marker,
			Subjects:     []string{"mesh.mod.*.event.>", "mesh.seat.*.event.>"},
			Retention:    jetstream.LimitsPolicy,
			MaxConsumers: maxConsumersFor(events),
		}, m.Bus.Streams.Events),
		withSettings(jetstream.StreamConfig{
			Name: StreamNodes, Description: "meshctl: the controller's declarations, the latest per node", Metadata: o.marker,
			Subjects:          []string{"mesh.node.*.declare"},
			Retention:         jetstream.LimitsPolicy,
			MaxMsgsPerSubject: 1, MaxConsumers: maxConsumersFor(len(m.Nodes)),
		}, m.Bus.Streams.Nodes),
	}
}

// seatStream is seat s's work queue.
func (o objectMaker) seatStream(s model.Seat) jetstream.StreamConfig {
	return withSettings(jetstream.StreamConfig{
		Name: SeatStreamName(s.Name), Description: "meshctl: work addressed to seat " + s.Name, Metadata: o.marker,
		Subjects:  []string{"mesh.seat." + s.Name + ".accept.>"},
		Retention: jetstream.WorkQueuePolicy,
	}, s.Stream)
}

// withSettings is cfg holding what s allows, kept where s says, on s's replicas. A limit the
// description leaves unlimited is sent unset, which the server reads as none (and reports as
// -1: plan.NormalizeStream).
func withSettings(cfg jetstream.StreamConfig, s model.StreamSettings) jetstream.StreamConfig {
	unset := func(v int64) int64 { return max(v, 0) }
	cfg.MaxBytes, cfg.MaxAge, cfg.MaxMsgs, cfg.MaxMsgSize = unset(s.MaxBytes), s.MaxAge, unset(s.MaxMsgs), int32(unset(s.MaxMsgSize))
	cfg.Storage, cfg.Discard, cfg.Replicas = jetstream.FileStorage, jetstream.DiscardOld, s.Replicas
	if s.Storage == model.StorageMemory {
		cfg.Storage = jetstream.MemoryStorage
	}
	if s.Discard == model.DiscardNew {
		cfg.Discard = jetstream.DiscardNew
	}
	return cfg
}

// workerConsumer is the consumer seat s's holder takes its work from.
func (o objectMaker) workerConsumer(s model.Seat) Consumer {
	// A queue group even though the seat guarantees one holder: the seat is authority,
	// the queue group is delivery, and the day two holders are allowed no message is
	// processed twice. A pull consumer needs none: every puller of one durable shares its
	// messages, each handed to one of them.
	c := o.consumer(SeatStreamName(s.Name), WorkerConsumer(s.Name), DeliverSubject(WorkerConsumer(s.Name)),
		"meshctl: the holder of seat "+s.Name+" takes its work", nil, s.Consumer)
	if !o.pull {
		c.Config.DeliverGroup = WorkerConsumer(s.Name)
	}
	return c
}

// sortedConsumers is consumers by stream and name. The order is found on their indices and
// the consumers moved once: a consumer's config is hundreds of bytes, and a sort that swaps
// them moves each many times over.
func sortedConsumers(consumers []Consumer) []Consumer {
	order := make([]int32, len(consumers))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(i, j int32) int {
		a, b := &consumers[i], &consumers[j]
		if c := strings.Compare(a.Stream, b.Stream); c != 0 {
			return c
		}
		return strings.Compare(a.Config.Durable, b.Config.Durable)
	})
	out := make([]Consumer, len(consumers))
	for i, j := range order {
		out[i] = consumers[j]
	}
	return out
}

func eventSubjects(refs []model.EventRef) []string {
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = EventSubject(r)
	}
	return out
}

// JSON is the derived bus as indented JSON, subjects unescaped (`>` stays `>`).
func (d *Desired) JSON() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
