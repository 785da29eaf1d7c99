package plan

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/meshbus/meshctl/render"
)

// diffAccounts plans the accounts config: a change when the bytes in use differ from the
// rendering, described user by user and subject by subject, never by hash or password.
func diffAccounts(target Target, live Live) (Change, bool) {
	same := live.AccountsKnown && bytes.Equal(live.Accounts, target.Accounts)
	if same && live.AccountsNotServed == "" {
		return Change{}, false
	}
	c := Change{Kind: KindAccounts, Name: "config", Action: Update, Risk: RiskNone,
		Reason: "the users or permissions derived from the mesh differ from the config in use"}
	if same {
		// The file is the rendering, but what the server serves is not known: loading it
		// may change anything for anyone connected.
		c.Reason, c.Risk = live.AccountsNotServed, RiskDisruptive
		return c, true
	}
	before := map[string]*server.User{}
	if !live.AccountsKnown {
		c.Action = Create
		c.Reason = "no accounts config is in use yet"
	}
	after := map[string]*server.User{}
	for _, p := range target.Bus.Principals {
		after[p.User] = principalUser(p, target.Hashes)
	}
	if live.AccountsKnown {
		if users, err := usersInUse(live.Accounts, target.Accounts, after); err != nil {
			c.Reason = fmt.Sprintf("the config in use does not parse (%v); it is rewritten whole", err)
		} else {
			before = users
		}
	}
	for _, name := range sortedKeys(after) {
		a := after[name]
		b, existed := before[name]
		if !existed {
			u := UserChange{User: name, Action: Create,
				PublishAdded: allow(a, true), SubscribeAdded: allow(a, false)}
			if a.Permissions.Response != nil {
				u.AllowResponses = "granted"
			}
			if !locked(a.Password) {
				u.Credential = "issued"
			}
			c.Users = append(c.Users, u)
			continue
		}
		u := UserChange{User: name, Action: Update}
		u.PublishAdded, u.PublishRemoved = setDiff(allow(b, true), allow(a, true))
		u.SubscribeAdded, u.SubscribeRemoved = setDiff(allow(b, false), allow(a, false))
		switch {
		case b.Permissions != nil && b.Permissions.Response == nil && a.Permissions.Response != nil:
			u.AllowResponses = "granted"
		case b.Permissions != nil && b.Permissions.Response != nil && a.Permissions.Response == nil:
			u.AllowResponses = "revoked"
		}
		switch {
		case b.Password == a.Password:
		case locked(b.Password):
			u.Credential = "issued"
		case locked(a.Password):
			u.Credential = "revoked"
		default:
			u.Credential = "rotated"
		}
		if len(u.PublishAdded)+len(u.PublishRemoved)+len(u.SubscribeAdded)+len(u.SubscribeRemoved) > 0 ||
			u.AllowResponses != "" || u.Credential != "" {
			c.Users = append(c.Users, u)
		}
	}
	for _, name := range sortedKeys(before) {
		if _, kept := after[name]; !kept {
			b := before[name]
			c.Users = append(c.Users, UserChange{User: name, Action: Delete,
				PublishRemoved: allow(b, true), SubscribeRemoved: allow(b, false)})
		}
	}
	for _, u := range c.Users {
		if u.Action == Delete || len(u.PublishRemoved)+len(u.SubscribeRemoved) > 0 || u.AllowResponses == "revoked" || u.Credential == "revoked" || u.Credential == "rotated" {
			// Somebody connected loses something at the reload.
			c.Risk = RiskDisruptive
		}
	}
	if c.Action == Update && len(c.Users) == 0 {
		c.Reason = "the file in use differs from the rendering in layout only (edited by hand?); it is rewritten"
	}
	if live.AccountsNotServed != "" {
		// The users above are compared with the file on disk, which the server may not serve.
		c.Reason += "; and " + live.AccountsNotServed
		c.Risk = RiskDisruptive
	}
	return c, true
}

// ParseUsers reads an accounts config with the server's own parser, so what is compared
// is what the server would enforce.
func ParseUsers(conf []byte) (map[string]*server.User, error) {
	opts := &server.Options{}
	if err := opts.ProcessConfigString(string(conf)); err != nil {
		return nil, err
	}
	out := map[string]*server.User{}
	for _, u := range opts.Users {
		out[u.Username] = u
	}
	return out, nil
}

// usersInUse reads the users of the config in use, as the server would hold them. A config
// laid out exactly as meshctl renders one — the same header and footer, one block per
// user — is read block by block: a user whose block is byte for byte the one the target
// renders is the target's user (after), and only the other blocks go through the server's
// parser. A 5,000-instance mesh's config is 7,000 users, and parsing all of them for a
// merge that changes ten took most of the plan. Anything else is parsed whole.
func usersInUse(conf, rendered []byte, after map[string]*server.User) (map[string]*server.User, error) {
	have, ok := splitUsers(conf)
	want, wantOK := splitUsers(rendered)
	if !ok || !wantOK || !bytes.Equal(have.header, want.header) {
		return ParseUsers(conf)
	}
	var changed []byte
	var changedNames []string
	users := make(map[string]*server.User, len(have.blocks)+1)
	for name, u := range after {
		// A user the target writes in the header (meshctl's system user) is the target's
		// own: the headers are the same bytes.
		if _, inList := want.blocks[name]; !inList {
			users[name] = u
		}
	}
	for name, block := range have.blocks {
		if u, same := after[name]; same && bytes.Equal(block, want.blocks[name]) {
			users[name] = u
			continue
		}
		changed = append(changed, block...)
		changedNames = append(changedNames, name)
	}
	if changed == nil {
		return users, nil
	}
	// The header goes with the changed blocks so that they parse as they stand in the file;
	// of what that parse finds, only the changed blocks' users are taken.
	parsed, err := ParseUsers(slices.Concat(have.header, changed, []byte(usersFooter)))
	if err != nil {
		// Reported as the whole file's error, with the whole file's positions.
		return ParseUsers(conf)
	}
	for _, name := range changedNames {
		u, ok := parsed[name]
		if !ok {
			return ParseUsers(conf)
		}
		users[name] = u
	}
	return users, nil
}

// usersFooter closes the users list, the account and the accounts block of a rendering.
const usersFooter = "    ]\n  }\n}\n"

// renderedUsers is an accounts config split as render.AccountsConfig writes it.
type renderedUsers struct {
	header []byte            // everything before the first user
	blocks map[string][]byte // each user's lines, by user
}

// splitUsers splits a config written by render.AccountsConfig into its header and one
// block per user. ok is false for anything else: another layout, a user twice, a name that
// needs escaping.
func splitUsers(conf []byte) (renderedUsers, bool) {
	const (
		listStart  = "    users = [\n"
		blockStart = "      { user: \""
		blockEnd   = "\n      } }\n"
	)
	i := bytes.Index(conf, []byte(listStart))
	if i < 0 || !bytes.HasSuffix(conf, []byte(usersFooter)) {
		return renderedUsers{}, false
	}
	r := renderedUsers{header: conf[:i+len(listStart)], blocks: map[string][]byte{}}
	body := conf[i+len(listStart) : len(conf)-len(usersFooter)]
	for len(body) > 0 {
		if !bytes.HasPrefix(body, []byte(blockStart)) {
			return renderedUsers{}, false
		}
		end := bytes.Index(body, []byte(blockEnd))
		if end < 0 {
			return renderedUsers{}, false
		}
		block := body[:end+len(blockEnd)]
		name, _, found := bytes.Cut(block[len(blockStart):], []byte(`"`))
		if !found || bytes.ContainsAny(name, `\{}`) {
			return renderedUsers{}, false
		}
		if _, dup := r.blocks[string(name)]; dup {
			return renderedUsers{}, false
		}
		r.blocks[string(name)] = block
		body = body[len(block):]
	}
	return r, true
}

// principalUser is a principal as the server would hold it, without parsing its rendering.
func principalUser(p render.Principal, hashes map[string]string) *server.User {
	u := &server.User{Username: p.User, Password: hashes[p.User], Permissions: &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: grantStrings(p.Publish)},
		Subscribe: &server.SubjectPermission{Allow: grantStrings(p.Subscribe)},
	}}
	if u.Password == "" {
		u.Password = render.LockedHash
	}
	if p.AllowResponses {
		u.Permissions.Response = &server.ResponsePermission{MaxMsgs: 1}
	}
	return u
}

func grantStrings(gs []render.Grant) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = g.String()
	}
	return out
}

func locked(hash string) bool { return hash == "" || hash == render.LockedHash }

func allow(u *server.User, publish bool) []string {
	if u.Permissions == nil {
		return nil
	}
	sp := u.Permissions.Subscribe
	if publish {
		sp = u.Permissions.Publish
	}
	if sp == nil {
		return nil
	}
	out := slices.Clone(sp.Allow)
	slices.Sort(out)
	return out
}

func setDiff(before, after []string) (added, removed []string) {
	for _, s := range after {
		if !slices.Contains(before, s) {
			added = append(added, s)
		}
	}
	for _, s := range before {
		if !slices.Contains(after, s) {
			removed = append(removed, s)
		}
	}
	return added, removed
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
