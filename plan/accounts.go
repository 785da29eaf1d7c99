package plan

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/meshbus/meshctl/render"
)

// diffAccounts plans the accounts config: a change when the bytes in use differ from the
// rendering, described user by user and subject by subject, never by hash or password.
func diffAccounts(target Target, live Live) (Change, bool) {
	same := live.AccountsKnown && (live.AccountsRendered || target.rendersAs(live.Accounts))
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
	before, after := map[string]ServedUser{}, map[string]ServedUser(nil)
	if !live.AccountsKnown {
		c.Action = Create
		c.Reason = "no accounts config is in use yet"
	} else if inUse, compared, err := usersInUse(live.Accounts, target.Rendering(), live.reader(), target); err != nil {
		c.Reason = fmt.Sprintf("the config in use does not parse (%v); it is rewritten whole", err)
	} else {
		before, after = inUse, compared
	}
	if after == nil {
		after = targetUsers(target)
	}
	c.Users = userChanges(target, before, after)
	if slices.ContainsFunc(c.Users, losesSomething) {
		// Somebody connected loses something at the reload.
		c.Risk = RiskDisruptive
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

// userChanges is what changes for each user from before (the config in use) to after (the
// target's users): each user after creates or changes, by name, then each one it drops.
func userChanges(target Target, before, after map[string]ServedUser) []UserChange {
	var users []UserChange
	for _, name := range sortedKeys(after) {
		a := after[name]
		b, existed := before[name]
		if !existed {
			users = append(users, createdUser(name, a))
			continue
		}
		if u, changed := updatedUser(target, name, b, a); changed {
			users = append(users, u)
		}
	}
	for _, name := range sortedKeys(before) {
		if _, kept := after[name]; !kept {
			b := before[name]
			users = append(users, UserChange{User: name, Action: Delete,
				PublishRemoved: allow(b, true), SubscribeRemoved: allow(b, false)})
		}
	}
	return users
}

// createdUser is the change of a user the config in use does not have: everything it is
// granted is added.
func createdUser(name string, a ServedUser) UserChange {
	u := UserChange{User: name, Action: Create, PublishAdded: allow(a, true), SubscribeAdded: allow(a, false)}
	if a.AllowResponses {
		u.AllowResponses = "granted"
	}
	if !locked(a.Credential) {
		u.Credential = "issued"
	}
	return u
}

// updatedUser is the change of a user from b, as the config in use has it, to a, as the
// target has it; changed is false when nothing the plan compares differs.
func updatedUser(target Target, name string, b, a ServedUser) (u UserChange, changed bool) {
	u = UserChange{User: name, Action: Update}
	u.PublishAdded, u.PublishRemoved = setDiff(allow(b, true), allow(a, true))
	u.SubscribeAdded, u.SubscribeRemoved = setDiff(allow(b, false), allow(a, false))
	switch {
	case b.Restricted && !b.AllowResponses && a.AllowResponses:
		u.AllowResponses = "granted"
	case b.Restricted && b.AllowResponses && !a.AllowResponses:
		u.AllowResponses = "revoked"
	}
	switch {
	case b.Credential == a.Credential:
	case locked(b.Credential):
		u.Credential = "issued"
	case locked(a.Credential):
		u.Credential = lockedHow(target, name)
	default:
		u.Credential = "rotated"
	}
	changed = len(u.PublishAdded)+len(u.PublishRemoved)+len(u.SubscribeAdded)+len(u.SubscribeRemoved) > 0 ||
		u.AllowResponses != "" || u.Credential != ""
	return u, changed
}

// losesSomething reports whether a user's change takes something from someone connected:
// the user, a grant, answering requests or a working credential.
func losesSomething(u UserChange) bool {
	return u.Action == Delete || len(u.PublishRemoved)+len(u.SubscribeRemoved) > 0 || u.AllowResponses == "revoked" ||
		u.Credential == "revoked" || u.Credential == "rotated"
}

// usersInUse reads the users of the config in use as the server would hold them (before),
// beside the target's users they are compared with (after). A config laid out exactly as
// meshctl renders one — the same header and footer, one block per user — is read block by
// block: a user whose block is byte for byte the one the target renders is in neither map,
// since nothing of it changes, and only the other blocks go through the server's parser. A
// 20,000-instance mesh's config is 28,000 users, and parsing all of them, or holding each as
// the server would, for a merge that changes ten took most of the plan. Anything else is
// parsed whole, and compared with every user of the target. read is the server's parser
// (Live.ReadUsers).
func usersInUse(conf, rendered []byte, read UsersReader, target Target) (before, after map[string]ServedUser, err error) {
	have, ok := render.SplitAccountsConfig(conf)
	want, wantOK := render.SplitAccountsConfig(rendered)
	if !ok || !wantOK || !bytes.Equal(have.Head, want.Head) {
		before, err = read(conf)
		return before, targetUsers(target), err
	}
	changed, compared := changedEntries(have.Entries, want.Entries)
	after = map[string]ServedUser{}
	for _, p := range target.Principals() {
		// A user the target writes in the header (meshctl's system user) is unchanged too,
		// unless the config in use has it among the entries: the headers are the same bytes.
		if compared[p.User] {
			after[p.User] = principalUser(p, target.Hashes)
		}
	}
	before = make(map[string]ServedUser, len(changed))
	if len(changed) == 0 {
		return before, after, nil
	}
	// The header goes with the changed entries so that they parse as they stand in the file;
	// of what that parse finds, only the changed entries' users are taken.
	text := slices.Clone(have.Head)
	for _, e := range changed {
		text = append(text, e.Text...)
	}
	parsed, err := read(append(text, have.Tail...))
	if err != nil {
		// Reported as the whole file's error, with the whole file's positions.
		before, err = read(conf)
		return before, targetUsers(target), err
	}
	for _, e := range changed {
		u, ok := parsed[e.User]
		if !ok {
			before, err = read(conf)
			return before, targetUsers(target), err
		}
		before[e.User] = u
	}
	return before, after, nil
}

// changedEntries compares the entries of the config in use (have) with the target's (want):
// changed are those in use whose text the target does not write, compared the users whose
// entries differ, by name, on either side. Both are in the order render writes them, by user,
// and are walked side by side; a config in another order is compared by name.
func changedEntries(have, want []render.AccountsEntry) (changed []render.AccountsEntry, compared map[string]bool) {
	compared = map[string]bool{}
	if !byUser(have) || !byUser(want) {
		wanted := make(map[string][]byte, len(want))
		for _, e := range want {
			wanted[e.User] = e.Text
		}
		inUse := make(map[string]bool, len(have))
		for _, e := range have {
			inUse[e.User] = true
			if text, ok := wanted[e.User]; !ok || !bytes.Equal(text, e.Text) {
				changed = append(changed, e)
				compared[e.User] = true
			}
		}
		for _, e := range want {
			if !inUse[e.User] {
				compared[e.User] = true
			}
		}
		return changed, compared
	}
	for i, j := 0, 0; i < len(have) || j < len(want); {
		switch {
		case i < len(have) && j < len(want) && have[i].User == want[j].User:
			if !bytes.Equal(have[i].Text, want[j].Text) {
				changed = append(changed, have[i])
				compared[have[i].User] = true
			}
			i, j = i+1, j+1
		case j == len(want) || i < len(have) && have[i].User < want[j].User:
			changed = append(changed, have[i])
			compared[have[i].User] = true
			i++
		default:
			compared[want[j].User] = true
			j++
		}
	}
	return changed, compared
}

// byUser reports whether entries are in order of their users, each once.
func byUser(entries []render.AccountsEntry) bool {
	for i := 1; i < len(entries); i++ {
		if entries[i-1].User >= entries[i].User {
			return false
		}
	}
	return true
}

// targetUsers is every user of the target, as the server would hold it.
func targetUsers(target Target) map[string]ServedUser {
	principals := target.Principals()
	users := make(map[string]ServedUser, len(principals))
	for _, p := range principals {
		users[p.User] = principalUser(p, target.Hashes)
	}
	return users
}

// principalUser is a principal as the server would hold it, without parsing its rendering.
func principalUser(p render.Principal, hashes map[string]string) ServedUser {
	return ServedUser{Credential: entryCredential(render.CredentialOf(p, hashes)), Restricted: true,
		Publish: grantStrings(p.Publish), Subscribe: grantStrings(p.Subscribe), AllowResponses: p.AllowResponses}
}

func grantStrings(gs []render.Grant) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = g.String()
	}
	return out
}

func locked(hash string) bool { return hash == "" || hash == render.LockedHash }

// allow is the subjects u may publish to (or subscribe to), sorted.
func allow(u ServedUser, publish bool) []string {
	subjects := u.Subscribe
	if publish {
		subjects = u.Publish
	}
	out := slices.Clone(subjects)
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
