package plan

import "errors"

// ServedUser is a user of an accounts config as the server serves it, reduced to what a plan
// compares: its credential, and what it may publish, subscribe to and answer. The plan reads
// the config in use as the server would enforce it, not as its text reads, so these come
// from the server's own parser (UsersReader); the target's users are made the same way
// without parsing (principalUser).
type ServedUser struct {
	// Credential is a password user's bcrypt hash or an nkey user's public key
	// (NkeyCredential); "" or render.LockedHash for a user that may not log in.
	Credential string
	// Restricted is false for a user the config grants no permissions block at all, whose
	// answering of requests is then not compared.
	Restricted bool
	// Publish and Subscribe are the subjects it is allowed, as the config lists them.
	Publish, Subscribe []string
	// AllowResponses says it may answer the requests it receives (allow_responses).
	AllowResponses bool
}

// UsersReader reads an accounts config, or the head, some entries and the tail of one, into
// its users by name as the server would serve them: an nkey user by the principal the
// comment above its entry names (render's layout), or by NkeyCredential of its key where no
// comment does. It is the server's parser, which plan does not link: whoever reads the config
// in use hands one in beside it (Live.ReadUsers), as reconcile does.
type UsersReader func(conf []byte) (map[string]ServedUser, error)

// errNoReader is the reading of a config in use by a Live that carries no UsersReader.
var errNoReader = errors.New("no reader of accounts configs was handed to the plan (Live.ReadUsers)")

// reader is live's UsersReader, or where it has none one that fails with errNoReader.
func (l Live) reader() UsersReader {
	if l.ReadUsers != nil {
		return l.ReadUsers
	}
	return func([]byte) (map[string]ServedUser, error) { return nil, errNoReader }
}

// renderingReader is the UsersReader of t's rendering as it is now (LiveOf): whatever part of
// it a plan reads, its users are t's, as the server would hold them (principalUser), made here
// without a parser. The map it returns is shared by every read, and never written.
func (t Target) renderingReader() UsersReader {
	users := targetUsers(t)
	return func([]byte) (map[string]ServedUser, error) { return users, nil }
}
