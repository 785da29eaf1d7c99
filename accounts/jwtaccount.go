package accounts

import (
	"crypto/sha512"
	"encoding/base32"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// ErrNoJetStream is an account JWT without JetStream storage. The server switches JetStream
// off for an account whose JWT sets neither memory nor disk storage, and a push of one stops
// every stream of the mesh, so none is encoded or pushed.
var ErrNoJetStream = errors.New("the account JWT sets no JetStream storage limit (memory or disk; -1 is unlimited), which would stop the mesh's streams")

// ErrNotOperatorKey is a signer of an account JWT that is not an operator key. The servers
// trust an account JWT only when the operator or one of its signing keys signed it; one signed
// by anything else is still stored and answered 200 by every server, and applied by none.
var ErrNotOperatorKey = errors.New("an account JWT must be signed by the operator or one of its signing keys")

// ErrJWTTooLarge is an account JWT longer than the servers take: jwt/v2 refuses to decode a
// token past 1 MiB (jwt.MaxTokenSize), and a push is one message, which may not pass the
// servers' max_payload. A revocation adds about 93 bytes, and with user JWTs that never
// expire each removed principal's stays in the list for ever, so a long-lived mesh reaches
// the limit; none is encoded or pushed past it.
var ErrJWTTooLarge = errors.New("the account JWT is too large for the servers")

// TooLarge is the error of an account JWT of size bytes, carrying revocations, that does not
// fit limit bytes (the least of jwt.MaxTokenSize and the servers' max_payload, maxPayload; 0
// where no server was asked), or nil when it fits. It says what shortens the list, and only
// what is true of the servers and of meshctl.
func TooLarge(account string, size, revocations int, limit, maxPayload int64) error {
	if int64(size) <= limit {
		return nil
	}
	of := fmt.Sprintf("an account JWT may not pass %d bytes", jwt.MaxTokenSize)
	if maxPayload > 0 && maxPayload < jwt.MaxTokenSize {
		of = fmt.Sprintf("the servers' max_payload is %d bytes", maxPayload)
	}
	return fmt.Errorf("account %s: %w: it would be %d bytes with %d revocation(s), and %s. "+
		"Each revocation (a principal removed, a credential replaced, grants changed) stays until every user JWT it revokes has expired: for ever where they do not expire. "+
		"Raise max_payload where it is below 1 MiB, or move the mesh to a fresh account and issue every host anew; "+
		"the servers also refuse every user signed by a key the account's JWT no longer lists, so a new signing key for the users would make the revocations of the old key's users unneeded, which meshctl does not do yet",
		account, ErrJWTTooLarge, size, revocations, of)
}

// Account is the mesh's account as its JWT states it.
type Account struct {
	// Name is the account's name tag in the JWT.
	Name string
	// PublicKey is the account's public nkey (A…): the JWT's subject and the account's name
	// to the servers.
	PublicKey string
	// JetStream is the account's JetStream limits; JetStreamTiers, when set, replaces it
	// with limits per replication tier ("R1", "R3"). One of them must set memory or disk
	// storage.
	JetStream      jwt.JetStreamLimits
	JetStreamTiers jwt.JetStreamTieredLimits
	// SigningKeys are account signing keys (public, A…) that may sign the account's users
	// besides the account's own key.
	SigningKeys []string
	// UserLifetime is how long a user JWT minted for the account stays valid; zero is for
	// ever. A revocation is kept until every JWT it revokes has expired, so with zero it is
	// kept for ever. Lowering it while revocations remain would drop them too early.
	UserLifetime time.Duration
}

// Encode signs the account's JWT with signer, an operator key, as the successor of previous
// (the JWT the servers hold, or "" for the first), revoking the users of revoke (public keys,
// or jwt.All) as of now. Its `iat` is now, or one second past previous's when the clock has
// not passed it; previous's revocations are carried over unless every JWT they revoke has
// expired.
func (a Account) Encode(signer nkeys.KeyPair, previous string, now time.Time, revoke ...string) (string, error) {
	at := map[string]int64{}
	for _, key := range revoke {
		at[key] = now.Unix()
	}
	return a.EncodeRevoking(signer, previous, now, at)
}

// EncodeRevoking is Encode with each key of revoke revoked at its own time (Unix seconds): a
// user JWT issued at or before that time stops working, one issued after it works. A user
// given a new JWT for the same key (iat t) is revoked at t-1, so that its older JWTs stop.
//
// The successor starts from previous whole: what an admin set in the account's JWT (limits,
// imports and exports, tags, scoped signing keys) is kept. meshctl owns only its JetStream
// limits, the signing keys it adds, the revocations and the default permissions.
func (a Account) EncodeRevoking(signer nkeys.KeyPair, previous string, now time.Time, revoke map[string]int64) (string, error) {
	token, revocations, err := a.successor(signer, previous, now, revoke)
	if err != nil {
		return "", err
	}
	if err := TooLarge(a.PublicKey, len(token), revocations, jwt.MaxTokenSize, 0); err != nil {
		return "", fmt.Errorf("encoding the account JWT: %w", err)
	}
	return token, nil
}

// successor is EncodeRevoking without the check of its size, and the number of revocations
// the JWT carries: what a plan shows of the JWT a push would carry, even one too large.
func (a Account) successor(signer nkeys.KeyPair, previous string, now time.Time, revoke map[string]int64) (string, int, error) {
	if !nkeys.IsValidPublicAccountKey(a.PublicKey) {
		return "", 0, fmt.Errorf("encoding the account JWT: %q is not an account public key", a.PublicKey)
	}
	if err := operatorKey(signer); err != nil {
		return "", 0, fmt.Errorf("encoding the account JWT of %s: %w", a.PublicKey, err)
	}
	c := jwt.NewAccountClaims(a.PublicKey)
	var prevIAT int64
	if previous != "" {
		prev, err := jwt.DecodeAccountClaims(previous)
		if err != nil {
			return "", 0, fmt.Errorf("encoding the account JWT of %s: reading the JWT it replaces: %w", a.PublicKey, err)
		}
		if prev.Subject != a.PublicKey {
			return "", 0, fmt.Errorf("encoding the account JWT of %s: the JWT it replaces is account %s's", a.PublicKey, prev.Subject)
		}
		prevIAT = prev.IssuedAt
		revs := prev.Revocations
		c = prev
		c.Revocations = jwt.RevocationList{}
		for key, at := range revs {
			if !a.revocationExpired(at, now) {
				c.Revocations[key] = at
			}
		}
	}
	if a.Name != "" {
		c.Name = a.Name
	}
	c.Limits.JetStreamLimits = a.JetStream
	c.Limits.JetStreamTieredLimits = a.JetStreamTiers
	for _, k := range a.SigningKeys {
		if !c.SigningKeys.Contains(k) {
			c.SigningKeys.Add(k)
		}
	}
	// A user JWT that carries no permission of its own gets the account's defaults: none,
	// on a bus where every principal publishes and subscribes exactly what it declares.
	c.DefaultPermissions = jwt.Permissions{}
	c.DefaultPermissions.Pub.Deny.Add(">")
	c.DefaultPermissions.Sub.Deny.Add(">")
	keys := slices.Sorted(maps.Keys(revoke))
	for _, key := range keys {
		if key != jwt.All && !nkeys.IsValidPublicUserKey(key) {
			return "", 0, fmt.Errorf("encoding the account JWT of %s: revoking %q, which is not a user public key", a.PublicKey, key)
		}
		c.RevokeAt(key, time.Unix(revoke[key], 0))
	}
	if err := checkAccountClaims(c); err != nil {
		return "", 0, fmt.Errorf("encoding the account JWT of %s: %w", a.PublicKey, err)
	}
	iat := now.Unix()
	if iat <= prevIAT {
		iat = prevIAT + 1
	}
	token, err := encodeAccountAt(c, signer, iat)
	return token, len(c.Revocations), err
}

// revocationExpired reports whether every user JWT a revocation made at `at` revokes has
// expired by now: each was issued at or before `at` and lived UserLifetime at most, and a
// JWT is valid through the second its `exp` names.
func (a Account) revocationExpired(at int64, now time.Time) bool {
	if a.UserLifetime <= 0 {
		return false
	}
	return now.Unix() > at+lifetimeSeconds(a.UserLifetime)
}

func lifetimeSeconds(d time.Duration) int64 { return int64(math.Ceil(d.Seconds())) }

// checkAccountClaims refuses an account JWT the servers would refuse, or one that would stop
// the mesh's JetStream.
func checkAccountClaims(c *jwt.AccountClaims) error {
	if !c.Limits.IsJSEnabled() {
		return ErrNoJetStream
	}
	// Time checks count: a server does not apply an account JWT that has expired or is not
	// yet valid.
	vr := jwt.CreateValidationResults()
	c.Validate(vr)
	var problems []error
	for _, issue := range vr.Issues {
		if issue.Blocking || issue.TimeCheck {
			problems = append(problems, errors.New(issue.Description))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("the account JWT is invalid: %w", errors.Join(problems...))
	}
	return nil
}

func operatorKey(kp nkeys.KeyPair) error {
	if kp == nil {
		return ErrNotOperatorKey
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return fmt.Errorf("reading the signing key: %w", err)
	}
	if !nkeys.IsValidPublicOperatorKey(pub) {
		return ErrNotOperatorKey
	}
	return nil
}

// encodeAccountAt writes and signs the JWT of c as jwt/v2's Encode does, but with the `iat`
// given: Encode always stamps the clock's second, which a push in the same second as the last
// would tie. The result is decoded again, so a JWT the library would not read never leaves,
// except one past jwt.MaxTokenSize, which the caller refuses by its size.
func encodeAccountAt(c *jwt.AccountClaims, signer nkeys.KeyPair, iat int64) (string, error) {
	c.Type = jwt.AccountClaim
	c.Version = 2 // jwt/v2's claim version
	token, err := encodeAt(&c.ClaimsData, c, signer, iat)
	if err != nil {
		return "", fmt.Errorf("encoding the account JWT: %w", err)
	}
	if len(token) > jwt.MaxTokenSize {
		// No library decodes it: its size is what the caller says it by (TooLarge).
		return token, nil
	}
	back, err := jwt.DecodeAccountClaims(token)
	if err != nil {
		return "", fmt.Errorf("encoding the account JWT: it does not decode: %w", err)
	}
	if back.IssuedAt != iat || back.ID != c.ID {
		return "", fmt.Errorf("encoding the account JWT: it decodes with iat %d and ID %s, not %d and %s", back.IssuedAt, back.ID, iat, c.ID)
	}
	return token, nil
}

// encodeAt writes and signs claims, whose common fields are data, as jwt/v2's Encode does,
// with the iat given; the caller has set the claims' type and version, and decodes the JWT
// back.
func encodeAt(data *jwt.ClaimsData, claims any, signer nkeys.KeyPair, iat int64) (string, error) {
	issuer, err := signer.PublicKey()
	if err != nil {
		return "", err
	}
	data.Issuer = issuer
	data.IssuedAt = iat
	// The ID is the hash of the claims' common fields with no ID, as the library makes it:
	// the servers compare JWTs by it.
	data.ID = ""
	common, err := json.Marshal(data)
	if err != nil {
		return "", err
	}
	sum := sha512.Sum512_256(common)
	data.ID = base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:])
	header, err := json.Marshal(jwt.Header{Type: jwt.TokenTypeJwt, Algorithm: jwt.AlgorithmNkey})
	if err != nil {
		return "", err
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	b64 := base64.RawURLEncoding
	toSign := b64.EncodeToString(header) + "." + b64.EncodeToString(payload)
	sig, err := signer.Sign([]byte(toSign))
	if err != nil {
		return "", fmt.Errorf("signing: %w", err)
	}
	return toSign + "." + b64.EncodeToString(sig), nil
}

// checkPushable refuses, before anything is sent, an account JWT that would do harm: one that
// does not decode, is not an account's, was not signed by an operator key, sets no JetStream
// storage, or is longer than limit bytes (TooLarge).
func checkPushable(accountJWT string, limit, maxPayload int64) (*jwt.AccountClaims, error) {
	c, err := jwt.DecodeAccountClaims(accountJWT)
	if errors.Is(err, jwt.ErrTokenTooLarge) {
		return nil, fmt.Errorf("pushing the account JWT: %w", TooLarge("(unread: the JWT does not decode)", len(accountJWT), 0, limit, maxPayload))
	}
	if err != nil {
		return nil, fmt.Errorf("reading the account JWT: %w", err)
	}
	if !nkeys.IsValidPublicOperatorKey(c.Issuer) {
		return nil, fmt.Errorf("pushing the account JWT of %s, issued by %s: %w", c.Subject, c.Issuer, ErrNotOperatorKey)
	}
	if err := checkAccountClaims(c); err != nil {
		return nil, fmt.Errorf("pushing the account JWT of %s: %w", c.Subject, err)
	}
	if err := TooLarge(c.Subject, len(accountJWT), len(c.Revocations), limit, maxPayload); err != nil {
		return nil, fmt.Errorf("pushing the account JWT: %w", err)
	}
	return c, nil
}
