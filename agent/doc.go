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
//     every interval on core NATS.
//
// What it must not do: log or report a password (logs name users, files and the bus's address),
// write a membership anywhere but its directory, or touch a file there that is not a membership
// of one of its node's instances.
package agent
