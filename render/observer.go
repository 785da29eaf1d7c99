package render

import "github.com/meshbus/meshctl/model"

// Observers: principals that only look. A person on call, a dashboard or a CI job reads what
// meshctl manages — the mesh's streams and their consumers, how much each holds and has not
// delivered, which nodes' agents are alive — with the nats CLI or any client, under a
// credential of its own instead of the controller's. It publishes nothing a host would act
// on: no mesh subject, no acknowledgement, no request for a consumer's messages, no JetStream
// request that changes anything.

// KindObserver is a principal that only looks (model.Observer).
const KindObserver Kind = "observer"

// ObserverUser is an observer's user, `observer.<name>`. No node may be named observer
// (model.ReservedNodeNames), so no module user `<node>.<module>` shares the prefix.
func ObserverUser(name string) string { return "observer." + name }

// HeartbeatSubjects are every node's heartbeats, as an observer hears them.
const HeartbeatSubjects = "mesh.control.*.heartbeat"

// The JetStream API requests an observer makes about the account and the streams in it, and
// those it makes about one stream (its name appended) or one stream's consumers (the stream's
// name, a dot and the consumer's appended).
const (
	apiAccountInfo   = "$JS.API.INFO"
	apiStreamNames   = "$JS.API.STREAM.NAMES"
	apiStreamList    = "$JS.API.STREAM.LIST"
	apiStreamInfo    = "$JS.API.STREAM.INFO."
	apiConsumerNames = "$JS.API.CONSUMER.NAMES."
	apiConsumerList  = "$JS.API.CONSUMER.LIST."
	apiConsumerInfo  = "$JS.API.CONSUMER.INFO."
)

// UserInfoRequest asks the server who the asker is: its user, its account and its own
// permissions, nobody else's. The server answers it in every account; `nats account info`
// asks it beside the JetStream account info.
const UserInfoRequest = "$SYS.REQ.USER.INFO"

// appendObservers adds m's observers to the principals a source derives.
func appendObservers(order []principalRef, m *model.Mesh) []principalRef {
	for _, o := range m.Observers {
		order = append(order, principalRef{user: ObserverUser(o.Name), kind: KindObserver, observer: o.Name})
	}
	return order
}

// meshStreamNames are the streams the mesh derives: the mesh's own three and each seat's work
// queue. Not the store's and the leases' buckets, which are the controller's alone.
func meshStreamNames(m *model.Mesh) []string {
	names := []string{StreamControl, StreamEvents, StreamNodes}
	for _, s := range m.Seats {
		names = append(names, SeatStreamName(s.Name))
	}
	return names
}

// observerPrincipal is observer name of m: the JetStream API's read-only requests about the
// account and the mesh's streams and consumers, answered at its own inbox, and the nodes'
// heartbeats.
//
// Each stream is named, as the mesh's grants name their subjects: `$JS.API.STREAM.INFO.*`
// would reach streams the mesh does not derive, the store's bucket among them (nats.go opens
// a bucket by asking its stream's info). A stream's consumers are not: a consumer of a mesh
// stream is the mesh's, named after whoever takes from it, and a grant for each would put one
// line per module instance into every observer's entry. The requests that change something
// (CREATE, UPDATE, DELETE, PURGE), read messages (MSG.GET, DIRECT.GET) or take them
// (CONSUMER.MSG.NEXT) are under other tokens, which no grant here reaches.
//
// The two lists (`$JS.API.STREAM.NAMES`, `$JS.API.STREAM.LIST`, which `nats stream report`
// asks) take no stream in their subject, and so answer with every stream of the account: where
// the store and the leases are kept on the bus, their buckets appear there by name, size and
// state, never their content, which only a message request or a consumer of their streams
// would read.
func observerPrincipal(m *model.Mesh, name string) Principal {
	var pub, sub grants
	user := ObserverUser(name)
	pub.add("read the account's JetStream use and limits (nats account info)", apiAccountInfo)
	pub.add("read its own permissions (nats account info)", UserInfoRequest)
	pub.add("list the streams by name (nats stream ls --names)", apiStreamNames)
	pub.add("list the streams with their state (nats stream report)", apiStreamList)
	for _, s := range meshStreamNames(m) {
		pub.add("read stream "+s+"'s config and state (nats stream info)", apiStreamInfo+s)
		pub.add("list stream "+s+"'s consumers by name (nats consumer ls)", apiConsumerNames+s)
		pub.add("list stream "+s+"'s consumers with their state (nats consumer report)", apiConsumerList+s)
		pub.add("read a consumer of stream "+s+": its backlog, redeliveries and pulls waiting (nats consumer info)", apiConsumerInfo+s+".*")
	}
	sub.add("its own inbox, where the API answers", Inbox(user)+".>")
	// By wildcard, one subscription for every node: a heartbeat says only when and at which
	// generation a node's agent was last alive, and only node.<n> may publish its own. Granted
	// node by node, `nats sub 'mesh.control.*.heartbeat'` would be refused, since the server
	// checks a wildcard subscription against the grants as it is written.
	sub.add("hear which nodes' agents are alive", HeartbeatSubjects)
	return Principal{User: user, Kind: KindObserver, Publish: pub.sorted(), Subscribe: sub.sorted()}
}
