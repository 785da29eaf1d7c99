package render

import (
	"fmt"
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
	var b strings.Builder
	b.WriteString("# The mesh's users, rendered by meshctl. Do not edit: meshctl apply rewrites this file.\n")
	b.WriteString("accounts {\n  " + Account + " {\n")
	// JetStream is enabled per account once accounts exist at all: with only the server's
	// block, a user here is told "JetStream not enabled for account" the first time it
	// binds a consumer (seed 002).
	b.WriteString("    jetstream: enabled\n    users = [\n")
	for _, p := range principals {
		hash, ok := hashes[p.User]
		if !ok || hash == "" {
			hash = LockedHash
		}
		fmt.Fprintf(&b, "      { user: %s, password: %s, permissions: {\n", quote(p.User), quote(hash))
		fmt.Fprintf(&b, "        publish: %s\n", allowList(p.Publish))
		fmt.Fprintf(&b, "        subscribe: %s\n", allowList(p.Subscribe))
		if p.AllowResponses {
			b.WriteString("        allow_responses: { max: 1, ttl: \"1m\" }\n")
		}
		b.WriteString("      } }\n")
	}
	b.WriteString("    ]\n  }\n}\n")
	return []byte(b.String())
}

// allowList writes a permission. An empty list is written as a deny of everything: the
// server reads an empty subscribe allow-list as no restriction at all.
func allowList(gs []Grant) string {
	if len(gs) == 0 {
		return `{ deny: [">"] }`
	}
	parts := make([]string, len(gs))
	for i, g := range gs {
		parts[i] = quote(g.String())
	}
	return "{ allow: [" + strings.Join(parts, ", ") + "] }"
}

// quote double-quotes a value for the config parser. Names and subjects are validated to
// hold no quote or backslash; escaping them anyway keeps a future rule change from
// producing a file that parses differently than it reads.
func quote(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `"`, `\"`)
	return `"` + s + `"`
}
