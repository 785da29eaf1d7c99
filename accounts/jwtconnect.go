package accounts

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/state"
)

// SystemUser is the name meshctl's connection as the operator's system user goes by (its
// connection name and inbox prefix); the user itself is the admin's.
const SystemUser = "system"

// CredsCredential is the credential a creds file's content logs in with, as user: its user
// JWT, and the seed that signs the server's nonce. A file that holds neither is refused.
func CredsCredential(user string, creds []byte) (busclient.Credential, error) {
	token, seed, err := readCreds(creds)
	if err != nil {
		return busclient.Credential{}, err
	}
	return busclient.Credential{User: user, JWT: token, Seed: seed}, nil
}

// CredsFileCredential is the credential of the creds file at path, as user, read again at
// every connection: a file rewritten with a new JWT (a reissue) logs in at the next
// reconnect, as nats.go's creds file option would.
func CredsFileCredential(user, path string) busclient.Credential {
	return busclient.Credential{User: user, Refresh: func() (string, string, error) {
		data, err := os.ReadFile(path)
		if err != nil {
			return "", "", err
		}
		token, seed, err := readCreds(data)
		if err != nil {
			return "", "", fmt.Errorf("%s: %w", path, err)
		}
		return token, seed, nil
	}}
}

// readCreds is a creds file's user JWT and seed. Its errors quote neither.
func readCreds(creds []byte) (token, seed string, err error) {
	if token, err = jwt.ParseDecoratedJWT(creds); err != nil {
		return "", "", fmt.Errorf("reading the creds: %w", err)
	}
	kp, err := jwt.ParseDecoratedUserNKey(creds)
	if err != nil {
		return "", "", fmt.Errorf("reading the creds: %w", err)
	}
	raw, err := kp.Seed()
	if err != nil {
		return "", "", fmt.Errorf("reading the creds: %w", err)
	}
	return token, string(raw), nil
}

// DialJWT is the JWT backend of the external bus m describes: the operator's system user
// connected to it, and each server of bus.servers named as it names itself in its answers,
// learnt by a connection to that server alone. A server that cannot be reached is named by
// its address, which no answer carries: every push and reading then says it did not answer.
// The caller closes the backend's Resolver.Conn.
func DialJWT(ctx context.Context, m *model.Mesh, op Operator, store *state.Store) (JWT, error) {
	cred, err := CredsCredential(SystemUser, op.SystemCreds)
	if err != nil {
		return JWT{}, fmt.Errorf("the operator's system user: %w", err)
	}
	target, err := BusTarget(m)
	if err != nil {
		return JWT{}, err
	}
	conn, err := dialSystem(ctx, target, cred)
	if err != nil {
		return JWT{}, err
	}
	var names []string
	var maxPayload int64
	for _, srv := range m.Bus.Servers {
		name, mp := serverName(ctx, m.Bus, srv, cred)
		if slices.Contains(names, name) {
			conn.Close()
			return JWT{}, fmt.Errorf("two servers of bus.servers answer as server %s: each must be a server of its own", name)
		}
		names = append(names, name)
		if mp > 0 && (maxPayload == 0 || mp < maxPayload) {
			maxPayload = mp
		}
	}
	return JWT{Operator: op, Store: store, Resolver: Resolver{Conn: conn.Conn, Servers: names, MaxPayload: maxPayload}}, nil
}

// DialJWTServer is the JWT backend of a bus of one server at t, the embedded bus: the
// operator's system user connected to it, and the server named as it names itself.
func DialJWTServer(ctx context.Context, t busclient.Target, op Operator, store *state.Store) (JWT, error) {
	cred, err := CredsCredential(SystemUser, op.SystemCreds)
	if err != nil {
		return JWT{}, fmt.Errorf("the operator's system user: %w", err)
	}
	conn, err := dialSystem(ctx, t, cred)
	if err != nil {
		return JWT{}, err
	}
	return JWT{Operator: op, Store: store, Resolver: Resolver{Conn: conn.Conn, Servers: []string{conn.ConnectedServerName()}, MaxPayload: conn.MaxPayload()}}, nil
}

// dialSystem connects as the operator's system user, reconnecting for as long as the backend
// lives.
func dialSystem(ctx context.Context, t busclient.Target, cred busclient.Credential) (*busclient.Conn, error) {
	conn, err := busclient.Dial(ctx, t, cred, nats.MaxReconnects(-1), nats.IgnoreAuthErrorAbort())
	if err != nil {
		return nil, fmt.Errorf("connecting as the operator's system user: %w", err)
	}
	return conn, nil
}

// serverName is the name srv gives itself and the max_payload it announces, or its address
// and 0 where it cannot be reached.
func serverName(ctx context.Context, b model.Bus, srv model.Server, cred busclient.Credential) (string, int64) {
	t, err := serverTarget(b, srv)
	if err != nil {
		return t.Address(), 0
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultWait)
	defer cancel()
	c, err := busclient.Dial(ctx, t, cred, nats.NoReconnect())
	if err != nil {
		return t.Address(), 0
	}
	defer c.Close()
	return c.ConnectedServerName(), c.MaxPayload()
}

// Change is the plan's change of the account's JWT ("" when none): each principal whose JWT
// is reissued with the subjects it gains and loses, marked CredentialReissue where an
// operator issued it and must give its host the new one; each removed or revoked; and what
// of meshctl's own the JWT lacks, and which servers are behind; and the hosts whose
// credentials of the file modes bus.auth: jwt supersedes, refused unless o allows reissuing.
func (p JWTPlan) Change(users map[string]state.JWTUser, o plan.Options) (plan.Change, bool) {
	if !p.Pushes() && len(p.Superseded) == 0 {
		return plan.Change{}, false
	}
	c := plan.Change{Kind: plan.KindAccounts, Name: "JWT", Action: plan.Update, Risk: plan.RiskNone}
	var why []string
	for _, r := range p.Reissue {
		u := plan.UserChange{User: r.Principal, Action: plan.Update, Credential: "rotated"}
		if r.ByHand {
			u.Credential = plan.CredentialReissue
		}
		var before Grants
		if held, ok := users[r.Principal]; ok {
			if hc, err := jwt.DecodeUserClaims(held.JWT); err == nil {
				before = UserGrants(hc)
			}
		}
		u.PublishAdded, u.PublishRemoved = setDiff(r.Grants.Publish, before.Publish), setDiff(before.Publish, r.Grants.Publish)
		u.SubscribeAdded, u.SubscribeRemoved = setDiff(r.Grants.Subscribe, before.Subscribe), setDiff(before.Subscribe, r.Grants.Subscribe)
		if r.Grants.AllowResponses != before.AllowResponses {
			u.AllowResponses = map[bool]string{true: "granted", false: "revoked"}[r.Grants.AllowResponses]
		}
		c.Users = append(c.Users, u)
		// Its connections holding the JWT it replaces are cut as the push is applied.
		c.Risk = plan.RiskDisruptive
	}
	if len(p.Reissue) > 0 {
		why = append(why, fmt.Sprintf("%d principal(s) with new grants get a new user JWT for their key, the old one revoked", len(p.Reissue)))
	}
	for _, r := range p.Remove {
		c.Users = append(c.Users, plan.UserChange{User: r.Principal, Action: plan.Delete, Credential: "revoked"})
		c.Risk = plan.RiskDisruptive
	}
	if len(p.Remove) > 0 {
		why = append(why, fmt.Sprintf("%d principal(s) the description no longer has are revoked", len(p.Remove)))
	}
	if len(p.Revoke) > 0 {
		var keys []string
		for _, r := range p.Revoke {
			keys = append(keys, r.Principal+"'s "+r.UserKey)
		}
		why = append(why, "revoking the keys of credentials revoked or replaced: "+strings.Join(keys, ", "))
	}
	if len(p.Owned) > 0 {
		why = append(why, "setting "+strings.Join(p.Owned, ", "))
	}
	if len(p.Behind) > 0 {
		why = append(why, "behind on "+strings.Join(p.Behind, ", "))
	}
	if p.Size > 0 {
		why = append(why, fmt.Sprintf("the JWT pushed holds %d revocation(s) in %d bytes, of the %d the servers take", p.Revocations, p.Size, p.Limit))
		if hc, err := jwt.DecodeAccountClaims(p.Held); err == nil {
			if err := p.TooLarge(hc.Subject); err != nil {
				c.Refused = err.Error()
			}
		}
	}
	c.Reason = strings.Join(why, "; ")
	// A host already issued its user JWT holds its new membership: only its old credential
	// is dropped.
	var hosts []string
	for _, h := range p.Superseded {
		if _, ok := users[h]; !ok {
			hosts = append(hosts, h)
		}
	}
	if len(hosts) < len(p.Superseded) {
		why := fmt.Sprintf("dropping %d credential(s) of the accounts config that bus.auth: jwt supersedes", len(p.Superseded))
		c.Reason = strings.TrimPrefix(c.Reason+"; "+why, "; ")
	}
	plan.AuthMigration{To: model.AuthJWT, Hosts: hosts}.Mark(&c, o)
	return c, true
}

// setDiff is what a has and b has not, sorted.
func setDiff(a, b []string) []string {
	var out []string
	for _, s := range sortedSet(a) {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}

// Close ends the backend's system connection.
func (j JWT) Close() {
	if j.Resolver.Conn != nil {
		j.Resolver.Conn.Close()
	}
}
