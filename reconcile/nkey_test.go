package reconcile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/bus/bustest"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/render"
)

// withNkeys is a mesh whose hosts log in with nkeys: its bus section (added when it has none)
// says bus.auth: nkey.
func withNkeys(yaml string) string {
	if strings.Contains(yaml, "bus:\n") {
		return strings.Replace(yaml, "bus:\n", "bus:\n  auth: nkey\n", 1)
	}
	return "bus:\n  auth: nkey\n" + yaml
}

// mintNkeys issues nkeys, remembering the seeds as secrets no output may show.
func (f *fixture) mintNkeys(ctx context.Context, users ...string) map[string]string {
	f.t.Helper()
	seeds, err := f.store.MintNkeys(ctx, users, "test")
	if err != nil {
		f.t.Fatal(err)
	}
	for _, s := range seeds {
		f.secrets = append(f.secrets, s)
	}
	return seeds
}

// nkeyHost is a host logged in with its seed, as the mesh's client libraries do: its own
// inbox prefix, the server's nonce signed with the seed. Violations go to refused.
type nkeyHost struct {
	nc      *nats.Conn
	refused chan error
}

// dialNkey logs in to url alone (no other server of a cluster) with seed as user.
func dialNkey(ctx context.Context, url, user, seed string) (*nkeyHost, error) {
	kp, err := nkeys.FromSeed([]byte(seed))
	if err != nil {
		return nil, err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, err
	}
	h := &nkeyHost{refused: make(chan error, 16)}
	timeout := 5 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	h.nc, err = nats.Connect(url, nats.Nkey(pub, kp.Sign), nats.CustomInboxPrefix(render.Inbox(user)),
		nats.NoReconnect(), nats.IgnoreDiscoveredServers(), nats.Timeout(timeout),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case h.refused <- err:
			default:
			}
		}))
	if err != nil {
		return nil, err
	}
	return h, nil
}

// nkeyLogin logs in to url with seed and hangs up; nil means the server let it in.
func nkeyLogin(ctx context.Context, url, user, seed string) error {
	h, err := dialNkey(ctx, url, user, seed)
	if err != nil {
		return err
	}
	h.nc.Close()
	return nil
}

// seedRefused reports whether a login with a seed was refused: the server names no such key,
// or names none at all (it asks for no signature when its config holds no nkey user).
func seedRefused(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrNkeysNotSupported)
}

// waitRefused waits for the server to refuse what names subject.
func (h *nkeyHost) waitRefused(ctx context.Context, subject string) error {
	for {
		select {
		case err := <-h.refused:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), subject) {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("no refusal of %s: %w", subject, ctx.Err())
		}
	}
}

// The life of an nkey credential on a live bus, as a password's: issued, the host logs in
// with its seed; rotated, the old seed is refused and the new one let in; revoked, refused.
// The accounts config holds public keys and never a seed, and the bus converges after each.
func TestAnNkeyCredentialIsIssuedRotatedAndRevokedLive(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, withNkeys(quickMesh))
	s := f.connect(ctx)
	f.mustApply(ctx, s)
	url := s.Target.URL

	seeds := f.mintNkeys(ctx, "alpha.shop", "node.alpha")
	res := f.mustApply(ctx, s)
	issued := map[string]string{}
	for _, c := range res.Plan.Changes {
		for _, u := range c.Users {
			issued[u.User] = u.Credential
		}
	}
	if issued["alpha.shop"] != "issued" || issued["node.alpha"] != "issued" {
		t.Errorf("the plan does not say the nkeys are issued: %v", issued)
	}
	f.mustConverge(ctx, s)
	for user, seed := range seeds {
		if err := nkeyLogin(ctx, url, user, seed); err != nil {
			t.Fatalf("%s cannot log in with its seed: %v", user, err)
		}
	}
	conf, err := os.ReadFile(s.Accounts.Path)
	if err != nil {
		t.Fatal(err)
	}
	hashes, _ := f.store.Hashes(ctx)
	for user, seed := range seeds {
		if strings.Contains(string(conf), seed) || !strings.Contains(string(conf), `{ nkey: "`+hashes[user]+`"`) {
			t.Errorf("the accounts config does not hold %s's public key, or holds its seed", user)
		}
	}

	rotated := f.mintNkeys(ctx, "alpha.shop")
	f.mustApply(ctx, s)
	if err := nkeyLogin(ctx, url, "alpha.shop", seeds["alpha.shop"]); !seedRefused(err) {
		t.Errorf("the rotated seed still logs in: %v", err)
	}
	if err := nkeyLogin(ctx, url, "alpha.shop", rotated["alpha.shop"]); err != nil {
		t.Errorf("the new seed does not log in: %v", err)
	}

	if _, err := f.store.Revoke(ctx, "alpha.shop"); err != nil {
		t.Fatal(err)
	}
	f.mustApply(ctx, s)
	if err := nkeyLogin(ctx, url, "alpha.shop", rotated["alpha.shop"]); !seedRefused(err) {
		t.Errorf("the revoked seed still logs in: %v", err)
	}
	if err := nkeyLogin(ctx, url, "node.alpha", seeds["node.alpha"]); err != nil {
		t.Errorf("revoking one nkey locked out another: %v", err)
	}
	f.mustConverge(ctx, s)
}

// probe is what a host tries, and whether its grants allow it.
type probe struct {
	what    string
	allowed bool
	try     func(ctx context.Context, nc *nats.Conn) error // for an allowed probe, nil once it worked
	subject string                                         // what a refusal names
}

// hostProbes are alpha.shop's tries in quickMesh: what it is granted and what it is not.
var hostProbes = []probe{
	{what: "publish its own event to EVENTS and hear the PubAck at its inbox", allowed: true, try: func(ctx context.Context, nc *nats.Conn) error {
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		_, err = js.Publish(ctx, "mesh.mod.shop.event.order.placed", []byte("an order"))
		return err
	}},
	{what: "send work to the seat it sends to", allowed: true, try: func(ctx context.Context, nc *nats.Conn) error {
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		_, err = js.Publish(ctx, "mesh.seat.mailer.accept.send", []byte("a letter"))
		return err
	}},
	{what: "publish the seat's event, which only its holder may", subject: "mesh.seat.mailer.event.sent",
		try: func(_ context.Context, nc *nats.Conn) error { return nc.Publish("mesh.seat.mailer.event.sent", nil) }},
	{what: "hear another principal's inbox", subject: "_INBOX.beta.postman.>",
		try: func(_ context.Context, nc *nats.Conn) error {
			_, err := nc.SubscribeSync("_INBOX.beta.postman.>")
			return err
		}},
	{what: "ask the JetStream API about a stream", subject: "$JS.API.STREAM.INFO.EVENTS",
		try: func(_ context.Context, nc *nats.Conn) error { return nc.Publish("$JS.API.STREAM.INFO.EVENTS", nil) }},
	{what: "read the store kept on the bus", subject: render.StateSubjects,
		try: func(_ context.Context, nc *nats.Conn) error {
			_, err := nc.SubscribeSync(render.StateSubjects)
			return err
		}},
}

// An nkey host gets exactly what the same host gets with a password: each grant works, and
// everything not granted is refused, on a live bus, for both kinds of user.
func TestAnNkeyHostIsGrantedWhatAPasswordHostIs(t *testing.T) {
	t.Parallel()
	for _, auth := range []string{model.AuthPassword, model.AuthNkey} {
		t.Run(auth, func(t *testing.T) {
			t.Parallel()
			// Its own deadline, started once it runs: a parallel subtest waits for its turn
			// after its parent returned, and a deadline made by the parent would pass meanwhile.
			ctx := testContext(t)
			yaml := quickMesh
			if auth == model.AuthNkey {
				yaml = withNkeys(quickMesh)
			}
			f := newFixture(t, yaml)
			s := f.connect(ctx)
			var h *nkeyHost
			if auth == model.AuthNkey {
				seed := f.mintNkeys(ctx, "alpha.shop")["alpha.shop"]
				f.mustApply(ctx, s)
				var err error
				if h, err = dialNkey(ctx, s.Target.URL, "alpha.shop", seed); err != nil {
					t.Fatal(err)
				}
			} else {
				pw := f.mint(ctx, "alpha.shop")["alpha.shop"]
				f.mustApply(ctx, s)
				h = &nkeyHost{refused: make(chan error, 16)}
				var err error
				h.nc, err = nats.Connect(s.Target.URL, nats.UserInfo("alpha.shop", pw), nats.CustomInboxPrefix(render.Inbox("alpha.shop")),
					nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
						select {
						case h.refused <- err:
						default:
						}
					}))
				if err != nil {
					t.Fatal(err)
				}
			}
			defer h.nc.Close()
			for _, p := range hostProbes {
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err := p.try(pctx, h.nc)
				if !p.allowed && err == nil {
					err = h.waitRefused(pctx, p.subject)
					if err != nil {
						err = fmt.Errorf("not refused: %w", err)
					}
				}
				cancel()
				if err != nil {
					t.Errorf("%s: %s: %v", auth, p.what, err)
				}
			}
		})
	}
}

// Changing bus.auth while hosts log in is refused until the operator allows it; allowed, the
// credentials of the old kind stop working and are revoked, so that none comes back when
// bus.auth is changed back, and hosts issued the new kind log in.
func TestChangingBusAuthIsRefusedUntilAllowed(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, quickMesh)
	s := f.connect(ctx)
	pw := f.mint(ctx, "alpha.shop", "beta.postman")
	f.mustApply(ctx, s)
	url := s.Target.URL

	f.write(withNkeys(quickMesh))
	if err := CheckAuth(ctx, f.mesh(), f.store); !errors.Is(err, accounts.ErrAuthChange) {
		t.Errorf("a credential could be issued beside the pending change of bus.auth: %v", err)
	}
	if _, err := SyncAccounts(ctx, f.mesh(), f.store); !errors.Is(err, accounts.ErrAuthChange) {
		t.Errorf("rewriting the accounts config without a plan carried the change of bus.auth: %v", err)
	}
	if _, _, err := f.apply(ctx, s, RunOptions{}); !errors.Is(err, ErrBlocked) {
		t.Fatalf("changing bus.auth with credentials in use was not refused: %v", err)
	}
	if err := login(ctx, s.Target, "alpha.shop", pw["alpha.shop"]); err != nil {
		t.Fatalf("a refused change of bus.auth locked alpha.shop out: %v", err)
	}

	res, _, err := f.apply(ctx, s, RunOptions{AllowReissue: true})
	if err != nil {
		t.Fatalf("an allowed change of bus.auth: %v", err)
	}
	reissued := 0
	for _, c := range res.Plan.Changes {
		for _, u := range c.Users {
			if u.Credential == plan.CredentialReissue {
				reissued++
			}
		}
	}
	if reissued != 2 {
		t.Errorf("the plan says %d credential(s) need a new membership; want 2", reissued)
	}
	if err := login(ctx, s.Target, "alpha.shop", pw["alpha.shop"]); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("alpha.shop's password still logs in after bus.auth became nkey: %v", err)
	}
	hashes, _ := f.store.Hashes(ctx)
	if _, ok := hashes["alpha.shop"]; ok {
		t.Error("the password the change of bus.auth locked out is still stored")
	}
	f.mustConverge(ctx, s)
	if err := CheckAuth(ctx, f.mesh(), f.store); err != nil {
		t.Errorf("once bus.auth is applied, issuing is still refused: %v", err)
	}

	seed := f.mintNkeys(ctx, "alpha.shop")["alpha.shop"]
	f.mustApply(ctx, s)
	if err := nkeyLogin(ctx, url, "alpha.shop", seed); err != nil {
		t.Fatalf("alpha.shop cannot log in with its new seed: %v", err)
	}

	// Back to passwords: the nkey goes, and beta.postman's password, never reissued, does not
	// come back.
	f.write(quickMesh)
	if _, _, err := f.apply(ctx, s, RunOptions{}); !errors.Is(err, ErrBlocked) {
		t.Fatalf("changing bus.auth back with an nkey in use was not refused: %v", err)
	}
	if _, _, err := f.apply(ctx, s, RunOptions{AllowReissue: true}); err != nil {
		t.Fatal(err)
	}
	if err := nkeyLogin(ctx, url, "alpha.shop", seed); !seedRefused(err) {
		t.Errorf("alpha.shop's seed still logs in after bus.auth became password again: %v", err)
	}
	if err := login(ctx, s.Target, "beta.postman", pw["beta.postman"]); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("beta.postman's old password came back with bus.auth: %v", err)
	}
	f.mustConverge(ctx, s)
}

// An nkey mesh on a cluster: each server's file rolls in turn and each is proven serving it,
// then an nkey issued is let in by every server alone, and revoked, refused by every one.
func TestAnNkeyMeshOnAThreeServerCluster(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	c := bustest.StartTestCluster(t, 3)
	f := newFixture(t, withNkeys(clusterMesh(c)))
	s := f.connect(ctx)
	f.mustApply(ctx, s)
	f.mustConverge(ctx, s)

	seed := f.mintNkeys(ctx, "alpha.shop")["alpha.shop"]
	before := configTimes(t, c)
	f.mustApply(ctx, s)
	for i, at := range configTimes(t, c) {
		if !at.After(before[i]) {
			t.Errorf("server %s did not reload the file carrying the nkey", c.Servers[i].Name)
		}
	}
	eachServerNkey(t, ctx, c.Servers, "alpha.shop", seed, true)
	f.mustConverge(ctx, s)

	if _, err := f.store.Revoke(ctx, "alpha.shop"); err != nil {
		t.Fatal(err)
	}
	f.mustApply(ctx, s)
	eachServerNkey(t, ctx, c.Servers, "alpha.shop", seed, false)
}

// eachServerNkey waits until every server given, alone, lets user in with seed (admits) or
// refuses it, and fails naming the first that does not: a reload by signal is done after it
// returns.
func eachServerNkey(t *testing.T, ctx context.Context, servers []*bustest.TestClusterServer, user, seed string, admits bool) {
	t.Helper()
	for _, srv := range servers {
		testwait.Until(t, admitting(srv.Name, user, admits)+" by its seed", func() error {
			return admitted(nkeyLogin(ctx, srv.URL, user, seed), admits, seedRefused)
		})
	}
}
