package render

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"iter"
	"slices"
	"strings"

	"github.com/meshbus/meshctl/model"
)

// LockedHash stands in for the hash of a principal that was never issued a credential. It
// has a bcrypt prefix, so the server compares with bcrypt rather than as plaintext, and it
// is not a well-formed hash (`!` is outside bcrypt's alphabet), so every comparison fails:
// no password, the empty one included, opens it.
const LockedHash = "$2a$11$!locked:no-credential-has-been-issued"

// AccountsConfig renders the accounts block the server includes: the MESH account with
// JetStream enabled and one user per principal, in the order given (Derive sorts them).
// hashes maps a user to its stored credential, a bcrypt hash or, for an nkey principal, a
// public key (CredentialOf says which entry each principal gets); a user without one gets
// LockedHash.
//
// It writes only the account, none of the server's own settings (listen, the jetstream
// store, TLS): those belong to whoever runs the server, and a value in this file would be
// one the mesh then owns.
func AccountsConfig(principals []Principal, hashes map[string]string) []byte {
	var b bytes.Buffer
	// Sized up front: a large mesh's config is megabytes, and growing a buffer that size
	// by doubling copies it several times over.
	b.Grow(accountsSize(principals))
	writeAccounts(&b, principals, slices.Values(principals), hashes, nil)
	return b.Bytes()
}

// Digest is the SHA-256, in hex, of an accounts config's text.
func Digest(conf []byte) string {
	sum := sha256.Sum256(conf)
	return hex.EncodeToString(sum[:])
}

// AccountsDigest is Digest of what AccountsConfig renders for principals and hashes, rendered
// a user at a time: what the config in use is compared with when neither text need be held
// (a 20,000-instance mesh's is 14 MB).
func AccountsDigest(principals []Principal, hashes map[string]string) string {
	return digestOf(principals, slices.Values(principals), hashes)
}

// AccountsDigestOf is AccountsDigest of m's principals with graces (DerivePrincipals), each
// derived, written and let go in turn: a plan of a converged mesh compares the config in use
// with it, and holds none of the principals — a 20,000-instance mesh's are 28,000, with their
// grants the largest part of its derivation.
func AccountsDigestOf(m *model.Mesh, graces []AckGrace, hashes map[string]string) string {
	src := newPrincipalSource(m, graces)
	// What the text before the users needs of the principals: meshctl's system user, and
	// whether hosts are nkey users (every host principal is one, or none).
	var head []Principal
	for _, r := range src.order {
		if r.kind == KindSystem {
			head = append(head, src.derive(r))
		}
	}
	for _, r := range src.order {
		if r.kind == KindNode || r.kind == KindEnrol || r.kind == KindModule || r.kind == KindObserver {
			head = append(head, src.derive(r))
			markNkeys(m, head[len(head)-1:])
			break
		}
	}
	return digestOf(head, func(yield func(Principal) bool) {
		one := make([]Principal, 1)
		for _, r := range src.order {
			one[0] = src.derive(r)
			markNkeys(m, one)
			if !yield(one[0]) {
				return
			}
		}
	}, hashes)
}

// digestOf is Digest of what writeAccounts writes for head and users.
func digestOf(head []Principal, users iter.Seq[Principal], hashes map[string]string) string {
	h := sha256.New()
	var b bytes.Buffer
	writeAccounts(&b, head, users, hashes, func() bool {
		h.Write(b.Bytes())
		b.Reset()
		return true
	})
	return hex.EncodeToString(h.Sum(nil))
}

// IsAccountsConfig reports whether conf is byte for byte what AccountsConfig renders for
// principals and hashes, rendering a user at a time beside conf rather than the whole text.
func IsAccountsConfig(conf []byte, principals []Principal, hashes map[string]string) bool {
	same := true
	var b bytes.Buffer
	writeAccounts(&b, principals, slices.Values(principals), hashes, func() bool {
		rest, ok := bytes.CutPrefix(conf, b.Bytes())
		conf, same = rest, ok
		b.Reset()
		return same
	})
	return same && len(conf) == 0
}

// writeAccounts writes AccountsConfig's text for users into b; head are those of them the
// text before the mesh's users is written from (meshctl's system user; whether hosts are
// nkey users), all of them or only those. flush, when not nil, is called each time b holds a
// whole part of the text — its head, one user's entry, its end — to take it out of b; it
// returns false to stop the writing there.
func writeAccounts(b *bytes.Buffer, head []Principal, users iter.Seq[Principal], hashes map[string]string, flush func() bool) {
	if flush == nil {
		flush = func() bool { return true }
	}
	b.WriteString("# The mesh's users, rendered by meshctl. Do not edit: meshctl apply rewrites this file.\n")
	writeNkeyNote(b, head)
	b.WriteString("accounts {\n")
	for _, p := range head {
		if p.Kind == KindSystem {
			writeSystemUser(b, p, hashes)
		}
	}
	b.WriteString("  " + Account + " {\n")
	// JetStream is enabled per account once accounts exist at all: with only the server's
	// block, a user here is told "JetStream not enabled for account" the first time it
	// binds a consumer.
	b.WriteString("    jetstream: enabled\n    users = [\n")
	if !flush() {
		return
	}
	for p := range users {
		if p.Kind == KindSystem {
			continue
		}
		writeEntryStart(b, p, CredentialOf(p, hashes))
		b.WriteString(", permissions: {\n        publish: ")
		writeAllowList(b, p.Publish)
		b.WriteString("\n        subscribe: ")
		writeAllowList(b, p.Subscribe)
		b.WriteString("\n")
		if p.AllowResponses {
			b.WriteString("        allow_responses: { max: 1, ttl: \"1m\" }\n")
		}
		b.WriteString(entryEnd)
		if !flush() {
			return
		}
	}
	b.WriteString(accountsEnd)
	flush()
}

// accountsEnd closes the users list, the mesh's account and the accounts block.
const accountsEnd = "    ]\n  }\n}\n"

// AccountsSplit is an accounts config AccountsConfig wrote, split into the text before the
// mesh's users (meshctl's system user among it, in the server's system account), each mesh
// user's entry, and the text after them.
type AccountsSplit struct {
	Head, Tail []byte
	Entries    []AccountsEntry
}

// AccountsEntry is one mesh user's entry in a config AccountsConfig wrote: its text, the
// principal it is for, and for an nkey user the public key it holds.
type AccountsEntry struct {
	Text []byte
	User string
	Nkey string // "" for a password user
}

// SplitAccountsConfig splits conf, a config AccountsConfig wrote, entry by entry, so that
// what reads a config laid out as this package lays it out can read only the entries that
// changed: the plan, and the embedded bus's reload. ok is false for anything else — another
// layout, a user twice, a name that needs escaping — which is then read whole.
func SplitAccountsConfig(conf []byte) (s AccountsSplit, ok bool) {
	const listStart = "    users = [\n"
	i := bytes.Index(conf, []byte(listStart))
	if i < 0 || !bytes.HasSuffix(conf, []byte(accountsEnd)) {
		return AccountsSplit{}, false
	}
	s.Head, s.Tail = conf[:i+len(listStart)], conf[len(conf)-len(accountsEnd):]
	body := conf[i+len(listStart) : len(conf)-len(accountsEnd)]
	// AccountsConfig writes the users in order, so each name follows the one before: only a
	// config in another order needs a set to find a user twice.
	var seen map[string]bool
	var last []byte
	for len(body) > 0 {
		start, nkey := entryStart+`"`, false
		if !bytes.HasPrefix(body, []byte(start)) {
			start, nkey = NkeyEntryStart+`"`, true
			if !bytes.HasPrefix(body, []byte(start)) {
				return AccountsSplit{}, false
			}
		}
		end := bytes.Index(body, []byte("\n"+entryEnd))
		if end < 0 {
			return AccountsSplit{}, false
		}
		text := body[:end+1+len(entryEnd)]
		name, rest, found := bytes.Cut(text[len(start):], []byte(`"`))
		if !found || bytes.ContainsAny(name, `\{}`) {
			return AccountsSplit{}, false
		}
		if seen == nil && last != nil && bytes.Compare(last, name) >= 0 {
			seen = map[string]bool{}
			for _, e := range s.Entries {
				seen[e.User] = true
			}
		}
		if seen != nil {
			if seen[string(name)] {
				return AccountsSplit{}, false
			}
			seen[string(name)] = true
		}
		last = name
		e := AccountsEntry{Text: text, User: string(name)}
		if nkey {
			key, found := bytes.CutPrefix(rest, []byte(NkeyEntryKey+`"`))
			if found {
				key, _, found = bytes.Cut(key, []byte(`"`))
			}
			if !found || len(key) == 0 || bytes.ContainsRune(key, '\\') {
				return AccountsSplit{}, false
			}
			e.Nkey = string(key)
		}
		s.Entries = append(s.Entries, e)
		body = body[len(text):]
	}
	return s, true
}

// writeSystemUser writes meshctl's system user (KindSystem) in an account block of the
// server's system account, before the mesh's: adding users to that account is a reload like
// any other, while naming another system account is not (docs/nats-behaviour.md). It is laid out on
// lines of its own — `users: [`, not the mesh's `users = [` — so that what reads the mesh's
// users entry by entry (SplitAccountsConfig) finds the mesh's list and not this one.
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
	// Two byte searches rather than ContainsAny, which builds a set for each call: every
	// name and subject of a large mesh's config comes through here.
	if strings.IndexByte(s, '\\') >= 0 || strings.IndexByte(s, '"') >= 0 {
		s = strings.ReplaceAll(s, `\`, `\\`)
		s = strings.ReplaceAll(s, `"`, `\"`)
	}
	b.WriteString(s)
	b.WriteByte('"')
}
