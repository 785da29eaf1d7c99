package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/host/hosttest"
)

// An nkey principal's membership carries a seed in place of the password, and reads back as
// it was printed: no password key, the seed untouched.
func TestReadMembershipReadsASeed(t *testing.T) {
	t.Parallel()
	seed := hosttest.UserSeed(t)
	want := host.Membership{Address: "nats://127.0.0.1:4222", User: "beta.postman", Seed: seed}
	line, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(line), "password") {
		t.Fatalf("a seed membership prints a password field: %s", line)
	}
	got, err := host.ReadMembership(strings.NewReader(string(line)))
	if err != nil {
		t.Fatal(err)
	}
	if got.Seed != seed || got.Password != "" || got.User != want.User || got.Address != want.Address {
		t.Fatalf("read back as %#v", got)
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		if s := fmt.Sprintf(verb, got); strings.Contains(s, seed) || strings.Contains(s, seed[2:12]) {
			t.Errorf("%s prints the seed: %s", verb, s)
		}
	}
}

// A membership carries exactly one secret, and a seed must be a user's. Each refusal says what
// is wrong and quotes no part of either secret.
func TestReadMembershipWantsOneSecretAndAUserSeed(t *testing.T) {
	t.Parallel()
	seed := hosttest.UserSeed(t)
	account, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	accountSeed, err := account.Seed()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, input, says string }{
		{"neither", `{"address": "nats://x:1", "user": "u"}`, "no password or seed"},
		{"both", `{"address": "nats://x:1", "user": "u", "password": "` + secret + `", "seed": "` + seed + `"}`, "both a password and a seed"},
		{"cut short", `{"address": "nats://x:1", "user": "u", "seed": "` + seed[:len(seed)-4] + `"}`, "not an nkey user seed"},
		{"not a seed", `{"address": "nats://x:1", "user": "u", "seed": "` + secret + `"}`, "not an nkey user seed"},
		{"an account's seed", `{"address": "nats://x:1", "user": "u", "seed": "` + string(accountSeed) + `"}`, "not an nkey user seed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := host.ReadMembership(strings.NewReader(c.input))
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), c.says) {
				t.Errorf("%v does not say %q", err, c.says)
			}
			for _, s := range []string{secret, seed[2:12], string(accountSeed[2:12])} {
				if strings.Contains(err.Error(), s) {
					t.Errorf("the error quotes a secret: %v", err)
				}
			}
		})
	}
}

// A host joins an nkey user's bus with the membership's seed: the server lets it in as that
// user, with that user's grants (a publish acknowledged, another refused by name), and refuses
// another seed. No error quotes a seed.
func TestAHostJoinsWithASeed(t *testing.T) {
	t.Parallel()
	const granted = "mesh.mod.shop.event.order.placed"
	b := hosttest.StartNkey(t, "alpha.shop", granted)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	line, err := json.Marshal(b.Membership())
	if err != nil {
		t.Fatal(err)
	}
	m, err := host.ReadMembership(strings.NewReader(string(line)))
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.Join(ctx, m)
	if err != nil {
		t.Fatalf("joining with the seed: %v", err)
	}
	defer h.Close()
	if ack, err := h.Publish(ctx, granted, []byte("order-1")); err != nil || ack.Stream != "NKEYTEST" {
		t.Fatalf("publishing what alpha.shop is granted: %v, %v", ack, err)
	}
	_, err = h.Publish(ctx, "mesh.mod.shop.event.other", nil)
	var refused *busclient.PermissionError
	if !errors.As(err, &refused) || refused.User != "alpha.shop" || refused.Subject != "mesh.mod.shop.event.other" {
		t.Fatalf("publishing what alpha.shop is not granted: %v", err)
	}

	other := m
	other.Seed = hosttest.UserSeed(t)
	_, err = host.Join(ctx, other)
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("another user's seed: got %v, want an authorization error", err)
	}
	for _, s := range []string{b.Seed, other.Seed} {
		if strings.Contains(err.Error(), s[2:12]) {
			t.Errorf("the error quotes a seed: %v", err)
		}
	}
}
