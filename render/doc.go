// Package render derives the desired bus from a validated mesh: the principals and their
// exact permissions, the streams, the consumers, and the accounts config text the server
// loads.
//
// It is a pure function of the model, the stored credentials and the seats' former holders
// still in their grace after a handover (grace.go: the handovers' times come in as data, as
// does the time they are read at). It does no I/O, and it never sees a password or a seed:
// only bcrypt hashes, which it writes double-quoted (an
// unquoted `$…` is a variable reference to the nats-server config parser), and, with
// bus.auth: nkey, the host principals' public keys (nkey.go: which principals, and what a
// principal without a key of its kind is given). Every naming rule of the
// bus lives here, beside the permission that has to match it: a consumer name and the ack
// subject granted for it drift apart when they are spelled in two places. Why each rule and
// grant is what it is, and where the derivation differs from the reference accounts config
// it is held to (testdata/seed002-composed.conf), is docs/design-rules.md.
package render
