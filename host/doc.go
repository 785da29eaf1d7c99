// Package host is how the mesh's hosts join the bus: a node's agent, a module instance, the
// holder of a seat, an enrolling node, the controller. It is the client side of what render
// derives: each principal binds exactly the consumer render names for it and publishes exactly
// the subjects render grants it, so a host built on this package asks the server for nothing
// its permission list leaves out.
//
// What it owns:
//
//   - The membership (Membership, ReadMembership, ReadMembershipFile): the one JSON line
//     `meshctl credentials issue` prints — address, how to recognise the bus (its pinned
//     fingerprints, or the PEM of the CA that signs its certificates), user and one secret (a
//     password, or an nkey user seed for `bus.auth: nkey`, with its user JWT for `bus.auth:
//     jwt`) as separate fields, for a cluster
//     every server's URL, and where the server asks for one the host's client certificate
//     and key files; never a URL with a secret in it. The agent and the example host read
//     their files through it. Its shape (Membership, an alias) is package wire's, since the
//     controller seals it to the agent; MembershipOf builds it from a Target.
//   - Joining (Join): busclient.Dial with those fields joined once, through whichever of the
//     servers answers, the certificate verified by its pins or its CA (so a certificate the
//     CA renews needs no new membership) and the inbox prefix `_INBOX.<user>`, the only
//     inbox the user is granted. A host that joins from its membership file (JoinFile) in
//     operator mode reads the file again at every reconnect, so a credential the agent
//     rewrote for changed permissions is taken at the reconnect its old one's revocation
//     forces, with no restart.
//   - Binding the consumer a principal is meant to use, by the mesh's naming rules
//     (Declarations, Events, Work, ControllerInbox, ControllerEvents), as push consumers taken
//     in their deliver group where they have one. Never js.Stream(): asking about a stream needs
//     STREAM.INFO, which no host is granted.
//   - Taking messages as jobs (ConsumeJobs, WorkJobs): each with what the consumer's info says
//     of redelivery (Redelivery: the ack wait or backoff in force, max_deliver) and which
//     delivery it is, so that work longer than the ack wait is kept in progress at the
//     consumer's own pace (Working) and the last delivery is known (Job.Last), whatever the
//     description set rather than the server's defaults.
//   - Turning refusals into errors (Check). The server says what it refused only through the
//     connection's async error handler; to the caller a missing grant looks like a timeout or "no
//     responders" (docs/nats-behaviour.md). Every operation here runs under Check, so a refusal is
//     a *busclient.PermissionError naming the user, the operation and the subject.
//
// Package hosttest, beside it, starts a real bus carrying a whole mesh for tests of hosts; the
// tests here use it to prove, principal by principal, that every job succeeds, that everything
// else is refused by name, and that every grant render makes is needed by some job.
//
// What it must not do: decide what a principal may do (render does), create or change streams
// and consumers (the controller does, through reconcile), or put a password anywhere but the
// connection's CONNECT (a seed goes nowhere: CONNECT carries its signature of the server's
// nonce, and a user JWT is sent only with it): errors name the address alone.
package host
