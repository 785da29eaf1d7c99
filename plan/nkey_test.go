package plan

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshbus/meshctl/internal/testnats"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// authTarget is examples/quickstart's target with bus.auth set to auth, rendered with hashes.
func authTarget(tb testing.TB, auth string, hashes map[string]string) Target {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join("..", "examples", "quickstart", "mesh.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	m, err := model.Parse([]model.File{{Name: "mesh.yaml", Data: data}, {Name: "bus.yaml", Data: []byte("bus:\n  auth: " + auth + "\n")}})
	if err != nil {
		tb.Fatal(err)
	}
	return TargetOf(render.Derive(m), hashes)
}

func accountUsers(p *Plan) map[string]UserChange {
	out := map[string]UserChange{}
	for _, c := range p.Changes {
		for _, u := range c.Users {
			out[u.User] = u
		}
	}
	return out
}

// An nkey mesh plans its users by principal as a password mesh does: a converged bus plans
// nothing, and issuing, rotating and revoking an nkey reads as each, never as a user deleted
// and another created.
func TestNkeyCredentialsArePlannedByPrincipal(t *testing.T) {
	t.Parallel()
	k1, k2 := testnats.UserPublicKey(t), testnats.UserPublicKey(t)
	controller := map[string]string{render.ControllerUser: bcryptLike("c")}
	with := func(extra map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range controller {
			out[k] = v
		}
		for k, v := range extra {
			out[k] = v
		}
		return out
	}
	none := authTarget(t, model.AuthNkey, with(nil))
	issued := authTarget(t, model.AuthNkey, with(map[string]string{"alpha.shop": k1, "node.alpha": k2}))
	rotated := authTarget(t, model.AuthNkey, with(map[string]string{"alpha.shop": k2, "node.alpha": k2}))

	if p := Compute(issued, serverView(LiveOf(issued)), Options{}); !p.Empty() {
		t.Errorf("a converged nkey bus plans %d change(s)", len(p.Changes))
	}
	for name, c := range map[string]struct {
		target, live Target
		want         map[string]string
	}{
		"issued":  {issued, none, map[string]string{"alpha.shop": "issued", "node.alpha": "issued"}},
		"rotated": {rotated, issued, map[string]string{"alpha.shop": "rotated"}},
		"revoked": {none, issued, map[string]string{"alpha.shop": "revoked", "node.alpha": "revoked"}},
	} {
		p := Compute(c.target, serverView(LiveOf(c.live)), Options{})
		got := map[string]string{}
		for user, u := range accountUsers(p) {
			if u.Action != Update {
				t.Errorf("%s: user %s is planned as %s", name, user, u.Action)
			}
			got[user] = u.Credential
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s: the credentials planned (-want +got):\n%s", name, diff)
		}
		if p.Blocked() {
			t.Errorf("%s: blocked: %+v", name, p.Changes)
		}
		for _, out := range renderings(t, p) {
			if strings.Contains(out, k1) || strings.Contains(out, k2) {
				t.Errorf("%s: a plan output shows a public key", name)
			}
		}
	}
}

// An nkey mesh's rendering is laid out block by block, one per principal, as a password mesh's
// is: a plan reads only the blocks that changed (reconcile's
// TestReadingChangedNkeyUsersOnlyPlansWhatAWholeParsePlans).
func TestAnNkeyMeshsRenderingIsReadBlockByBlock(t *testing.T) {
	t.Parallel()
	base := authTarget(t, model.AuthNkey, map[string]string{"alpha.shop": testnats.UserPublicKey(t), "beta.postman": testnats.UserPublicKey(t)})
	split, ok := render.SplitAccountsConfig(base.Accounts)
	if !ok || len(split.Entries) != len(base.Bus.Principals) {
		t.Errorf("an nkey mesh's rendering is not read block by block: %v, %d blocks", ok, len(split.Entries))
	}
}

// Changing bus.auth while hosts log in is refused unless allowed: the plan names each host
// whose credential stops working, says why, and blocks; allowed, it is planned as any
// disruptive change. The same plan as a diff of two descriptions says bus.auth changes.
func TestChangingBusAuthIsRefusedWhileCredentialsAreInUse(t *testing.T) {
	t.Parallel()
	passwords := map[string]string{render.ControllerUser: bcryptLike("c"), "alpha.shop": bcryptLike("a"), "node.beta": bcryptLike("b")}
	old := authTarget(t, model.AuthPassword, passwords)
	tg := authTarget(t, model.AuthNkey, passwords)
	live := serverView(LiveOf(old))
	live.Baseline = ""

	p := Compute(tg, live, Options{})
	if !p.Blocked() || p.Summary().Refused != 1 {
		t.Fatalf("blocked %v, summary %+v; want the accounts change refused", p.Blocked(), p.Summary())
	}
	got := map[string]string{}
	for user, u := range accountUsers(p) {
		got[user] = u.Credential
	}
	if diff := cmp.Diff(map[string]string{"alpha.shop": CredentialReissue, "node.beta": CredentialReissue}, got); diff != "" {
		t.Errorf("the users planned (-want +got):\n%s", diff)
	}
	c := p.Changes[len(p.Changes)-1]
	if c.Kind != KindAccounts || c.Risk != RiskDisruptive || !strings.Contains(c.Reason, "bus.auth changes to nkey") ||
		!strings.Contains(c.Refused, "--allow-reissue") || !strings.Contains(c.Refused, "2 host(s)") {
		t.Errorf("the accounts change does not say what changing bus.auth does: %+v", c)
	}
	if n := Reissues(old.Accounts, LiveOf(old).ReadUsers, tg); n != 2 {
		t.Errorf("Reissues counts %d; want 2", n)
	}
	if diff := cmp.Diff([]string{"alpha.shop", "node.beta"}, Reissued(tg)); diff != "" {
		t.Errorf("Reissued (-want +got):\n%s", diff)
	}
	checkGolden(t, "testdata/constructed/auth-nkey-reissue", p)

	if allowed := Compute(tg, live, Options{AllowReissue: true}); allowed.Blocked() {
		t.Errorf("allowed, the change of bus.auth is still refused: %+v", allowed.Changes)
	}
	// No credential in use: said, and not refused.
	fresh := Compute(authTarget(t, model.AuthNkey, nil), serverView(LiveOf(authTarget(t, model.AuthPassword, nil))), Options{})
	if fresh.Blocked() || len(fresh.Changes) != 1 || !strings.Contains(fresh.Changes[0].Reason, "bus.auth changes to nkey") {
		t.Errorf("changing bus.auth of a mesh without credentials: %+v", fresh.Changes)
	}
	back := Compute(authTarget(t, model.AuthPassword, nil), serverView(LiveOf(authTarget(t, model.AuthNkey, nil))), Options{})
	if back.Blocked() || len(back.Changes) != 1 || !strings.Contains(back.Changes[0].Reason, "bus.auth changes from nkey") {
		t.Errorf("changing bus.auth back: %+v", back.Changes)
	}
}

// testdata/diff/auth-nkey is a pull request that changes bus.auth and nothing else: its diff
// says so, though no credential plays a part in a diff of two descriptions.
func TestDiffGoldenAuthCase(t *testing.T) {
	t.Parallel()
	const dir = "testdata/diff/auth-nkey"
	p := Compute(target(t, filepath.Join(dir, "new"), nil), LiveOf(target(t, filepath.Join(dir, "old"), nil)), Options{})
	if len(p.Changes) != 1 || p.Changes[0].Kind != KindAccounts || p.Changes[0].Reason != "bus.auth changes to nkey: every host needs a new membership, carrying an nkey seed" {
		t.Errorf("changing bus.auth plans %+v", p.Changes)
	}
}
