// Package plan computes what must change to turn the bus that is into the bus that should
// be, as data: each change with its action, the fields it touches, its reason, its risk
// and what is at stake. It renders that value as text, JSON and Markdown.
//
// It is pure. It never dials a server or reads a file, and does not link the server: the
// reconcile package reads the live bus into a Live value, handing in beside the accounts
// config in use the server's own reading of it (Live.ReadUsers, ServedUser), and
// `meshctl diff --from` builds one from an older description, whose users it knows unparsed.
// It compares only what meshctl sets, after filling in the defaults the server fills in
// and ignoring the server's own `_nats.*` metadata, so a converged bus plans nothing,
// forever. It plans a replacement only for a field the server refuses to update, and it
// never plans to touch an object that lacks meshctl's ownership marker: a same-named
// object of someone else's is a conflict, reported and left alone.
package plan
