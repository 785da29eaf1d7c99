package render

import (
	"strings"

	"github.com/meshbus/meshctl/model"
)

// Names of the mesh's own streams.
const (
	// StreamControl holds nodes' reports and enrolment requests until the controller takes
	// them: a work queue.
	StreamControl = "CONTROL"
	// StreamEvents holds module and seat events for the consumers that follow them.
	StreamEvents = "EVENTS"
	// StreamNodes holds the controller's declarations, the latest per node.
	StreamNodes = "NODES"
)

// StateBucket is the JetStream KV bucket that keeps the controller's store on the bus,
// StateStream the stream the server keeps it in and StateSubjects the subjects its keys are
// written on: nats.go names a bucket's stream `KV_<bucket>` and a key's subject
// `$KV.<bucket>.<key>` (jetstream/kv.go kvBucketNameTmpl, kvSubjectsTmpl), and the grant must
// spell them as it does. An underscore, not a dot: a bucket name is [a-zA-Z0-9_-] and becomes a
// single subject token. Not marked with OwnerKey: the plan deletes owned streams the mesh does
// not derive, and this one is the store's, not the mesh's.
const (
	StateBucket   = "meshctl_state"
	StateStream   = "KV_" + StateBucket
	StateSubjects = "$KV." + StateBucket + ".>"
)

// LeaseBucket is the JetStream KV bucket of the leases on the store kept on the bus — which
// watch leads, and who holds the apply lock — and LeaseSubjects the subjects its keys are
// written on. A bucket of its own, not keys of StateBucket: a lease lapses with the bucket's
// TTL, measured by the server's clock, and the store's rows must never lapse.
const (
	LeaseBucket   = "meshctl_lease"
	LeaseStream   = "KV_" + LeaseBucket
	LeaseSubjects = "$KV." + LeaseBucket + ".>"
)

// Account is the one account the mesh lives in. Accounts isolate subject spaces entirely
// and the mesh is one space, so permissions are the only isolation.
const Account = "MESH"

// ControllerUser is the controller's user, and the name of its consumers.
const ControllerUser = "controller"

// SystemAccount is the server's system account, as nats-server names it by default, and
// SystemUser is meshctl's user in it: the one it asks a server to reload as (bus reload:
// system). Its name starts with '_', which no mesh name can, so it never meets a principal
// the mesh derives.
const (
	SystemAccount = "$SYS"
	SystemUser    = "_meshctl.system"
)

// ReloadRequests is the subject that asks a server to re-read its config, one token standing
// for the server's id (nats-server 2.10 and later): `$SYS.REQ.SERVER.<id>.RELOAD`.
const ReloadRequests = "$SYS.REQ.SERVER.*.RELOAD"

// OwnerKey and OwnerValue mark every stream and consumer meshctl creates. Only objects
// carrying the marker are ever updated or deleted: "not in my config" is not permission
// to delete (another tool's stream of the same name is a conflict, never adopted).
const (
	OwnerKey   = "meshctl.owner"
	OwnerValue = "meshctl"
)

// MeshKey names, in the metadata of every stream and consumer a store applied, the state store
// that manages it (state's ID): two meshes on one bus each leave the other's objects alone.
// An object carrying OwnerKey without it was made before stores had an identity, and is claimed
// by the first store that applies with it there (its metadata updated in place, once).
const MeshKey = "meshctl.mesh"

// SeatStreamName is the work queue of a seat: named after the seat, not its holder,
// because the holder can change and the queued work must not care.
func SeatStreamName(seat string) string { return "SEAT_" + upperSnake(seat) }

// WorkerConsumer is the consumer a seat's holder takes work from.
func WorkerConsumer(seat string) string { return SeatStreamName(seat) + "_worker" }

// InstanceUser is a module instance's user, `<node>.<module>`.
func InstanceUser(i model.Instance) string { return i.Node + "." + i.Module }

// InstanceConsumer is a module instance's consumer on EVENTS, `<node>_<module>`: a durable
// name may not contain a dot, while the ack subject `$JS.ACK.EVENTS.<consumer>.>` must
// name it exactly (docs/design-rules.md, "Names").
func InstanceConsumer(i model.Instance) string { return i.Node + "_" + i.Module }

// NodeUser is a node host's user.
func NodeUser(node string) string { return "node." + node }

// EnrolUser is a node's enrolment identity: it may only ask to enrol and hear the answer.
func EnrolUser(node string) string { return "enrol." + node }

// DeliverSubject is where a push consumer delivers.
func DeliverSubject(consumer string) string { return "_DELIVER." + consumer }

// controllerEventsDeliver is where the controller's EVENTS consumer delivers. Its CONTROL
// consumer has the same name and delivers on `_DELIVER.controller`; two consumers sharing
// one deliver subject would hand each subscription the other's messages.
const controllerEventsDeliver = "_DELIVER.controller.events"

// Inbox is a principal's inbox prefix: every principal gets its own and no other.
func Inbox(user string) string { return "_INBOX." + user }

func upperSnake(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "-", "_")) }

// Subjects of the mesh's traffic. Hosts use these same functions, so the subject a host
// publishes to and the grant that lets it are spelled in one place.

// ReportSubject is where a node reports to the controller; CONTROL keeps it until taken.
func ReportSubject(node string) string { return "mesh.control." + node + ".report" }

// HeartbeatSubject is where a node says it is alive: core NATS, heard live and never persisted.
func HeartbeatSubject(node string) string { return "mesh.control." + node + ".heartbeat" }

// EnrolSubject is where a node's enrolment identity asks to enrol; CONTROL keeps it until taken.
func EnrolSubject(node string) string { return "mesh.control." + node + ".enrol" }

// DeclareSubject is where the controller declares to a node what it runs; NODES keeps the latest.
func DeclareSubject(node string) string { return "mesh.node." + node + ".declare" }

// AcceptSubject is work addressed to a seat; the seat's work queue keeps it until its holder
// takes it.
func AcceptSubject(seat, accept string) string { return "mesh.seat." + seat + ".accept." + accept }

// ModuleEvent is a module's event.
func ModuleEvent(module, event string) string { return "mesh.mod." + module + ".event." + event }

// SeatEvent is what a seat's holder reports.
func SeatEvent(seat, event string) string { return "mesh.seat." + seat + ".event." + event }

// ModuleTool is a module's request/reply tool.
func ModuleTool(module, tool string) string { return "mesh.mod." + module + ".tool." + tool }

// SeatTool is a seat's request/reply tool, served by its holder.
func SeatTool(seat, tool string) string { return "mesh.seat." + seat + ".tool." + tool }

func ackSubject(stream, consumer string) string {
	return "$JS.ACK." + stream + "." + consumer + ".>"
}

// PullSubject is where a client asks a pull consumer for its next messages; they come back
// to the reply subject of the request, an inbox of the asker's.
func PullSubject(stream, consumer string) string {
	return "$JS.API.CONSUMER.MSG.NEXT." + stream + "." + consumer
}

func consumerInfo(stream, consumer string) string {
	return "$JS.API.CONSUMER.INFO." + stream + "." + consumer
}

// EventSubject is the subject an event reference names.
func EventSubject(r model.EventRef) string {
	if r.Seat {
		return SeatEvent(r.Owner, r.Event)
	}
	return ModuleEvent(r.Owner, r.Event)
}

// ToolSubject is the subject a tool reference names.
func ToolSubject(r model.ToolRef) string {
	if r.Seat {
		return SeatTool(r.Owner, r.Tool)
	}
	return ModuleTool(r.Owner, r.Tool)
}
