// Package controller is the control host's side of the mesh's own traffic: it takes the nodes'
// reports and enrolment requests from the CONTROL work queue, hears their heartbeats, enrols
// nodes and declares to each enrolled node what it runs, with every instance's credential
// sealed to that node's key.
//
// What it owns:
//
//   - What a message means, decided as values and tested without a server (decide.go): which
//     node and what kind a CONTROL subject names, whether a report is about a superseded
//     declaration, what an enrolment request may ask, what to declare to a node, what
//     declaring it anew changes (ChangeOf: whose sealed credential is kept, whose is minted,
//     whose was issued by hand and is left alone, who departed, whether the digest changed),
//     and the store window — what to do with a message the store did not take.
//   - The loop (Run, controller.go): one goroutine, one message at a time. Deliveries,
//     heartbeats and new descriptions arrive on channels and the loop selects on them; no
//     library callback ever runs the controller's logic, because the window's bookkeeping is
//     unlocked. A connection lost for good (nats.go gives up after some of the server's
//     errors) ends a session: the loop joins again with a capped backoff and binds CONTROL and
//     the heartbeats anew, what it had not settled being delivered again; off the bus it mints
//     nothing for a declaration that could not go out. Health says whether it is on the bus
//     and when it last took a message, for watch's /healthz and metrics.
//   - Taking the nodes' messages (take.go): each delivery from CONTROL settled and logged
//     once, a report recorded; each heartbeat kept in memory.
//   - The store window (docs/design-rules.md): a report or enrolment the SQLite store cannot take
//     is nak'd with a delay and stays the server's, in the stream; it is recorded when the store
//     returns, and let go (term) and logged once the store has been failing for longer than the
//     bound. What the loop keeps is the time the window opened, not the message.
//   - The bounds of control traffic (decide.go, with wire.EnrolReply): every field of a
//     report, enrolment request and heartbeat is checked before use — payload sizes, answer
//     addresses under the requester's own enrolment inbox and short enough for the server's
//     control line, keys of exact size, report generations from 1 to the last declared to
//     the node, a report's users the node's own instances. A message out of bounds is let go
//     (term) and logged once, its values quoted; never held as a store failure, never
//     answered. FuzzControlMessage holds the decisions to the bounds.
//   - Enrolment (enrol.go): a node's enrolment credential used in the store, the node's own
//     credential minted and answered, sealed, at the address the request carries; a refusal
//     answered there too.
//   - Declaration (declare.go): a pass over the enrolled nodes after each description, each
//     failed pass retried with a capped backoff; for each node, the loop acts on ChangeOf —
//     mints, revokes, makes the credentials live, publishes a new generation and records it.
//   - Credentials issued by hand: an instance whose credential an operator issued (`credentials
//     issue`, typically before its node enrolled) keeps it. The controller mints nothing for
//     it, declares it by hand without a membership, so the agent leaves it alone, and logs
//     that once; the host using it is never locked out by its node enrolling. Revoking it
//     hands the instance to the agent. Refusing the enrolment instead would keep a whole node
//     out for one instance, and say so only to the agent.
//   - Rotation: the controller is the only carrier of the instance credentials it minted for
//     an enrolled node (Distributes, rotate.go). `credentials rotate` revokes one in the store and has the bus
//     reloaded; the loop notices the store's hashes changed (it polls them, since that process
//     tells watch nothing: credentialsChanged, declare.go) and declares a fresh credential in
//     a new generation (Redeclared).
//   - Sync is bounded (SyncTimeout): the loop takes nothing else while it waits for watch's
//     reconcile, so a reconcile held up must not hold the reports and heartbeats for long.
//   - Sealing (membership.go): every membership it sends is sealed (wire.Seal) to the key of
//     the node it is for; the store keeps its hash and the sealed copy, never the plaintext.
//   - What a membership carries (membership.go): a password, or where the mesh's hosts log in
//     with nkeys (bus.auth: nkey) an nkey seed, minted with its public key in the store
//     (membershipOf), for the node's own principal at enrolment as for its instances at a
//     declaration. In operator mode (bus.auth: jwt, jwt.go) a user of the mesh's account: a
//     fresh key and a user JWT signed with the operator's user signer (read from bus.operator
//     as reconcile reads it), recorded as the account plan expects. A JWT reissued for the same
//     key (its grants changed) is declared alone, in a new generation, for the agent to write
//     beside the seed it holds: the controller keeps no seed.
//   - What the store and the bus say of the mesh, read for status: each node's enrolment,
//     declaration and report (status.go), each seat's work queue and the consumers with work
//     pending (work.go).
//
// It joins the bus as the `controller` principal (in operator mode with the controller's creds
// file, read again at each connection), with its derived grants and nothing more:
// deliveries on `_DELIVER.controller` and their acks, heartbeats on `mesh.control.>`, the
// declarations on `mesh.node.>`, and enrolment answers at the address the request carries in
// its payload, under `_INBOX.enrol.<node>.>` — never a reply subject, which a work queue's
// delivery does not carry from the requester.
//
// What it must not do: create or change streams, consumers or the accounts file (reconcile
// does, through the watch loop, which Sync asks), act on a report of a superseded declaration,
// or log, return or store a password or a seed: a minted secret exists only in the sealed
// answer.
package controller
