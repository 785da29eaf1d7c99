package host_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/host/hosttest"
	"github.com/meshbus/meshctl/wire"
)

// userJWT is a user JWT for the public key of seed, signed by a fresh account key: enough for
// what is read without a server.
func userJWT(t *testing.T, seed string) string {
	t.Helper()
	kp, err := nkeys.FromSeed([]byte(seed))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	account, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	token, err := jwt.NewUserClaims(pub).Encode(account)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// An operator-mode principal's membership carries its user JWT beside the seed, and reads back
// as it was built and printed; printed by mistake, it shows neither the seed nor the JWT.
func TestReadMembershipReadsAUserJWT(t *testing.T) {
	t.Parallel()
	seed := hosttest.UserSeed(t)
	token := userJWT(t, seed)
	want := wire.NewMembership([]string{"nats://127.0.0.1:4222"}, "", "beta.postman", seed, true).WithJWT(token)
	line, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(line), `"jwt":"`+token+`"`) || strings.Contains(string(line), "password") {
		t.Fatalf("a jwt membership prints %s", line)
	}
	got, err := host.ReadMembership(strings.NewReader(string(line)))
	if err != nil {
		t.Fatal(err)
	}
	if got.JWT != token || got.Seed != seed || got.User != want.User || got.Address != want.Address {
		t.Fatalf("read back as %#v", got)
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		if s := fmt.Sprintf(verb, got); strings.Contains(s, seed[2:12]) || strings.Contains(s, token[:20]) {
			t.Errorf("%s prints the seed or the JWT: %s", verb, s)
		}
	}
}

// A user JWT is a credential only with the seed of its subject: without a seed, with a
// password, with another key's seed, or not a user JWT at all, the membership is refused with
// what is wrong, quoting no part of a secret.
func TestReadMembershipWantsAUserJWTWithItsSeed(t *testing.T) {
	t.Parallel()
	seed, other := hosttest.UserSeed(t), hosttest.UserSeed(t)
	token := userJWT(t, seed)
	account, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	accountPub, err := account.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	accountJWT, err := jwt.NewAccountClaims(accountPub).Encode(mustOperator(t))
	if err != nil {
		t.Fatal(err)
	}
	line := func(fields string) string { return `{"address": "nats://x:1", "user": "u", ` + fields + `}` }
	for _, c := range []struct{ name, input, says string }{
		{"a JWT without its seed", line(`"jwt": "` + token + `"`), "a user JWT without its seed"},
		{"a JWT with a password", line(`"jwt": "` + token + `", "password": "` + secret + `"`), "a user JWT without its seed"},
		{"another key's seed", line(`"jwt": "` + token + `", "seed": "` + other + `"`), "is not the user JWT's subject"},
		{"not a JWT", line(`"jwt": "` + secret + `", "seed": "` + seed + `"`), "not a user JWT"},
		{"an account's JWT", line(`"jwt": "` + accountJWT + `", "seed": "` + seed + `"`), "not a user JWT"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := host.ReadMembership(strings.NewReader(c.input))
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), c.says) {
				t.Errorf("%v does not say %q", err, c.says)
			}
			for _, s := range []string{secret, seed[2:12], other[2:12]} {
				if strings.Contains(err.Error(), s) {
					t.Errorf("the error quotes a secret: %v", err)
				}
			}
		})
	}
}

func mustOperator(t *testing.T) nkeys.KeyPair {
	t.Helper()
	kp, err := nkeys.CreateOperator()
	if err != nil {
		t.Fatal(err)
	}
	return kp
}
