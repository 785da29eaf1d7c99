// Package agent is `meshctl agent`: the process on a node that turns the controller's
// declarations into the memberships its module instances join with.
//
// What it owns, in the node's directory (0700, every file 0600):
//
//   - The node's key pair (node.key): X25519, made on first start. The public key goes to the
//     controller in the enrolment request; the private key never leaves the directory.
//   - Enrolment: with no node membership yet, it joins as the node's enrolment identity from the
//     one-time credential an operator issued (`meshctl credentials issue enrol.<node>`), asks to
//     enrol with its public key, and opens the answer — the node's membership, sealed to that
//     key — into node.<node>.json. The enrolment credential is spent: the controller locks the
//     identity again.
//   - The node's loop: joined as node.<node>, reconnecting for as long as it takes (a bus
//     restarting or reloading), it binds its declaration consumer on NODES, writes each declared
//     instance's membership to <user>.json atomically, removes the files of instances no longer
//     declared, reports the generation it applied (and what it could not apply), and heartbeats
//     every interval on core NATS. An instance declared by hand (its credential issued by an
//     operator, which the controller kept) has no membership to write: its file, if the
//     operator keeps one there, is left alone.
//   - Waiting for the bus: enrolling and joining, a bus that is down, hangs or cuts the
//     connection off is tried again with one capped backoff (retry), said at once and then
//     every so often (waiting), never once per attempt; a refused credential is told apart
//     from a bus that is down. Every socket is closed when the context ends, so the agent stops
//     within a second in every state, though nats.go's connect watches no context.
//   - Removal: the bus refusing node.<node> after letting the node in with it in this run means
//     the node left the description or its credential was revoked (a refusal before that may be
//     the credential not live yet, and is waited out). The agent then removes its instances'
//     memberships, whose credentials are dead, and stops with ErrRemoved, saying how to re-enrol.
//
// A membership carries a password or, for an nkey principal, a seed; the agent passes either
// through as sealed to it. In operator mode (bus.auth: jwt) it carries a seed and a user JWT,
// and the declaration may carry a newer JWT for the same key (the instance's grants changed):
// the agent writes that one in place of the sealed one, once it checked its subject is the
// seed's key. The host reads the file again at its next reconnect.
//
// What it must not do: log or report a password or seed (logs name users, files and the bus's
// address), write a membership anywhere but its directory, or touch a file there that is not a
// membership of one of its node's instances.
package agent
