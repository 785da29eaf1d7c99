package accounts

import (
	"bytes"
	"strconv"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/render"
)

// The plan compares the users of the accounts config in use with the target's as the server
// would enforce them, and so reads the config with the server's own parser, which the pure
// plan package does not link: the reading is here, where the config in use is read, and is
// handed to the plan beside the bytes (plan.Live.ReadUsers).

// ReadServedUsers reads an accounts config as the server would serve it, into the users a
// plan compares (plan.UsersReader).
func ReadServedUsers(conf []byte) (map[string]plan.ServedUser, error) {
	users, err := parseUsers(conf)
	if err != nil {
		return nil, err
	}
	out := make(map[string]plan.ServedUser, len(users))
	for name, u := range users {
		out[name] = servedUser(u)
	}
	return out, nil
}

// servedUser is what a plan compares of u.
func servedUser(u *server.User) plan.ServedUser {
	s := plan.ServedUser{Credential: u.Password}
	if p := u.Permissions; p != nil {
		s.Restricted, s.AllowResponses = true, p.Response != nil
		if p.Publish != nil {
			s.Publish = p.Publish.Allow
		}
		if p.Subscribe != nil {
			s.Subscribe = p.Subscribe.Allow
		}
	}
	return s
}

// parseUsers reads an accounts config with the server's own parser, so what is compared
// is what the server would enforce. An nkey user is keyed by the principal its entry's
// comment names, its credential being its public key (addNkeyUsers).
func parseUsers(conf []byte) (map[string]*server.User, error) {
	if whole, ok := render.WholeBlock(conf); ok {
		// A file of the MESH account alone, read inside the block it is included in.
		conf = whole
	}
	opts := &server.Options{}
	if err := opts.ProcessConfigString(string(conf)); err != nil {
		return nil, err
	}
	out := map[string]*server.User{}
	for _, u := range opts.Users {
		out[u.Username] = u
	}
	addNkeyUsers(out, conf, opts.Nkeys)
	return out, nil
}

// addNkeyUsers adds the nkey users the server parsed from conf to users, as password users
// are held: by the principal the comment above each entry names (render's layout), with the
// public key as its credential (plan.NkeyCredential). An entry no such comment names —
// written by hand — is keyed by its public key, `nkey:U…`: no principal of the mesh, so the
// plan removes it.
func addNkeyUsers(users map[string]*server.User, conf []byte, nks []*server.NkeyUser) {
	if len(nks) == 0 {
		return
	}
	names := nkeyNames(conf)
	for _, nk := range nks {
		name, ok := names[nk.Nkey]
		if !ok {
			name = plan.NkeyCredential(nk.Nkey)
		}
		users[name] = &server.User{Username: name, Password: plan.NkeyCredential(nk.Nkey), Permissions: nk.Permissions}
	}
}

// nkeyNames maps the public key of each nkey entry in conf laid out as render writes one to
// the principal its comment names.
func nkeyNames(conf []byte) map[string]string {
	names := map[string]string{}
	start := []byte("\n" + render.NkeyEntryStart)
	for rest := conf; ; {
		i := bytes.Index(rest, start)
		if i < 0 {
			return names
		}
		rest = rest[i+len(start):]
		name, after, ok := quotedPrefix(rest)
		if !ok || !bytes.HasPrefix(after, []byte(render.NkeyEntryKey)) {
			continue
		}
		key, _, ok := quotedPrefix(after[len(render.NkeyEntryKey):])
		if ok {
			names[key] = name
		}
	}
}

// quotedPrefix reads the double-quoted string b begins with.
func quotedPrefix(b []byte) (s string, rest []byte, ok bool) {
	q, err := strconv.QuotedPrefix(string(b[:min(len(b), 512)]))
	if err != nil || q[0] != '"' {
		return "", nil, false
	}
	s, err = strconv.Unquote(q)
	return s, b[len(q):], err == nil
}
