package accounts

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/jwt/v2"

	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// JWT is the mesh's account in operator mode (bus.auth: jwt), the second backend beside File:
// its config is the account's JWT, pushed to every server's resolver over the operator's
// system account and proven by reading it back on each server named. No file is written and
// no server reloads. Its principals are users of the account; the store keeps each one's key
// and the JWT last issued (state.JWTUser).
type JWT struct {
	Operator Operator
	Resolver Resolver
	Store    *state.Store
	// OnReissue, when set, is told each principal's new JWT before the push that revokes
	// its old one: where meshctl holds the principal's seed itself (the controller's creds),
	// it writes the new JWT first, so that its connection cut by the push logs in again.
	OnReissue func(ctx context.Context, principal, token string) error
}

// NotOnServers is what JWTPlan.Owned says when no server holds the account's JWT yet.
const NotOnServers = "the account's JWT is on no server yet"

// Reissue is a principal whose grants changed: a new JWT for the same key, the old one
// revoked at the new one's iat-1.
type Reissue struct {
	Principal, UserKey string
	Grants             Grants
	// After is the iat of the JWT in force, which the new one must pass.
	After int64
	// ByHand: an operator issued the credential, and must give its host the new JWT.
	ByHand bool
}

// Revoke is a user key to revoke as of At (Unix seconds), of principal. At is left out of a
// plan's JSON: for a principal removed it is the time of planning, and a saved plan is the
// same plan a second later.
type Revoke struct {
	Principal, UserKey string
	At                 int64 `json:"-"`
}

// JWTPlan is what one reconcile changes in the account: a pure reading of the principals,
// the store's users and the JWT the servers hold.
type JWTPlan struct {
	// Held is the JWT the change starts from: the newest one a server applies, or the
	// store's before any push. Behind names the servers that do not apply it.
	Held   string
	Behind []string
	// Reissue are principals whose grants changed; Remove the users of principals the
	// description no longer has, their keys to revoke; Revoke the keys the store keeps to
	// revoke (a credential revoked or replaced) that the servers' JWT does not revoke yet.
	Reissue []Reissue
	Remove  []Revoke
	Revoke  []Revoke
	// Promote and Drop are principals whose pending JWT the servers' JWT shows in force or
	// not; Settled the keys the store keeps to revoke that the servers' JWT revokes.
	Promote, Drop, Settled []string
	// Owned says what of meshctl's own the account's JWT lacks (JetStream limits, default
	// permissions denying everything, the signing key of its users, the JWT itself on the
	// servers).
	Owned []string
	// Revocations and Size are what the JWT the plan pushes would carry: its revocations and
	// its length in bytes, encoded at the time of planning. Limit is the longest the servers
	// take (Resolver.Limit), and MaxPayload their least max_payload (0 where unknown). A plan
	// that pushes nothing leaves them 0.
	Revocations int
	Size        int
	Limit       int64
	MaxPayload  int64
	// Superseded are the hosts the store holds a credential of the file modes for (a bcrypt
	// hash or an nkey public key, plan.FileCredentialHolders): bus.auth was password or nkey,
	// and on servers in operator mode none of them logs in. An apply drops them once the
	// account's JWT is proven on every server, so that none comes back should bus.auth
	// return to a file mode; each host needs a new membership (plan.AuthMigration).
	Superseded []string
}

// TooLarge is the error an apply of p would meet: its JWT past the servers' limit (see the
// package's TooLarge), or nil.
func (p JWTPlan) TooLarge(account string) error {
	if p.Size == 0 {
		return nil
	}
	return TooLarge(account, p.Size, p.Revocations, p.Limit, p.MaxPayload)
}

// Pushes reports whether the plan pushes the account's JWT: a change, or a server to bring
// level.
func (p JWTPlan) Pushes() bool {
	return len(p.Reissue) > 0 || len(p.Remove) > 0 || len(p.Revoke) > 0 || len(p.Owned) > 0 || len(p.Behind) > 0
}

// Plan reads what the account needs: what the servers hold (Resolver.Held), and what the
// store and the principals (render's, every principal of the mesh) say. It changes nothing.
func (j JWT) Plan(ctx context.Context, principals []render.Principal) (JWTPlan, error) {
	held, st, err := j.Resolver.Held(ctx, j.Operator.Account.PublicKey)
	if err != nil {
		return JWTPlan{}, err
	}
	onServers := held != ""
	if !onServers {
		held = j.Operator.AccountJWT
	}
	users, err := j.Store.JWTUsers(ctx)
	if err != nil {
		return JWTPlan{}, err
	}
	revoked, err := j.Store.JWTRevokedKeys(ctx)
	if err != nil {
		return JWTPlan{}, err
	}
	p, err := PlanJWT(j.Operator, principals, users, revoked, held)
	if err != nil {
		return JWTPlan{}, err
	}
	hashes, err := j.Store.Hashes(ctx)
	if err != nil {
		return JWTPlan{}, err
	}
	p.Superseded = plan.FileCredentialHolders(principals, hashes)
	if onServers {
		p.Behind = st.NotCurrent()
	} else {
		p.Owned = append(p.Owned, NotOnServers)
		p.Behind = slices.Clone(j.Resolver.Servers)
	}
	if p.Pushes() {
		err = j.measure(&p, time.Now())
	}
	return p, err
}

// measure sets p's Revocations and Size from the JWT its apply would push, encoded now: each
// key of a reissued principal revoked a second before now, as its new JWT is issued now. The
// numbers of a Unix time are as long either way, so the size is the push's to the byte but
// for a clock past 2286.
func (j JWT) measure(p *JWTPlan, now time.Time) error {
	a, err := j.account(p.Held)
	if err != nil {
		return err
	}
	revoke := map[string]int64{}
	for _, r := range p.Reissue {
		revoke[r.UserKey] = max(now.Unix(), r.After+1) - 1
	}
	for _, r := range append(slices.Clone(p.Remove), p.Revoke...) {
		revoke[r.UserKey] = max(revoke[r.UserKey], r.At)
	}
	token, n, err := a.successor(j.Operator.Signer, p.Held, now, revoke)
	if err != nil {
		return err
	}
	p.Revocations, p.Size = n, len(token)
	p.Limit, p.MaxPayload = j.Resolver.Limit(), j.Resolver.maxPayload()
	return nil
}

// PlanJWT is Plan's pure part: the change from held, the account's JWT the change starts
// from, given the store's users and keys to revoke and the principals the mesh derives.
func PlanJWT(op Operator, principals []render.Principal, users map[string]state.JWTUser, revoked []state.JWTRevoked, held string) (JWTPlan, error) {
	hc, err := jwt.DecodeAccountClaims(held)
	if err != nil {
		return JWTPlan{}, fmt.Errorf("reading account %s's JWT: %w", op.Account.PublicKey, err)
	}
	if hc.Subject != op.Account.PublicKey {
		return JWTPlan{}, fmt.Errorf("the JWT held for account %s is account %s's", op.Account.PublicKey, hc.Subject)
	}
	p := JWTPlan{Held: held}
	revokedAt := func(key string) (int64, bool) { at, ok := hc.Revocations[key]; return at, ok }

	inForce := map[string]*jwt.UserClaims{}
	// newest is the latest iat of a JWT issued for each principal's key: revoking the key
	// at or after it stops every one.
	newest := map[string]int64{}
	for _, name := range sortedKeys(users) {
		u := users[name]
		token := u.JWT
		if u.Pending != "" {
			pc, err := jwt.DecodeUserClaims(u.Pending)
			if err == nil {
				newest[name] = pc.IssuedAt
			}
			if at, ok := revokedAt(u.UserKey); err == nil && ok && at >= pc.IssuedAt-1 {
				// The push revoking its predecessor reached the servers: it is in force.
				p.Promote = append(p.Promote, name)
				token = u.Pending
			} else {
				p.Drop = append(p.Drop, name)
			}
		}
		c, err := jwt.DecodeUserClaims(token)
		if err != nil {
			return JWTPlan{}, fmt.Errorf("reading the JWT the store holds for %s: %w", name, err)
		}
		inForce[name] = c
		newest[name] = max(newest[name], c.IssuedAt)
	}
	for _, r := range revoked {
		if at, ok := revokedAt(r.UserKey); ok && at >= r.At {
			p.Settled = append(p.Settled, r.UserKey)
		} else {
			p.Revoke = append(p.Revoke, Revoke{Principal: r.Principal, UserKey: r.UserKey, At: r.At})
		}
	}
	desired := map[string]render.Principal{}
	for _, pr := range principals {
		if pr.Kind != render.KindSystem {
			desired[pr.User] = pr
		}
	}
	now := time.Now().Unix()
	for _, name := range sortedKeys(users) {
		u, c := users[name], inForce[name]
		pr, ok := desired[name]
		if !ok {
			p.Remove = append(p.Remove, Revoke{Principal: name, UserKey: u.UserKey, At: max(now, newest[name])})
			continue
		}
		if g := GrantsOf(pr); !UserGrants(c).Equal(g) {
			p.Reissue = append(p.Reissue, Reissue{Principal: name, UserKey: u.UserKey, Grants: g, After: c.IssuedAt, ByHand: u.ByHand()})
		}
	}
	if !hc.Limits.IsJSEnabled() {
		p.Owned = append(p.Owned, "JetStream limits")
	}
	if !deniesEverything(hc.DefaultPermissions) {
		p.Owned = append(p.Owned, "default permissions denying everything")
	}
	if signer, err := op.UserSigner.PublicKey(); err == nil && signer != hc.Subject && !hc.SigningKeys.Contains(signer) {
		p.Owned = append(p.Owned, "the signing key of its users, "+signer)
	}
	return p, nil
}

func deniesEverything(perm jwt.Permissions) bool {
	return len(perm.Pub.Allow) == 0 && len(perm.Sub.Allow) == 0 && perm.Pub.Deny.Contains(">") && perm.Sub.Deny.Contains(">")
}

// account is the account to encode as the successor of held: as held states it, with the
// key signing its users listed and UserLifetime the operator's.
func (j JWT) account(held string) (Account, error) {
	hc, err := jwt.DecodeAccountClaims(held)
	if err != nil {
		return Account{}, err
	}
	a := AccountOf(hc)
	a.UserLifetime = j.Operator.Account.UserLifetime
	if signer, err := j.Operator.UserSigner.PublicKey(); err == nil && signer != a.PublicKey && !slices.Contains(a.SigningKeys, signer) {
		a.SigningKeys = append(a.SigningKeys, signer)
	}
	return a, nil
}

// JWTResult is what Apply did: the JWT pushed ("" when none was) and every server's answer,
// and each server's JWT read back.
type JWTResult struct {
	Pushed string
	Push   PushResult
	Status Status
}

// Apply does p: it settles what the servers' JWT already shows, issues each reissued
// principal's new JWT (pending in the store), drops each revoked principal's user (its key
// kept to revoke), encodes the successor of p.Held with the revocations, pushes it and
// proves it on every server named. Only then are the new JWTs in force and the revocations
// settled in the store. A push that a server did not take is an ErrPushIncomplete naming
// it; the store then holds what the next run settles from the servers' JWT.
//
// A change of the store its copy on the bus did not take (state.ErrReplicaBehind) stands in
// the store, and the copy is sent whole at its next change kept: Apply goes on, and returns
// that error once the rest is done.
func (j JWT) Apply(ctx context.Context, p JWTPlan) (JWTResult, error) {
	var behind error
	stored := func(err error) error {
		if errors.Is(err, state.ErrReplicaBehind) {
			behind = err
			return nil
		}
		return err
	}
	res, err := j.apply(ctx, p, stored)
	if err != nil {
		return res, err
	}
	return res, behind
}

// apply is Apply, with stored told the error of each change of the store: nil from it goes on.
func (j JWT) apply(ctx context.Context, p JWTPlan, stored func(error) error) (JWTResult, error) {
	if err := stored(j.Store.SettleJWT(ctx, p.Promote, p.Drop, p.Settled)); err != nil {
		return JWTResult{}, err
	}
	if !p.Pushes() {
		// Every server named applies the JWT the plan read (no server behind).
		return JWTResult{}, j.dropSuperseded(ctx, p)
	}
	a, err := j.account(p.Held)
	if err != nil {
		return JWTResult{}, err
	}
	now := time.Now()
	revoke := map[string]int64{}
	var promote, removed, settle []string
	for _, r := range p.Reissue {
		token, err := a.IssueUser(j.Operator.UserSigner, r.Principal, r.UserKey, r.Grants, now, r.After)
		if err != nil {
			return JWTResult{}, err
		}
		c, err := jwt.DecodeUserClaims(token)
		if err != nil {
			return JWTResult{}, err
		}
		if err := stored(j.Store.SetJWTPending(ctx, r.Principal, token)); err != nil {
			return JWTResult{}, err
		}
		if j.OnReissue != nil {
			if err := j.OnReissue(ctx, r.Principal, token); err != nil {
				return JWTResult{}, err
			}
		}
		revoke[r.UserKey] = c.IssuedAt - 1
		promote = append(promote, r.Principal)
	}
	removedAt := now.Unix()
	for _, r := range p.Remove {
		revoke[r.UserKey] = max(revoke[r.UserKey], r.At)
		settle = append(settle, r.UserKey)
		removed = append(removed, r.Principal)
		removedAt = max(removedAt, r.At)
	}
	// Kept to revoke at least as late as this push revokes them, should it not be proven.
	if _, err := j.Store.RevokeJWTUsers(ctx, removed, removedAt); stored(err) != nil {
		return JWTResult{}, err
	}
	for _, r := range p.Revoke {
		revoke[r.UserKey] = max(revoke[r.UserKey], r.At)
		settle = append(settle, r.UserKey)
	}
	token := p.Held
	if len(revoke) > 0 || len(p.Owned) > 0 {
		if token, err = a.EncodeRevoking(j.Operator.Signer, p.Held, now, revoke); err != nil {
			return JWTResult{}, err
		}
	}
	res := JWTResult{Pushed: token}
	res.Push, err = j.Resolver.Push(ctx, token)
	if err != nil {
		return res, err
	}
	if perr := res.Push.Err(); perr != nil {
		// The servers named did not store it: the proof would name them again.
		return res, perr
	}
	if res.Status, err = j.Resolver.Prove(ctx, token); err != nil {
		return res, err
	}
	if err := stored(j.Store.SettleJWT(ctx, promote, nil, settle)); err != nil {
		return res, err
	}
	return res, j.dropSuperseded(ctx, p)
}

// dropSuperseded revokes, in the store, the credentials of the file modes that p found
// superseded by bus.auth: jwt, once the account's JWT is proven on every server: the
// servers run in operator mode with the mesh's account, where none of them logs in.
func (j JWT) dropSuperseded(ctx context.Context, p JWTPlan) error {
	if len(p.Superseded) == 0 {
		return nil
	}
	err := j.Store.RevokeAll(ctx, p.Superseded)
	if err != nil && !errors.Is(err, state.ErrReplicaBehind) {
		return fmt.Errorf("dropping the %d credential(s) of the accounts config bus.auth: jwt supersedes: %w", len(p.Superseded), err)
	}
	return nil
}

// Sync plans and applies the account for principals: what the credentials commands end
// with. It leaves the credentials of the file modes (Superseded) to an apply, whose plan
// refuses to drop them unless the operator allows it.
func (j JWT) Sync(ctx context.Context, principals []render.Principal) (JWTPlan, JWTResult, error) {
	p, err := j.Plan(ctx, principals)
	if err != nil {
		return p, JWTResult{}, err
	}
	p.Superseded = nil
	res, err := j.Apply(ctx, p)
	return p, res, err
}

// Issue mints a fresh credential for principal p and records it as p's user; a key p held
// before is kept to revoke, which the next Sync pushes. The creds hold the seed: the caller
// delivers them once.
func (j JWT) Issue(ctx context.Context, p render.Principal, operation string) (Creds, error) {
	creds, err := j.Mint(p)
	if err != nil {
		return Creds{}, err
	}
	err = j.Store.IssueJWTUser(ctx, state.JWTUser{Principal: p.User, UserKey: creds.UserKey, JWT: creds.JWT, IssuedAt: time.Now(), Operation: operation})
	return creds, err
}

// Mint makes a fresh credential for principal p, granting exactly its grants, and records
// nothing: for a caller that records it in a transaction of its own (a node's enrolment).
func (j JWT) Mint(p render.Principal) (Creds, error) {
	a, err := j.account(j.Operator.AccountJWT)
	if err != nil {
		return Creds{}, err
	}
	return a.MintUser(j.Operator.UserSigner, p.User, GrantsOf(p))
}

// RevokePrincipals drops principals' users, their keys kept to revoke; the next Sync pushes
// the revocation. It reports the principals that had one.
func (j JWT) RevokePrincipals(ctx context.Context, principals []string) ([]string, error) {
	return j.Store.RevokeJWTUsers(ctx, principals, time.Now().Unix())
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
