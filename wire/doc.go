// Package wire is the mesh's own protocol between the controller and a node's agent, as
// values: the enrolment request and its answer, the declaration of what a node runs, the
// node's report of what it applied and its heartbeat, the membership, and its sealing to a
// node's key.
//
// What it owns:
//
//   - The messages' JSON shapes (EnrolRequest, EnrolAnswer, Declaration, Instance, Report,
//     Heartbeat) and what identifies a declaration apart from its sealed memberships
//     (Declaration.Digest).
//   - The membership's JSON shape (Membership) and how one is built (NewMembership, and
//     WithJWT for an operator-mode principal's user JWT): the line
//     `meshctl credentials issue` prints and what the controller seals are the same value, made
//     by the same function. Reading one and joining the bus with it are package host's.
//   - Where an enrolment's answer may go (EnrolReply): only under the inbox of the enrolment
//     identity of the node the request's subject names, within MaxEnrolReplyLen bytes of
//     subject tokens, from a payload of at most MaxEnrolRequestSize.
//   - Sealing (Seal, Open, GenerateKey): NaCl anonymous boxes (X25519, XSalsa20-Poly1305) from
//     golang.org/x/crypto/nacl/box. A membership crosses the bus only sealed to the key of the
//     node it is for.
//
// It is imported by the controller, the agent and the host library, and imports none of them:
// it links no server, no store and no client connection, so a node's agent carries the
// protocol without the control host's code.
//
// What it must not do: send or receive anything, or hold a plaintext membership longer than a
// call to Seal or Open.
package wire
