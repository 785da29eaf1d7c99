// Package busclient is how anything joins a mesh's bus: the control host's commands, the
// controller, a node's agent and every host built on package host. It links no server and no
// store, so a host carries nothing of the control host's code.
//
// What it owns:
//
//   - Dialling (Dial, DialAlone, Target, Credential). Every principal dials the same way: its
//     user and password (or nkey seed, UserKey; in operator mode with its user JWT, which
//     Credential.Refresh may read anew at each connection) beside the address, never inside
//     it, an inbox prefix of its own (the only inbox it is granted), and TLS as the mesh
//     says: the bus's certificate pinned by fingerprint (Fingerprint,
//     FingerprintMismatchError), one or several; verified by a CA and the server's name
//     (Target.CA), so a renewed certificate is accepted unchanged; or by the system's roots;
//     and the client's own certificate where the server asks for one (Target.CertFile). A
//     connection error names the address alone: errors are written on the assumption they
//     are logged, and a URL with a password in it is a password in a log.
//   - A cluster as one Target (Cluster): a connection starts at whichever server answers and
//     moves to another when its server goes away; DialAlone reaches one server and no other.
//   - Reporting refusals (Conn.Violations, Conn.WaitViolation). A missing grant surfaces on the
//     client as a timeout or "no responders" (docs/nats-behaviour.md, "Inboxes and
//     refusals"); the server says what it refused only through the async error handler, so Dial
//     always installs one and turns each refusal into a *PermissionError naming user,
//     operation and subject.
//
// What it must not do: import the server or the store (TestTheClientSideLinksNoServer holds
// this for the packages hosts build on), or ever put a password or a seed into an error or a
// log line.
package busclient
