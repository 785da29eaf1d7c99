package plan

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// newAccount is the bus as a mesh first finds it after its servers changed mode: no accounts
// config of meshctl's in use yet, and none of the mesh's streams or consumers, which live in
// the account the servers no longer have; the store's holders as they were.
func newAccount(tg Target) Live { return Live{Baseline: BaselineBus, Holding: tg.Bus.Holding} }

// Changing bus.auth from jwt to a file mode while the store holds hosts' user JWTs is refused
// unless allowed: the plan names each host (not the controller, whose creds meshctl keeps),
// says that the servers leave operator mode and what the new membership carries, and
// creates the mesh's streams anew. Allowed, it is planned as any disruptive change.
func TestChangingBusAuthFromJWTIsRefusedUntilAllowed(t *testing.T) {
	t.Parallel()
	tg := authTarget(t, model.AuthPassword, map[string]string{render.ControllerUser: bcryptLike("c")})
	tg.JWTUsers = []string{"node.beta", render.ControllerUser, "alpha.shop"}

	p := Compute(tg, newAccount(tg), Options{})
	if !p.Blocked() || p.Summary().Refused != 1 {
		t.Fatalf("blocked %v, summary %+v; want the accounts change refused", p.Blocked(), p.Summary())
	}
	got := map[string]string{}
	for user, u := range accountUsers(p) {
		if u.Credential == CredentialReissue {
			got[user] = string(u.Action)
		}
	}
	if diff := cmp.Diff(map[string]string{"alpha.shop": "create", "node.beta": "create"}, got); diff != "" {
		t.Errorf("the hosts marked for a new membership (-want +got):\n%s", diff)
	}
	c := accountsChange(t, p)
	if c.Risk != RiskDisruptive || !strings.HasPrefix(c.Reason, "bus.auth changes from jwt: ") || !strings.Contains(c.Reason, "2 host(s)") ||
		!strings.Contains(c.Refused, "--allow-reissue") || !strings.Contains(c.Refused, "changing bus.auth from jwt leaves 2 host(s)") {
		t.Errorf("the accounts change does not say what leaving jwt does: %+v", c)
	}
	if !slices.ContainsFunc(p.Changes, func(c Change) bool { return c.ID() == "stream EVENTS" && c.Action == Create }) {
		t.Errorf("the mesh's streams are not created anew: %+v", p.Changes)
	}
	checkGolden(t, "testdata/constructed/auth-from-jwt-reissue", p)

	if allowed := Compute(tg, newAccount(tg), Options{AllowReissue: true}); allowed.Blocked() {
		t.Errorf("allowed, leaving jwt is still refused: %+v", accountsChange(t, allowed))
	}
	nk := authTarget(t, model.AuthNkey, nil)
	nk.JWTUsers = tg.JWTUsers
	if c := accountsChange(t, Compute(nk, newAccount(nk), Options{})); !strings.Contains(c.Reason, "need a new membership, carrying an nkey seed") {
		t.Errorf("from jwt to nkey: %q", c.Reason)
	}
	// The controller's user JWT alone is meshctl's: nothing to reissue, nothing refused.
	own := authTarget(t, model.AuthPassword, nil)
	own.JWTUsers = []string{render.ControllerUser}
	if p := Compute(own, newAccount(own), Options{}); p.Blocked() || strings.Contains(accountsChange(t, p).Reason, "jwt") {
		t.Errorf("only the controller's user JWT: %+v", accountsChange(t, p))
	}
	// The file in use is already the rendering (an apply stopped before it dropped the user
	// JWTs): the plan still says so, and refuses.
	if p := Compute(tg, LiveOf(tg), Options{}); !p.Blocked() || accountsChange(t, p).Refused == "" {
		t.Errorf("a rendered file with user JWTs left: %+v", p.Changes)
	}
}

// Changing bus.auth to jwt while the store holds hosts' credentials of the file modes is
// refused unless allowed. The change is the account JWT's (the reconcile package puts it in
// place of the accounts config's, from accounts.JWTPlan.Change), planned on servers just
// restarted in operator mode: the mesh's streams are created in the account anew.
func TestChangingBusAuthToJWTIsRefusedUntilAllowed(t *testing.T) {
	t.Parallel()
	hashes := map[string]string{render.ControllerUser: bcryptLike("c"), "alpha.shop": bcryptLike("a"), "node.beta": bcryptLike("b")}
	tg := authTarget(t, model.AuthPassword, hashes)
	hosts := FileCredentialHolders(tg.Principals(), hashes)
	if diff := cmp.Diff([]string{"alpha.shop", "node.beta"}, hosts); diff != "" {
		t.Fatalf("the hosts holding a credential of the accounts config (-want +got):\n%s", diff)
	}
	toJWT := func(o Options) *Plan {
		p := Compute(tg, newAccount(tg), o)
		p.Changes = slices.DeleteFunc(p.Changes, func(c Change) bool { return c.Kind == KindAccounts })
		p.Accounts = nil
		// The account's JWT is on the servers already (the controller's first connection
		// pushed it): the change is the migration alone.
		c := Change{Kind: KindAccounts, Name: "JWT", Action: Update, Risk: RiskNone}
		AuthMigration{To: model.AuthJWT, Hosts: hosts}.Mark(&c, o)
		p.Changes = append(p.Changes, c)
		return p
	}
	p := toJWT(Options{})
	if !p.Blocked() || p.Summary().Refused != 1 {
		t.Fatalf("blocked %v, summary %+v; want the account JWT's change refused", p.Blocked(), p.Summary())
	}
	c := accountsChange(t, p)
	if c.Risk != RiskDisruptive || !strings.HasPrefix(c.Reason, "bus.auth changes to jwt: ") || !strings.HasSuffix(c.Reason, "carrying creds (a user JWT and its nkey seed)") ||
		!strings.Contains(c.Refused, "changing bus.auth to jwt leaves 2 host(s)") {
		t.Errorf("the account JWT's change does not say what moving to jwt does: %+v", c)
	}
	if len(c.Users) != 2 || c.Users[0].User != "alpha.shop" || c.Users[1].Credential != CredentialReissue {
		t.Errorf("the hosts: %+v", c.Users)
	}
	checkGolden(t, "testdata/constructed/auth-to-jwt-reissue", p)
	if toJWT(Options{AllowReissue: true}).Blocked() {
		t.Error("allowed, moving to jwt is still refused")
	}
}

func accountsChange(tb testing.TB, p *Plan) Change {
	tb.Helper()
	for _, c := range p.Changes {
		if c.Kind == KindAccounts {
			return c
		}
	}
	tb.Fatalf("no accounts change in %+v", p.Changes)
	return Change{}
}
