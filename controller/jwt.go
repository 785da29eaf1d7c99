package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
	"github.com/meshbus/meshctl/wire"
)

// In a jwt mesh (bus.auth: jwt) each principal the controller hands out — a node's own at its
// enrolment, each module instance at a declaration — is a user of the mesh's account: a fresh
// user key and a user JWT, signed by the account's user signer, granting exactly what the mesh
// derives for the principal. A new user needs no push: any server holding the account takes a
// user JWT its signer signed. The store records it as reconcile's account plan expects
// (state.JWTUser), so the next apply neither reissues nor revokes it; when the principal's
// grants change, that plan issues a new JWT for the same key and revokes the old one, and the
// controller declares the new JWT (wire.Instance.JWT) without a seed, for the agent to write
// into the membership it holds the seed of.

// jwtMesh reports whether the mesh's principals are users of its account in operator mode.
func (l *loop) jwtMesh() bool { return l.mesh != nil && l.mesh.Bus.JWT() }

// account is the mesh's account with the operator read as reconcile reads it (bus.operator's
// store, or the one meshctl keeps in the state directory): what signs the users the controller
// mints.
func (l *loop) account() (accounts.JWT, error) {
	op, err := accounts.OperatorOf(l.mesh, l.cfg.Store.Dir())
	if err != nil {
		return accounts.JWT{}, err
	}
	return accounts.JWT{Operator: op, Store: l.cfg.Store}, nil
}

// mintUser mints a fresh user of the account j for user, one of principals, and returns its
// membership (its seed and user JWT) and the user to record. The seed is in the membership
// only, which the caller seals and forgets.
func (l *loop) mintUser(j accounts.JWT, principals []render.Principal, user string) (wire.Membership, state.JWTUser, error) {
	i := slices.IndexFunc(principals, func(p render.Principal) bool { return p.User == user })
	if i < 0 {
		return wire.Membership{}, state.JWTUser{}, fmt.Errorf("the mesh derives no principal %s", user)
	}
	creds, err := j.Mint(principals[i])
	if err != nil {
		return wire.Membership{}, state.JWTUser{}, err
	}
	kp, err := jwt.ParseDecoratedUserNKey(creds.File)
	if err != nil {
		return wire.Membership{}, state.JWTUser{}, fmt.Errorf("minting user %s: %w", user, err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return wire.Membership{}, state.JWTUser{}, fmt.Errorf("minting user %s: %w", user, err)
	}
	m := host.MembershipOf(l.cfg.Target, user, string(seed), true).WithJWT(creds.JWT)
	return m, state.JWTUser{Principal: user, UserKey: creds.UserKey, JWT: creds.JWT, IssuedAt: time.Now(), Operation: state.OpDeclare}, nil
}

// renewJWT is renew in a jwt mesh: a fresh user for each of change's Mint, recorded, and the
// users of the departed dropped, their keys kept to revoke. It reports whether the account's
// JWT must change (a key to revoke: a departed user's, or the one a minted user replaced),
// which only a push makes so.
func (l *loop) renewJWT(ctx context.Context, change DeclarationChange) (map[string]wire.Membership, bool, error) {
	before, err := l.cfg.Store.JWTUsers(ctx)
	if err != nil {
		return nil, false, err
	}
	minted := map[string]wire.Membership{}
	push := false
	if len(change.Mint) > 0 {
		j, err := l.account()
		if err != nil {
			return nil, false, err
		}
		principals := render.DerivePrincipals(l.mesh, nil)
		for _, u := range change.Mint {
			m, user, err := l.mintUser(j, principals, u)
			if err != nil {
				return nil, false, err
			}
			if err := l.cfg.Store.IssueJWTUser(ctx, user); err != nil {
				return nil, false, err
			}
			minted[u] = m
			_, replaced := before[u]
			push = push || replaced
		}
	}
	if len(change.Departed) > 0 {
		had, err := l.cfg.Store.RevokeJWTUsers(ctx, change.Departed, time.Now().Unix())
		if err != nil {
			return nil, false, err
		}
		push = push || len(had) > 0
	}
	return minted, push, nil
}

// storedCredentials is every principal's credential in the store as the controller compares
// them from one pass to the next: a password's hash or an nkey's public key, and in a jwt
// mesh the user's key and its newest JWT (jwtCredential), so that a JWT reissued for the same
// key is a change to declare.
func (l *loop) storedCredentials(ctx context.Context) (map[string]string, error) {
	if !l.jwtMesh() {
		return l.cfg.Store.Hashes(ctx)
	}
	users, err := l.cfg.Store.JWTUsers(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(users))
	for p, u := range users {
		token := u.JWT
		if u.Pending != "" {
			// Issued for the same key and valid on every server: the one its host needs once
			// the push revoking the JWT before it lands.
			token = u.Pending
		}
		out[p] = jwtCredential(u.UserKey, token)
	}
	return out, nil
}

// jwtCredential is a jwt user as storedCredentials has it: its key, a space, its JWT.
func jwtCredential(key, token string) string { return key + " " + token }

// splitJWTCredential is the key and JWT of c, a jwtCredential.
func splitJWTCredential(c string) (key, token string) {
	key, token, _ = strings.Cut(c, " ")
	return key, token
}

// changeFor is ChangeOf for d, given stored, the store's credentials as storedCredentials
// reads them. In a jwt mesh (jwtMesh) each instance an agent holds the credential of is
// declared its JWT in stored, and a credential is kept while its user's key is the one
// declared last: the seed the agent holds is good for every JWT issued for that key, so a JWT
// reissued for it changes the declaration's digest and nothing else.
func changeFor(jwtMesh bool, last state.Declared, stored map[string]string, d *wire.Declaration) DeclarationChange {
	if !jwtMesh {
		return ChangeOf(last, stored, *d)
	}
	keys := make(map[string]string, len(stored))
	for p, c := range stored {
		keys[p], _ = splitJWTCredential(c)
	}
	for i := range d.Instances {
		if in := &d.Instances[i]; !in.ByHand {
			_, in.JWT = splitJWTCredential(stored[in.User])
		}
	}
	return ChangeOf(last, keys, *d)
}

// issuedByHand is the principals whose credential an operator issued by hand: of the store's
// passwords and nkeys, or in a jwt mesh (jwtMesh) of the account's users.
func issuedByHand(ctx context.Context, st *state.Store, jwtMesh bool) (map[string]bool, error) {
	if !jwtMesh {
		return st.IssuedByHand(ctx)
	}
	users, err := st.JWTUsers(ctx)
	if err != nil {
		return nil, err
	}
	byHand := map[string]bool{}
	for p, u := range users {
		if u.ByHand() {
			byHand[p] = true
		}
	}
	return byHand, nil
}
