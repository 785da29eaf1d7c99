package render

import (
	"bytes"
	"strings"
)

// LockedHash stands in for the hash of a principal that was never issued a credential. It
// has a bcrypt prefix, so the server compares with bcrypt rather than as plaintext, and it
// is not a well-formed hash (`!` is outside bcrypt's alphabet), so every comparison fails:
// no password, the empty one included, opens it.
const LockedHash = "$2a$11$!locked:no-credential-has-been-issued"

// AccountsConfig renders the accounts block the server includes: the MESH account with
// JetStream enabled and one user per principal, in the order given (Derive sorts them).
// hashes maps a user to its bcrypt hash; a user without one gets LockedHash.
//
// It writes only the account, none of the server's own settings (listen, the jetstream
// store, TLS): those belong to whoever runs the server, and a value in this file would be
// one the mesh then owns.
func AccountsConfig(principals []Principal, hashes map[string]string) []byte {
	var b bytes.Buffer
	// Sized up front: a large mesh's config is megabytes, and growing a buffer that size
	// by doubling copies it several times over.
	b.Grow(accountsSize(principals))
	b.WriteString("# The mesh's users, rendered by meshctl. Do not edit: meshctl apply rewrites this file.\n")
	b.WriteString("accounts {\n")
	var mesh []Principal
	for _, p := range principals {
		if p.Kind == KindSystem {
			writeSystemUser(&b, p, hashes)
			continue
		}
		mesh = append(mesh, p)
	}
	principals = mesh
	b.WriteString("  " + Account + " {\n")
	// JetStream is enabled per account once accounts exist at all: with only the server's
	// block, a user here is told "JetStream not enabled for account" the first time it
	// binds a consumer (seed 002).
	b.WriteString("    jetstream: enabled\n    users = [\n")
	for _, p := range principals {
		hash, ok := hashes[p.User]
		if !ok || hash == "" {
			hash = LockedHash
		}
		b.WriteString(entryStart)
		writeQuoted(&b, p.User)
		b.WriteString(", password: ")
		writeQuoted(&b, hash)
		b.WriteString(", permissions: {\n        publish: ")
		writeAllowList(&b, p.Publish)
		b.WriteString("\n        subscribe: ")
		writeAllowList(&b, p.Subscribe)
		b.WriteString("\n")
		if p.AllowResponses {
			b.WriteString("        allow_responses: { max: 1, ttl: \"1m\" }\n")
		}
		b.WriteString(entryEnd)
	}
	b.WriteString("    ]\n  }\n}\n")
	return b.Bytes()
}

// writeSystemUser writes meshctl's system user (KindSystem) in an account block of the
// server's system account, before the mesh's: adding users to that account is a reload like
// any other, while naming another system account is not (NATS-FACTS.md). It is laid out on
// lines of its own — `users: [`, not the mesh's `users = [` — so that what reads the mesh's
// users block by block (plan's splitUsers) finds the mesh's list and not this one.
func writeSystemUser(b *bytes.Buffer, p Principal, hashes map[string]string) {
	hash, ok := hashes[p.User]
	if !ok || hash == "" {
		hash = LockedHash
	}
	b.WriteString("  # meshctl's system user: it may ask a server to reload, and nothing else.\n  ")
	writeQuoted(b, SystemAccount)
	b.WriteString(" { users: [\n    { user: ")
	writeQuoted(b, p.User)
	b.WriteString(", password: ")
	writeQuoted(b, hash)
	b.WriteString(", permissions: {\n      publish: ")
	writeAllowList(b, p.Publish)
	b.WriteString("\n      subscribe: ")
	writeAllowList(b, p.Subscribe)
	b.WriteString("\n    } }\n  ] }\n")
}

// How AccountsConfig begins and ends each mesh user's entry.
const (
	entryStart = "      { user: "
	entryEnd   = "      } }\n"
)

// EntryOf returns user's entry — its name, hash and permissions — in a config AccountsConfig
// wrote, or nil when the config has no entry for that user laid out as AccountsConfig lays
// one out.
func EntryOf(conf []byte, user string) []byte {
	var b bytes.Buffer
	b.WriteString("\n" + entryStart)
	writeQuoted(&b, user)
	b.WriteString(", ")
	i := bytes.Index(conf, b.Bytes())
	if i < 0 {
		return nil
	}
	entry := conf[i+1:]
	end := bytes.Index(entry, []byte("\n"+entryEnd))
	if end < 0 {
		return nil
	}
	return entry[:end+1+len(entryEnd)]
}

// accountsSize is about how long AccountsConfig's text for these principals is.
func accountsSize(principals []Principal) int {
	n := 256
	for _, p := range principals {
		n += 200 + len(p.User)
		for _, g := range p.Publish {
			n += len(g.Subject) + len(g.Queue) + 5
		}
		for _, g := range p.Subscribe {
			n += len(g.Subject) + len(g.Queue) + 5
		}
	}
	return n
}

// writeAllowList writes a permission. An empty list is written as a deny of everything: the
// server reads an empty subscribe allow-list as no restriction at all.
func writeAllowList(b *bytes.Buffer, gs []Grant) {
	if len(gs) == 0 {
		b.WriteString(`{ deny: [">"] }`)
		return
	}
	b.WriteString("{ allow: [")
	for i, g := range gs {
		if i > 0 {
			b.WriteString(", ")
		}
		writeQuoted(b, g.String())
	}
	b.WriteString("] }")
}

// writeQuoted double-quotes a value for the config parser. Names and subjects are validated
// to hold no quote or backslash; escaping them anyway keeps a future rule change from
// producing a file that parses differently than it reads.
func writeQuoted(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	if strings.ContainsAny(s, `\"`) {
		s = strings.ReplaceAll(s, `\`, `\\`)
		s = strings.ReplaceAll(s, `"`, `\"`)
	}
	b.WriteString(s)
	b.WriteByte('"')
}
