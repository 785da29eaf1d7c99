package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/host/hosttest"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/wire"
)

// An operator-mode principal's membership carries its user JWT beside the seed, and reads back
// as it was built and printed; printed by mistake, it shows neither the seed nor the JWT.
func TestReadMembershipReadsAUserJWT(t *testing.T) {
	t.Parallel()
	seed := hosttest.UserSeed(t)
	token := hosttest.UserJWT(t, seed)
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
	token := hosttest.UserJWT(t, seed)
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

// grantsTo is what a test user of an operator-mode bus may do: publish and hear subjects, and
// hear its own inbox.
func grantsTo(user string, subjects ...string) accounts.Grants {
	return accounts.Grants{Publish: subjects, Subscribe: append([]string{render.Inbox(user) + ".>"}, subjects...)}
}

// roundTrip has h hear subject and send on it, and waits for what it sent.
func roundTrip(ctx context.Context, h *host.Host, subject string) error {
	heard := make(chan []byte, 1)
	sub, err := h.Subscribe(ctx, subject, func(m *nats.Msg) {
		select {
		case heard <- m.Data:
		default:
		}
	})
	if err != nil {
		return err
	}
	defer unsubscribe(h, sub)
	tok := token(subject)
	if err := h.Send(ctx, subject, tok); err != nil {
		return err
	}
	select {
	case got := <-heard:
		if string(got) != string(tok) {
			return fmt.Errorf("heard %q on %s, not %q", got, subject, tok)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("nothing heard on %s: %w", subject, ctx.Err())
	}
}

// wantRefused fails the test unless err is the server refusing user a publish to subject.
func wantRefused(t *testing.T, err error, user, subject string) {
	t.Helper()
	var v *busclient.PermissionError
	if !errors.As(err, &v) || *v != (busclient.PermissionError{User: user, Op: busclient.OpPublish, Subject: subject}) {
		t.Fatalf("got %v, want %s refused a publish to %s", err, user, subject)
	}
}

// A host joins an operator-mode bus with the user JWT and seed its membership carries: the
// server lets it in with exactly the JWT's grants, and refuses the JWT with another key's seed.
// No error quotes a seed.
func TestAHostJoinsWithAUserJWT(t *testing.T) {
	t.Parallel()
	const user = "alpha.shop"
	granted, other := render.ModuleEvent("shop", "order.placed"), render.ModuleEvent("shop", "other")
	a := hosttest.StartJWTAccount(t, 3)
	creds := a.Mint(t, user, grantsTo(user, granted))
	line, err := json.Marshal(a.Membership(t, user, creds))
	if err != nil {
		t.Fatal(err)
	}
	m, err := host.ReadMembership(strings.NewReader(string(line)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit)
	defer cancel()
	h, err := host.Join(ctx, m)
	if err != nil {
		t.Fatalf("joining with the user JWT: %v", err)
	}
	defer h.Close()
	if err := roundTrip(ctx, h, granted); err != nil {
		t.Fatalf("what %s is granted: %v", user, err)
	}
	wantRefused(t, h.Send(ctx, other, nil), user, other)

	// The JWT names its key: with the seed of another, the server refuses the login.
	stranger := m
	stranger.Seed = hosttest.UserSeed(t)
	_, err = host.Join(ctx, stranger)
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("the JWT with another key's seed: got %v, want an authorization error", err)
	}
	for _, s := range []string{m.Seed, stranger.Seed} {
		if strings.Contains(err.Error(), s[2:12]) {
			t.Errorf("the error quotes a seed: %v", err)
		}
	}
}

// writeAtomically writes m to path as the agent writes a module instance's membership: whole,
// renamed over the old one, so that a reader never sees half of it.
func writeAtomically(t *testing.T, path string, m host.Membership) {
	t.Helper()
	line, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	next := path + ".next"
	if err := os.WriteFile(next, line, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, path); err != nil {
		t.Fatal(err)
	}
}

// A host joined from its membership file takes a new credential written over that file at its
// next reconnect, with no restart: its permissions changed, the old user JWT is revoked, which
// disconnects it, and until the new credential is written each reconnect is refused and tried
// again (nats.go gives up after two such refusals unless told not to). Once it is written, the
// host reconnects with it and does what only the new JWT grants.
func TestAHostJoinedFromAFileTakesItsNewCredentialAtTheNextReconnect(t *testing.T) {
	t.Parallel()
	const user = "alpha.shop"
	first, second := render.ModuleEvent("shop", "order.placed"), render.ModuleEvent("shop", "order.shipped")
	a := hosttest.StartJWTAccount(t, 3)
	old := a.Mint(t, user, grantsTo(user, first))
	path := filepath.Join(t.TempDir(), user+".json")
	writeAtomically(t, path, a.Membership(t, user, old))

	refused := make(chan error, 64)
	reconnected := make(chan struct{}, 1)
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit)
	defer cancel()
	h, err := host.JoinFile(ctx, path,
		nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond), nats.ReconnectJitter(0, 0),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrAuthorization) {
				select {
				case refused <- err:
				default:
				}
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) {
			select {
			case reconnected <- struct{}{}:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("joining from %s: %v", path, err)
	}
	defer h.Close()
	if err := roundTrip(ctx, h, first); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, h.Send(ctx, second, nil), user, second)

	// The old credential is revoked before the new one is written: the host is disconnected,
	// and its reconnects are refused until the file holds the new one.
	// Twice on each server: nats.go gives up at the second refusal by one server.
	if err := a.Push(ctx, old.UserKey); err != nil {
		t.Fatal(err)
	}
	for n := range 2 * len(a.Cluster.Servers) {
		select {
		case <-refused:
		case <-ctx.Done():
			t.Fatalf("the host's reconnects with the revoked credential: %d refused, then none; closed: %v", n, h.Conn().IsClosed())
		}
	}
	if h.Conn().IsClosed() {
		t.Fatal("the host gave up after the revoked credential was refused")
	}
	renewed := a.Mint(t, user, grantsTo(user, first, second))
	writeAtomically(t, path, a.Membership(t, user, renewed))
	select {
	case <-reconnected:
	case <-ctx.Done():
		t.Fatalf("the host did not reconnect with the credential written over its file: %v", h.Conn().LastError())
	}
	if err := roundTrip(ctx, h, second); err != nil {
		t.Fatalf("after the reconnect, what only the new credential grants: %v", err)
	}
}
