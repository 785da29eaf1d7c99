package accounts

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

func newKey(t *testing.T, create func() (nkeys.KeyPair, error)) (nkeys.KeyPair, string) {
	t.Helper()
	kp, err := create()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return kp, pub
}

func testAccount(t *testing.T) (Account, nkeys.KeyPair) {
	t.Helper()
	op, _ := newKey(t, nkeys.CreateOperator)
	_, acc := newKey(t, nkeys.CreateAccount)
	return Account{Name: "MESH", PublicKey: acc, JetStream: jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}}, op
}

func decodeAccount(t *testing.T, token string) *jwt.AccountClaims {
	t.Helper()
	c, err := jwt.DecodeAccountClaims(token)
	if err != nil {
		t.Fatalf("the account JWT does not decode: %v", err)
	}
	return c
}

// TestEncodeAtIsTheLibrarysEncoding holds the encoder that sets iat to jwt/v2's own: for the
// iat the library stamped, it writes the same JWT byte for byte.
func TestEncodeAtIsTheLibrarysEncoding(t *testing.T) {
	t.Parallel()
	a, op := testAccount(t)
	_, sk := newKey(t, nkeys.CreateAccount)
	_, user := newKey(t, nkeys.CreateUser)
	claims := func() *jwt.AccountClaims {
		c := jwt.NewAccountClaims(a.PublicKey)
		c.Name = a.Name
		c.Limits.JetStreamLimits = a.JetStream
		c.SigningKeys.Add(sk)
		c.DefaultPermissions.Pub.Deny.Add(">")
		c.RevokeAt(user, time.Unix(1700000000, 0))
		return c
	}
	for range 3 { // the library reads the clock: retry the rare second that ticks between
		want, err := claims().Encode(op)
		if err != nil {
			t.Fatal(err)
		}
		iat := decodeAccount(t, want).IssuedAt
		got, err := encodeAccountAt(claims(), op, iat)
		if err != nil {
			t.Fatal(err)
		}
		if got == want {
			return
		}
		t.Logf("library:\n%s\nours:\n%s", want, got)
	}
	t.Error("encodeAccountAt does not write what jwt/v2's Encode writes for the same iat")
}

func TestEncodeKeepsIATStrictlyIncreasing(t *testing.T) {
	t.Parallel()
	a, op := testAccount(t)
	now := time.Unix(1800000000, 0)
	for _, tc := range []struct {
		name    string
		prevIAT time.Time
		want    int64
	}{
		{"previous is older", now.Add(-time.Hour), now.Unix()},
		{"previous in the same second", now.Add(900 * time.Millisecond), now.Unix() + 1},
		{"previous ahead of the clock", now.Add(time.Minute), now.Unix() + 61},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prev, err := a.Encode(op, "", tc.prevIAT)
			if err != nil {
				t.Fatal(err)
			}
			next, err := a.Encode(op, prev, now)
			if err != nil {
				t.Fatal(err)
			}
			if got := decodeAccount(t, next).IssuedAt; got != tc.want {
				t.Errorf("iat %d after a previous of %d at %d; want %d", got, decodeAccount(t, prev).IssuedAt, now.Unix(), tc.want)
			}
			if decodeAccount(t, next).ID == decodeAccount(t, prev).ID {
				t.Error("the successor has the previous JWT's ID")
			}
		})
	}
}

func TestEncodeSetsWhatTheMeshNeeds(t *testing.T) {
	t.Parallel()
	a, op := testAccount(t)
	_, sk := newKey(t, nkeys.CreateAccount)
	a.SigningKeys = []string{sk}
	token, err := a.Encode(op, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c := decodeAccount(t, token)
	opPub, _ := op.PublicKey()
	if c.Issuer != opPub || c.Subject != a.PublicKey || c.Name != "MESH" {
		t.Errorf("issuer %s, subject %s, name %q; want %s, %s, MESH", c.Issuer, c.Subject, c.Name, opPub, a.PublicKey)
	}
	if c.Limits.JetStreamLimits != a.JetStream {
		t.Errorf("JetStream limits %+v; want %+v", c.Limits.JetStreamLimits, a.JetStream)
	}
	if !c.SigningKeys.Contains(sk) {
		t.Errorf("signing keys %v; want %s", c.SigningKeys.Keys(), sk)
	}
	if !c.DefaultPermissions.Pub.Deny.Contains(">") || !c.DefaultPermissions.Sub.Deny.Contains(">") {
		t.Errorf("default permissions %+v; want publish and subscribe denied", c.DefaultPermissions)
	}
}

func TestEncodeRefuses(t *testing.T) {
	t.Parallel()
	a, op := testAccount(t)
	accKey, _ := newKey(t, nkeys.CreateAccount)
	_, otherAcc := newKey(t, nkeys.CreateAccount)
	other := a
	other.PublicKey = otherAcc
	othersJWT, err := other.Encode(op, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	noJS := a
	noJS.JetStream = jwt.JetStreamLimits{Streams: -1, Consumer: -1}
	zeroTiers := a
	zeroTiers.JetStream = jwt.JetStreamLimits{}
	zeroTiers.JetStreamTiers = jwt.JetStreamTieredLimits{"R1": {Streams: 5}, "R3": {}}
	mixed := a
	mixed.JetStreamTiers = jwt.JetStreamTieredLimits{"R3": {DiskStorage: -1}}
	for _, tc := range []struct {
		name     string
		a        Account
		signer   nkeys.KeyPair
		previous string
		wantIs   error
	}{
		{"no JetStream storage", noJS, op, "", ErrNoJetStream},
		{"tiers without storage", zeroTiers, op, "", ErrNoJetStream},
		{"tiers mixed with flat limits", mixed, op, "", nil},
		{"signed by the account's own key", a, accKey, "", ErrNotOperatorKey},
		{"the previous JWT is another account's", a, op, othersJWT, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			token, err := tc.a.Encode(tc.signer, tc.previous, time.Now())
			if err == nil {
				t.Fatalf("encoded %s", token)
			}
			t.Logf("refused: %v", err)
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("error %v; want %v", err, tc.wantIs)
			}
		})
	}
}

// TestRevocationsLastUntilTheirJWTsExpire holds pruning: a revocation is carried into every
// successor until each JWT it revokes has expired, and for ever when user JWTs never expire.
func TestRevocationsLastUntilTheirJWTsExpire(t *testing.T) {
	t.Parallel()
	a, op := testAccount(t)
	a.UserLifetime = time.Hour
	_, old := newKey(t, nkeys.CreateUser)
	_, fresh := newKey(t, nkeys.CreateUser)
	revokedAt := time.Unix(1800000000, 0)
	first, err := a.Encode(op, "", revokedAt, old)
	if err != nil {
		t.Fatal(err)
	}
	if got := decodeAccount(t, first).Revocations[old]; got != revokedAt.Unix() {
		t.Fatalf("revocation of %s at %d; want %d", old, got, revokedAt.Unix())
	}
	forever := a
	forever.UserLifetime = 0
	for _, tc := range []struct {
		name    string
		a       Account
		now     time.Time
		keepOld bool
	}{
		{"within the lifetime", a, revokedAt.Add(30 * time.Minute), true},
		{"in the last second a revoked JWT is valid", a, revokedAt.Add(time.Hour), true},
		{"after every revoked JWT expired", a, revokedAt.Add(time.Hour + time.Second), false},
		{"user JWTs that never expire", forever, revokedAt.Add(1000 * time.Hour), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, err := tc.a.Encode(op, first, tc.now, fresh)
			if err != nil {
				t.Fatal(err)
			}
			revs := decodeAccount(t, next).Revocations
			if _, kept := revs[old]; kept != tc.keepOld {
				t.Errorf("revocation of the old user kept: %v; want %v", kept, tc.keepOld)
			}
			if revs[fresh] != tc.now.Unix() {
				t.Errorf("revocation of the new user at %d; want %d", revs[fresh], tc.now.Unix())
			}
		})
	}
}

func TestPushRefusesBeforeSending(t *testing.T) {
	t.Parallel()
	a, op := testAccount(t)
	c := jwt.NewAccountClaims(a.PublicKey)
	noJS, err := c.Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	accKey, _ := newKey(t, nkeys.CreateAccount)
	selfSigned, err := jwt.NewAccountClaims(a.PublicKey).Encode(accKey)
	if err != nil {
		t.Fatal(err)
	}
	// No connection: a push that got past the checks would fail on the missing connection
	// with another error.
	var r Resolver
	for name, tc := range map[string]struct {
		token string
		want  error
	}{
		"no JetStream":        {noJS, ErrNoJetStream},
		"not operator-signed": {selfSigned, ErrNotOperatorKey},
	} {
		if _, err := r.Push(t.Context(), tc.token); !errors.Is(err, tc.want) {
			t.Errorf("%s: Push error %v; want %v", name, err, tc.want)
		}
	}
}

func TestMintUser(t *testing.T) {
	t.Parallel()
	a, _ := testAccount(t)
	sk, skPub := newKey(t, nkeys.CreateAccount)
	a.SigningKeys = []string{skPub}
	a.UserLifetime = 24 * time.Hour
	g := Grants{Publish: []string{"mesh.a"}, Subscribe: []string{"mesh.b", "_INBOX.x.>"}, AllowResponses: true}
	before := time.Now().Unix()
	creds, err := a.MintUser(sk, "one.telegram", g)
	if err != nil {
		t.Fatal(err)
	}
	c, err := jwt.DecodeUserClaims(creds.JWT)
	if err != nil {
		t.Fatal(err)
	}
	if c.Subject != creds.UserKey || c.Issuer != skPub || c.IssuerAccount != a.PublicKey || c.Name != "one.telegram" {
		t.Errorf("subject %s issuer %s issuer account %s name %q; want %s, %s, %s, one.telegram", c.Subject, c.Issuer, c.IssuerAccount, c.Name, creds.UserKey, skPub, a.PublicKey)
	}
	if fmt.Sprint(c.Pub.Allow) != "[mesh.a]" || fmt.Sprint(c.Sub.Allow) != "[mesh.b _INBOX.x.>]" || len(c.Pub.Deny)+len(c.Sub.Deny) != 0 || c.Resp == nil {
		t.Errorf("permissions %+v; want exactly the grants", c.Permissions)
	}
	if c.Expires < before+24*3600 || c.Expires > time.Now().Unix()+24*3600 {
		t.Errorf("exp %d; want a day after minting", c.Expires)
	}
	fromFile, err := jwt.ParseDecoratedJWT(creds.File)
	if err != nil || fromFile != creds.JWT {
		t.Errorf("the creds file holds JWT %q (%v); want the user's", fromFile, err)
	}
	kp, err := jwt.ParseDecoratedUserNKey(creds.File)
	if err != nil {
		t.Fatal(err)
	}
	if pub, _ := kp.PublicKey(); pub != creds.UserKey {
		t.Errorf("the creds file's seed is %s's; want %s's", pub, creds.UserKey)
	}
	seed, _ := kp.Seed()
	for _, printed := range []string{fmt.Sprint(creds), fmt.Sprintf("%+v", creds), fmt.Sprintf("%#v", creds)} {
		if strings.Contains(printed, string(seed)) || !strings.Contains(printed, creds.UserKey) {
			t.Errorf("a printed credential reads %q: want its public key and never its seed", printed)
		}
	}

	nothing, err := a.MintUser(sk, "nobody", Grants{})
	if err != nil {
		t.Fatal(err)
	}
	c, err = jwt.DecodeUserClaims(nothing.JWT)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Pub.Deny.Contains(">") || !c.Sub.Deny.Contains(">") || len(c.Pub.Allow)+len(c.Sub.Allow) != 0 || c.Resp != nil {
		t.Errorf("a user granted nothing has permissions %+v; want publish and subscribe denied", c.Permissions)
	}

	stranger, _ := newKey(t, nkeys.CreateAccount)
	if _, err := a.MintUser(stranger, "x", g); !errors.Is(err, ErrUnknownUserSigner) {
		t.Errorf("minting with a key the account does not list: %v; want %v", err, ErrUnknownUserSigner)
	}
	if _, err := a.MintUser(sk, "x", Grants{Publish: []string{"a b"}}); err == nil {
		t.Error("minted a grant of a subject with a space")
	}
}

// TestEncodeKeepsWhatTheAdminSet holds a successor of an admin's account JWT: the limits,
// tags, exports and scoped signing keys an admin set are kept, and only what meshctl owns
// changes (JetStream limits, default permissions denying everything, revocations).
func TestEncodeKeepsWhatTheAdminSet(t *testing.T) {
	t.Parallel()
	a, op := testAccount(t)
	_, scoped := newKey(t, nkeys.CreateAccount)
	_, revoked := newKey(t, nkeys.CreateUser)
	admins := jwt.NewAccountClaims(a.PublicKey)
	admins.Name = "MESH"
	admins.Limits.Conn = 500
	admins.Limits.DisallowBearer = true
	admins.Tags.Add("team:platform")
	admins.Exports.Add(&jwt.Export{Subject: "public.>", Type: jwt.Stream})
	scope := jwt.NewUserScope()
	scope.Key, scope.Role = scoped, "reader"
	scope.Template.Pub.Allow.Add("x.>")
	admins.SigningKeys.AddScopedSigner(scope)
	admins.DefaultPermissions.Pub.Allow.Add(">")
	admins.RevokeAt(revoked, time.Unix(1700000000, 0))
	previous, err := admins.Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	token, err := a.Encode(op, previous, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c := decodeAccount(t, token)
	if c.Limits.Conn != 500 || !c.Limits.DisallowBearer || !c.Tags.Contains("team:platform") || len(c.Exports) != 1 {
		t.Errorf("the admin's limits, tags or exports are lost: %+v, %v, %v", c.Limits.NatsLimits, c.Tags, c.Exports)
	}
	if s, ok := c.SigningKeys.GetScope(scoped); !ok || s == nil {
		t.Errorf("the admin's scoped signing key is lost: %v", c.SigningKeys)
	}
	if c.Limits.JetStreamLimits != a.JetStream {
		t.Errorf("JetStream %+v; want %+v", c.Limits.JetStreamLimits, a.JetStream)
	}
	if len(c.DefaultPermissions.Pub.Allow) != 0 || !c.DefaultPermissions.Pub.Deny.Contains(">") || !c.DefaultPermissions.Sub.Deny.Contains(">") {
		t.Errorf("default permissions %+v; want everything denied", c.DefaultPermissions)
	}
	if c.Revocations[revoked] != 1700000000 {
		t.Errorf("revocations %v; want the admin's kept", c.Revocations)
	}
}

// TestIssueUserReplacesAJWTForTheSameKey holds a reissue: the new JWT is for the same key,
// grants what it is given, and is issued strictly after the JWT it replaces, so a revocation
// at its iat-1 stops the old one and not the new one.
func TestIssueUserReplacesAJWTForTheSameKey(t *testing.T) {
	t.Parallel()
	a, _ := testAccount(t)
	sk, skPub := newKey(t, nkeys.CreateAccount)
	a.SigningKeys = []string{skPub}
	old, err := a.MintUser(sk, "one.shop", Grants{Publish: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	oldClaims, err := jwt.DecodeUserClaims(old.JWT)
	if err != nil {
		t.Fatal(err)
	}
	want := Grants{Publish: []string{"b", "a"}, Subscribe: []string{"c q"}, AllowResponses: true}
	// The clock has not passed the old JWT's second: the new one is one past it.
	token, err := a.IssueUser(sk, "one.shop", old.UserKey, want, time.Unix(oldClaims.IssuedAt, 0), oldClaims.IssuedAt)
	if err != nil {
		t.Fatal(err)
	}
	c, err := jwt.DecodeUserClaims(token)
	if err != nil {
		t.Fatal(err)
	}
	if c.Subject != old.UserKey || c.IssuedAt != oldClaims.IssuedAt+1 || c.IssuerAccount != a.PublicKey {
		t.Errorf("subject %s iat %d issuer account %s; want %s, %d, %s", c.Subject, c.IssuedAt, c.IssuerAccount, old.UserKey, oldClaims.IssuedAt+1, a.PublicKey)
	}
	if got := UserGrants(c); !got.Equal(want) {
		t.Errorf("grants %+v; want %+v", got, want)
	}
	if UserGrants(oldClaims).Equal(want) {
		t.Error("the old JWT's grants read as the new ones")
	}
	revs := jwt.RevocationList{}
	revs.Revoke(old.UserKey, time.Unix(c.IssuedAt-1, 0))
	if !revs.IsRevoked(old.UserKey, time.Unix(oldClaims.IssuedAt, 0)) || revs.IsRevoked(old.UserKey, time.Unix(c.IssuedAt, 0)) {
		t.Error("a revocation at the new iat-1 does not stop the old JWT alone")
	}
}
