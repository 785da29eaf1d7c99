package accounts

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/meshbus/meshctl/internal/testnats/opmode"
	"github.com/meshbus/meshctl/plan"
)

// userKeys are n fresh user public keys, each revoked at at.
func userKeys(t *testing.T, n int, at int64) map[string]int64 {
	t.Helper()
	keys := make(map[string]int64, n)
	for range n {
		_, pub := newKey(t, nkeys.CreateUser)
		keys[pub] = at
	}
	return keys
}

// TestAccountJWTSizeIsCapped holds the cap on the revocation list: an account JWT past the
// 1 MiB jwt/v2 decodes is never encoded, and a push past the servers' max_payload is refused
// before anything is sent (the resolver has no connection, so a push that got past the check
// would fail with another error). A JWT that fits is encoded and its size is what a plan shows.
func TestAccountJWTSizeIsCapped(t *testing.T) {
	t.Parallel()
	a, op := testAccount(t)
	now := time.Now()
	// About 93 bytes a revocation: 12,000 pass 1 MiB, 10,000 do not.
	if _, err := a.EncodeRevoking(op, "", now, userKeys(t, 12_000, now.Unix()-1)); !errors.Is(err, ErrJWTTooLarge) {
		t.Fatalf("12,000 revocations encoded: %v; want %v", err, ErrJWTTooLarge)
	} else {
		t.Logf("refused: %v", err)
	}
	fits, err := a.EncodeRevoking(op, "", now, userKeys(t, 10_000, now.Unix()-1))
	if err != nil {
		t.Fatalf("10,000 revocations: %v", err)
	}
	if len(fits) > jwt.MaxTokenSize || len(decodeAccount(t, fits).Revocations) != 10_000 {
		t.Fatalf("10,000 revocations encoded in %d bytes, %d of them", len(fits), len(decodeAccount(t, fits).Revocations))
	}

	small, err := a.EncodeRevoking(op, "", now, userKeys(t, 100, now.Unix()-1))
	if err != nil {
		t.Fatal(err)
	}
	r := Resolver{MaxPayload: int64(len(small)) - 1}
	if _, err := r.Push(t.Context(), small); !errors.Is(err, ErrJWTTooLarge) {
		t.Fatalf("a push one byte past max_payload: %v; want %v", err, ErrJWTTooLarge)
	} else {
		t.Logf("refused: %v", err)
	}
	if _, err := (Resolver{}).Push(t.Context(), fits); errors.Is(err, ErrJWTTooLarge) {
		t.Fatalf("a JWT within 1 MiB refused with no max_payload known: %v", err)
	}
	if got := (Resolver{MaxPayload: 4 << 20}).Limit(); got != jwt.MaxTokenSize {
		t.Errorf("the limit with a 4 MiB max_payload is %d; want jwt's %d", got, jwt.MaxTokenSize)
	}
}

// TestPushPastMaxPayloadIsRefusedBeforeSending holds the cap against servers whose
// max_payload is 16 KiB: the resolver reads it from the server it is connected to, a JWT of
// 200 revocations (about 19 KB) is refused with nothing sent on the wire, and one of 100
// (about 10 KB) is pushed and applied by every server.
func TestPushPastMaxPayloadIsRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	const maxPayload = 16 << 10
	m := startMesh(t, opmode.ClusterOptions{MaxPayload: maxPayload})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	if got := m.r.Limit(); got != maxPayload {
		t.Fatalf("the resolver's limit is %d; want the servers' max_payload %d", got, maxPayload)
	}
	watch, err := m.r.Conn.SubscribeSync("$SYS.REQ.ACCOUNT.*.CLAIMS.UPDATE")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.r.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tooLarge, err := m.acc.EncodeRevoking(m.opKey, "", now, userKeys(t, 200, now.Unix()-1))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := m.r.Push(ctx, tooLarge); !errors.Is(err, ErrJWTTooLarge) || len(res.Replies) != 0 {
		t.Fatalf("a push of %d bytes past max_payload %d: %+v, %v; want %v and nothing sent", len(tooLarge), maxPayload, res, err, ErrJWTTooLarge)
	}
	fits, err := m.acc.EncodeRevoking(m.opKey, "", now, userKeys(t, 100, now.Unix()-1))
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.r.Push(ctx, fits)
	if err == nil {
		err = res.Err()
	}
	if err != nil {
		t.Fatalf("a push of %d bytes within max_payload: %v", len(fits), err)
	}
	msg, err := watch.NextMsgWithContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(msg.Data) != fits {
		t.Fatalf("the first JWT on the wire is not the one that fits: the refused one was sent")
	}
	m.loadEverywhere(t)
	m.waitForStatus(t, ctx, fits, allCurrent)
}

// TestPlanShowsTheJWTsSizeAndRefusesOnePastTheLimit holds what a plan of a push says of the
// JWT: its revocations and bytes against the servers' limit, and a refusal, before anything
// is sent, where it would not fit.
func TestPlanShowsTheJWTsSizeAndRefusesOnePastTheLimit(t *testing.T) {
	t.Parallel()
	a, op := testAccount(t)
	held, err := a.Encode(op, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p := JWTPlan{Held: held, Revoke: []Revoke{{Principal: "one.shop", UserKey: "U…"}}, Revocations: 1, Size: 1200, Limit: 1 << 20}
	c, ok := p.Change(nil, plan.Options{})
	if !ok || c.Refused != "" || !strings.Contains(c.Reason, "1 revocation(s) in 1200 bytes, of the 1048576 the servers take") {
		t.Fatalf("a push that fits: %+v", c)
	}
	p.Size, p.Limit, p.MaxPayload = 20_000, 16<<10, 16<<10
	c, _ = p.Change(nil, plan.Options{})
	if c.Refused == "" || !strings.Contains(c.Refused, "max_payload is 16384 bytes") {
		t.Fatalf("a push past max_payload is not refused, or not said why: %+v", c)
	}
}
