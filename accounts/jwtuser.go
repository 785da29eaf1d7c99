package accounts

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/meshbus/meshctl/render"
)

// ErrUnknownUserSigner is a key that may not sign the account's users: neither the account's
// own key nor one of the signing keys its JWT lists. The servers refuse a login with a user
// JWT it signed.
var ErrUnknownUserSigner = errors.New("a user JWT must be signed by the account's key or one of its signing keys")

// Grants are what a user may do: the subjects it may publish and subscribe to, and whether it
// may publish to the reply subject of a request it received (allow_responses).
type Grants struct {
	Publish        []string
	Subscribe      []string
	AllowResponses bool
}

// GrantsOf is what p, a principal of the mesh, may do as a user of its account: its grants
// as the accounts file writes them, a subscribe grant with a queue as "<subject> <queue>",
// which a user JWT reads the same way.
func GrantsOf(p render.Principal) Grants {
	g := Grants{AllowResponses: p.AllowResponses}
	for _, gr := range p.Publish {
		g.Publish = append(g.Publish, gr.String())
	}
	for _, gr := range p.Subscribe {
		g.Subscribe = append(g.Subscribe, gr.String())
	}
	return g
}

// check refuses a grant that is not a subject (a subscribe grant may name a queue after one
// space): the JWT would carry it and the servers would read it some other way.
func (g Grants) check() error {
	for _, s := range slices.Concat(g.Publish, g.Subscribe) {
		if s == "" || strings.ContainsAny(s, "\t\r\n") {
			return fmt.Errorf("%q is not a subject", s)
		}
	}
	for _, s := range g.Publish {
		if strings.Contains(s, " ") {
			return fmt.Errorf("%q is not a subject", s)
		}
	}
	for _, s := range g.Subscribe {
		if subject, queue, found := strings.Cut(s, " "); subject == "" || found && (queue == "" || strings.Contains(queue, " ")) {
			return fmt.Errorf("%q is not a subject, or a subject and a queue", s)
		}
	}
	return nil
}

// Creds is a user's credential: its public key, its user JWT and the creds file that holds
// both with the user's nkey seed. It prints as its public key, never its seed.
type Creds struct {
	UserKey string
	JWT     string
	// File is the creds file (jwt.FormatUserConfig): it holds the seed.
	File []byte
}

// String names the credential by its user's public key.
func (c Creds) String() string { return "creds of " + c.UserKey }

// GoString is String: a %#v must not print the seed either.
func (c Creds) GoString() string { return c.String() }

// MintUser makes a credential for a user of the account named name: a fresh user nkey and a
// user JWT signed by signer (the account's key or one of its signing keys) that grants exactly
// g, valid for the account's UserLifetime.
func (a Account) MintUser(signer nkeys.KeyPair, name string, g Grants) (Creds, error) {
	user, err := nkeys.CreateUser()
	if err != nil {
		return Creds{}, fmt.Errorf("minting user %s: %w", name, err)
	}
	pub, err := user.PublicKey()
	if err != nil {
		return Creds{}, fmt.Errorf("minting user %s: %w", name, err)
	}
	seed, err := user.Seed()
	if err != nil {
		return Creds{}, fmt.Errorf("minting user %s: %w", name, err)
	}
	token, err := a.IssueUser(signer, name, pub, g, time.Now(), 0)
	if err != nil {
		return Creds{}, err
	}
	file, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		return Creds{}, fmt.Errorf("minting user %s: %w", name, err)
	}
	return Creds{UserKey: pub, JWT: token, File: file}, nil
}

// IssueUser signs a user JWT for the user key userKey, named name, that grants exactly g: a
// new JWT for a key a host already holds the seed of. Its iat is now, or one second past
// after (the iat of the JWT it replaces) when the clock has not passed it, so that a
// revocation at iat-1 stops the JWT replaced and not this one.
func (a Account) IssueUser(signer nkeys.KeyPair, name, userKey string, g Grants, now time.Time, after int64) (string, error) {
	issuer, err := signer.PublicKey()
	if err != nil {
		return "", fmt.Errorf("issuing user %s: reading the signing key: %w", name, err)
	}
	if issuer != a.PublicKey && !slices.Contains(a.SigningKeys, issuer) {
		return "", fmt.Errorf("issuing user %s of account %s with key %s: %w", name, a.PublicKey, issuer, ErrUnknownUserSigner)
	}
	if !nkeys.IsValidPublicUserKey(userKey) {
		return "", fmt.Errorf("issuing user %s: %q is not a user public key", name, userKey)
	}
	if err := g.check(); err != nil {
		return "", fmt.Errorf("issuing user %s: %w", name, err)
	}
	c := jwt.NewUserClaims(userKey)
	c.Name = name
	if issuer != a.PublicKey {
		c.IssuerAccount = a.PublicKey
	}
	// In a user JWT an empty allow list allows every subject: a user granted nothing is
	// denied everything instead.
	c.Pub.Allow.Add(g.Publish...)
	if len(g.Publish) == 0 {
		c.Pub.Deny.Add(">")
	}
	c.Sub.Allow.Add(g.Subscribe...)
	if len(g.Subscribe) == 0 {
		c.Sub.Deny.Add(">")
	}
	if g.AllowResponses {
		// Zero values are the server's defaults: one response within two minutes, as
		// `allow_responses: true` in a config file.
		c.Resp = &jwt.ResponsePermission{}
	}
	iat := max(now.Unix(), after+1)
	if a.UserLifetime > 0 {
		c.Expires = iat + lifetimeSeconds(a.UserLifetime)
	}
	c.Type = jwt.UserClaim
	c.Version = 2 // jwt/v2's claim version
	token, err := encodeAt(&c.ClaimsData, c, signer, iat)
	if err != nil {
		return "", fmt.Errorf("issuing user %s: %w", name, err)
	}
	if _, err := jwt.DecodeUserClaims(token); err != nil {
		return "", fmt.Errorf("issuing user %s: the JWT does not decode: %w", name, err)
	}
	return token, nil
}

// UserGrants is what a user JWT grants, as GrantsOf states a principal's: the allow lists
// sorted, and a direction denied whole (a user granted nothing in it) as no grant.
func UserGrants(c *jwt.UserClaims) Grants {
	return Grants{Publish: slices.Sorted(slices.Values(c.Pub.Allow)), Subscribe: slices.Sorted(slices.Values(c.Sub.Allow)), AllowResponses: c.Resp != nil}
}

// Equal reports whether g and o grant the same, in any order.
func (g Grants) Equal(o Grants) bool {
	return g.AllowResponses == o.AllowResponses &&
		slices.Equal(sortedSet(g.Publish), sortedSet(o.Publish)) && slices.Equal(sortedSet(g.Subscribe), sortedSet(o.Subscribe))
}

func sortedSet(s []string) []string { return slices.Compact(slices.Sorted(slices.Values(s))) }
