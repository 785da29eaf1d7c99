// Package replica keeps the controller's store on the bus: a JetStream KV bucket
// (render.StateBucket) holding one key per record of the store, written by the controller
// alone. Open creates or binds it for writing, Bind only binds it (a restore must not create an
// empty one); KV implements state.Replica, and ReadAll gives back what a restore rebuilds the
// store from. Beside it, the leases (lease.go, render.LeaseBucket): which watch leads and who
// holds the apply lock; and the fence (FenceKey), which makes one writer of the store at a time.
//
// It owns the bucket's configuration and the way records become keys and back: a put per row,
// a purge per row gone, and a read of the latest value of every key. It does not decide what a
// record is or when one is written (package state), and it does not say who may reach the
// bucket: that is the controller's grant, derived in render like every other.
//
// Why this layout survives a leader change and the loss of a server. The bucket is a stream
// with the bus's replicas (bus.replicas: 3 on a cluster). On a clustered stream the leader does
// not store a published message itself: it proposes it to the stream's Raft group
// (nats-server jetstream_cluster.go processClusteredInboundMsg), and only once a quorum of the
// replicas has the entry is it applied and the PubAck sent, by the leader, from
// applyStreamEntries → processJetStreamMsg (stream.go: canRespond requires the leader). Write
// returns only after every record's PubAck, so every record it reported written is on two of
// three servers. Losing one of them leaves a quorum holding every acknowledged write, and a new
// leader is elected only from replicas whose log is at least as up to date as the quorum's —
// Raft's rule — so a leader change loses no acknowledged record either. A write in flight when
// the leader goes either commits or is reported failed; state then resends the whole store with
// its next change (state.ErrReplicaBehind), so a failure never leaves the bucket quietly behind.
// What the bus cannot survive is losing a majority of its servers at once; on a single server
// (R1) the bucket is as durable as that server's disk: a message is in the block file before
// its PubAck, and fsynced every sync_interval.
//
// History is 1 and there is no TTL: a restore wants each row's latest value and nothing older,
// so the bucket holds one message per key and no more bytes than the store's own rows.
package replica
