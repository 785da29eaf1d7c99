package bus

import (
	"bytes"
	"slices"

	"github.com/nats-io/nats-server/v2/server"
)

// A reload of the embedded bus parses what changed.
//
// The server's parser reads an accounts config whole, and a reload hands the server every user
// anew: at 28,001 users the parse of the 14 MB file was two thirds of a reload's time in the
// process serving the bus, and most of its garbage, for a change of one user's grants. Given how
// the config is laid out (EmbeddedOptions.Entries, the layout's owner's), a parse reads only the
// entries that differ from those of the config the server serves, with the text around them
// (the head: the accounts, meshctl's system user; the tail: how the list ends), and takes every
// other user as the server's last parse made it of the same text. The options are those of the
// whole file: an entry's text parses the same beside any others under the same head, and a
// user's account is the server's by name (buildNkeysAndUsersFromOptions looks it up), not the
// one its parse made. A config the layout does not split, a head or tail that changed, a parse
// that fails — the whole text is parsed, and a refusal is the whole file's, with its positions.

// AccountsLayout is an accounts config split into the text before its users' entries, each
// entry, and the text after them.
type AccountsLayout struct {
	Head, Tail []byte
	Entries    []AccountsEntry
}

// AccountsEntry is one user's entry in an accounts config: its text, and the user it defines —
// a password user's name, or an nkey user's public key.
type AccountsEntry struct {
	Text       []byte
	User, Nkey string // Nkey is "" for a password user, and then User is its name
}

// servedAccounts is the accounts config the server serves, split, with what its parse made of
// each user: what the next reload's parse reuses.
type servedAccounts struct {
	layout AccountsLayout
	users  map[string]*server.User     // by name
	nkeys  map[string]*server.NkeyUser // by public key
}

// parse parses accounts as the server reads its accounts file, reading only what changed since
// served, the config the server serves (nil: nothing known), where split splits both; and
// returns what the next parse may reuse once the server serves these options (nil where the
// config does not split).
func (c serverConfig) parse(accounts []byte, split func([]byte) (AccountsLayout, bool), served *servedAccounts) (*server.Options, *servedAccounts, error) {
	var now AccountsLayout
	ok := split != nil
	if ok {
		now, ok = split(accounts)
	}
	opts, reused := (*server.Options)(nil), false
	if ok {
		opts, reused = c.parseChanged(now, served)
	}
	if !reused {
		var err error
		if opts, err = c.options(accounts); err != nil {
			return nil, nil, err
		}
	}
	if !ok {
		return opts, nil, nil
	}
	next := &servedAccounts{layout: now, users: make(map[string]*server.User, len(opts.Users)),
		nkeys: make(map[string]*server.NkeyUser, len(opts.Nkeys))}
	for _, u := range opts.Users {
		next.users[u.Username] = u
	}
	for _, u := range opts.Nkeys {
		next.nkeys[u.Nkey] = u
	}
	return opts, next, nil
}

// parseChanged parses the head, the entries of now that differ from served's and the tail,
// and adds to what that parse finds every other user as served holds it; ok is false where it
// cannot, and the whole text is to be parsed.
func (c serverConfig) parseChanged(now AccountsLayout, served *servedAccounts) (*server.Options, bool) {
	if served == nil || !bytes.Equal(now.Head, served.layout.Head) || !bytes.Equal(now.Tail, served.layout.Tail) {
		return nil, false
	}
	// Entries by the user they define: password users by name, nkey users by key.
	type entries struct{ users, nkeys map[string][]byte }
	index := func(es []AccountsEntry) (entries, bool) {
		ix := entries{users: make(map[string][]byte, len(es)), nkeys: map[string][]byte{}}
		for _, e := range es {
			m, key := ix.users, e.User
			if e.Nkey != "" {
				m, key = ix.nkeys, e.Nkey
			}
			if _, twice := m[key]; twice {
				return entries{}, false // the server's parser says so
			}
			m[key] = e.Text
		}
		return ix, true
	}
	before, ok := index(served.layout.Entries)
	if !ok {
		return nil, false
	}
	after, ok := index(now.Entries)
	if !ok {
		return nil, false
	}
	var changed []byte
	var users []*server.User
	var nkeys []*server.NkeyUser
	for _, e := range now.Entries {
		if e.Nkey != "" {
			if text, ok := before.nkeys[e.Nkey]; ok && bytes.Equal(text, e.Text) && served.nkeys[e.Nkey] != nil {
				nkeys = append(nkeys, served.nkeys[e.Nkey])
				continue
			}
		} else if text, ok := before.users[e.User]; ok && bytes.Equal(text, e.Text) && served.users[e.User] != nil {
			users = append(users, served.users[e.User])
			continue
		}
		changed = append(changed, e.Text...)
	}
	opts, err := c.options(slices.Concat(now.Head, changed, now.Tail))
	if err != nil {
		return nil, false
	}
	// What the changed text defines must be none of the users kept: in the whole text that
	// would be a user twice, which the server's parser refuses.
	kept := func(text, was []byte, ok bool) bool { return ok && bytes.Equal(text, was) }
	for _, u := range opts.Users {
		text, inList := after.users[u.Username]
		if was, ok := before.users[u.Username]; inList && kept(text, was, ok) {
			return nil, false
		}
	}
	for _, u := range opts.Nkeys {
		text, inList := after.nkeys[u.Nkey]
		if was, ok := before.nkeys[u.Nkey]; inList && kept(text, was, ok) {
			return nil, false
		}
	}
	opts.Users = append(opts.Users, users...)
	opts.Nkeys = append(opts.Nkeys, nkeys...)
	return opts, true
}
