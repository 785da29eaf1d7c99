package accounts

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshbus/meshctl/bench/meshgen"
	"github.com/meshbus/meshctl/internal/testnats"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/render"
)

// The plan reads the config in use through the server's parser (ReadServedUsers), the part of
// it that differs from the rendering only; these tests hold the two together.

// planUsers is the accounts change of target's plan against the accounts config inUse, read by
// the server's parser; ok is false when no accounts change is planned.
func planUsers(target plan.Target, inUse []byte) (c plan.Change, ok bool) {
	p := plan.Compute(target, plan.Live{Accounts: inUse, AccountsKnown: true, ReadUsers: ReadServedUsers}, plan.Options{})
	for _, c := range p.Changes {
		if c.Kind == plan.KindAccounts {
			return c, true
		}
	}
	return plan.Change{}, false
}

// plansAsAWholeParse plans target against inUse reading only the users whose text changed,
// and again with a comment before the config, which makes its layout unrecognised so the
// whole config is parsed; it fails t unless both plan the same users at the same risk.
func plansAsAWholeParse(t *testing.T, target plan.Target, inUse []byte) (got, want plan.Change) {
	t.Helper()
	got, gotOK := planUsers(target, inUse)
	want, wantOK := planUsers(target, append([]byte("# edited\n"), inUse...))
	if !gotOK || !wantOK {
		t.Fatalf("planned a change: %v, with a whole parse: %v; every case differs from the rendering", gotOK, wantOK)
	}
	if d := cmp.Diff(want.Users, got.Users); d != "" || want.Risk != got.Risk {
		t.Errorf("the users planned differ from a whole parse's (-whole +changed only):\n%s", d)
	}
	return got, want
}

// Reading only the users whose text changed must plan exactly what parsing the whole
// config in use plans. A comment before the config makes its layout unrecognised, so the
// whole config is parsed: that is the reference.
func TestReadingChangedUsersOnlyPlansWhatAWholeParsePlans(t *testing.T) {
	t.Parallel()
	g := meshgen.Scaled(500)
	base := generatedTarget(t, g, nil)
	touched := g
	touched.Touched = 5
	someHashes := map[string]string{}
	for i, u := range base.Bus.Users() {
		if i%7 == 0 {
			someHashes[u] = "$2a$04$abcdefghijklmnopqrstuu5Ltm8kM2bVNRl9hH8v3Yw1RsF7QWzQy"
		}
	}
	user := base.Bus.Users()[3]
	cases := map[string]struct {
		target plan.Target
		inUse  []byte
	}{
		"five modules touched":     {generatedTarget(t, touched, nil), base.Accounts},
		"credentials issued":       {generatedTarget(t, g, someHashes), base.Accounts},
		"credentials revoked":      {base, generatedTarget(t, g, someHashes).Accounts},
		"a user re-spaced by hand": {base, bytes.Replace(base.Accounts, []byte(`"`+user+`", password`), []byte(`"`+user+`",  password`), 1)},
		"a grant added by hand":    {base, bytes.Replace(base.Accounts, []byte(`"_INBOX.`+user+`.>"`), []byte(`"_INBOX.`+user+`.>", "extra.>"`), 1)},
		"a user removed":           {generatedTarget(t, touched, nil), removeUser(t, base.Accounts, user)},
		"a user the mesh lost":     {targetWithout(t, g, user), base.Accounts},
		"a block that is broken":   {base, bytes.Replace(base.Accounts, []byte(`"_INBOX.`+user+`.>"`), []byte(`"_INBOX.`+user+`.>`), 1)},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, want := plansAsAWholeParse(t, c.target, c.inUse)
			if strings.Contains(want.Reason, "does not parse") != strings.Contains(got.Reason, "does not parse") {
				t.Errorf("reason %q, with a whole parse %q", got.Reason, want.Reason)
			}
		})
	}
}

// Reading only the changed users of an nkey mesh's config plans what a whole parse plans,
// as for a password mesh (TestReadingChangedUsersOnlyPlansWhatAWholeParsePlans).
func TestReadingChangedNkeyUsersOnlyPlansWhatAWholeParsePlans(t *testing.T) {
	t.Parallel()
	k1, k2 := testnats.UserPublicKey(t), testnats.UserPublicKey(t)
	base := authTarget(t, model.AuthNkey, map[string]string{"alpha.shop": k1, "beta.postman": k2})
	for name, c := range map[string]struct {
		target plan.Target
		inUse  []byte
	}{
		"issued":               {base, authTarget(t, model.AuthNkey, nil).Accounts},
		"revoked":              {authTarget(t, model.AuthNkey, map[string]string{"alpha.shop": k1}), base.Accounts},
		"rotated":              {authTarget(t, model.AuthNkey, map[string]string{"alpha.shop": k2, "beta.postman": k1}), base.Accounts},
		"to nkey, from issued": {base, authTarget(t, model.AuthPassword, map[string]string{"alpha.shop": "$2a$11$" + strings.Repeat("a", 53)}).Accounts},
		"an nkey no comment names": {base, bytes.Replace(base.Accounts, []byte(render.NkeyEntryStart+`"alpha.shop"`+render.NkeyEntryKey),
			[]byte(strings.TrimPrefix(render.NkeyEntryKey, "\n")), 1)},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, _ := plansAsAWholeParse(t, c.target, c.inUse)
			named := map[string]plan.Action{}
			for _, u := range got.Users {
				named[u.User] = u.Action
			}
			if name == "an nkey no comment names" {
				if named["nkey:"+k1] != plan.Delete || named["alpha.shop"] != plan.Create {
					t.Errorf("an nkey entry no principal names is not replaced by the principal's: %v", named)
				}
				return
			}
			for user := range named {
				if strings.HasPrefix(user, "nkey:") {
					t.Errorf("user %s is named by its key", user)
				}
			}
		})
	}
}

// The server's parser reads a rendering whose system user sits in its own account ahead of the
// mesh's users, and a change to one mesh user is that one change, the system user neither
// created nor deleted (plan's TestTheSystemUserIsDiffedBesideTheMesh, read as it is served).
func TestTheServerReadsTheSystemUserBesideTheMesh(t *testing.T) {
	t.Parallel()
	m, err := model.Load("../examples/quickstart")
	if err != nil {
		t.Fatal(err)
	}
	m.Bus.URL, m.Bus.AccountsFile = "nats://10.0.0.1:4222", "/etc/nats/mesh.conf"
	m.Bus.Servers = []model.Server{{URL: m.Bus.URL, AccountsFile: m.Bus.AccountsFile, Reload: model.Reload{System: true}}}
	hashes := map[string]string{render.SystemUser: "$2a$11$" + strings.Repeat("s", 53)}
	before := plan.TargetOf(render.Derive(m), hashes)
	if _, err := parseUsers(before.Accounts); err != nil {
		t.Fatalf("the server's parser refuses the rendering with a system user: %v", err)
	}
	hashes["node.alpha"] = "$2a$11$" + strings.Repeat("h", 53)
	c, changed := planUsers(plan.TargetOf(render.Derive(m), hashes), before.Accounts)
	if !changed || len(c.Users) != 1 || c.Users[0].User != "node.alpha" || c.Users[0].Credential != "issued" {
		t.Fatalf("one credential issued beside the system user: %+v", c)
	}
}

func generatedTarget(t *testing.T, g meshgen.Mesh, hashes map[string]string) plan.Target {
	t.Helper()
	m, err := model.Parse(g.Files())
	if err != nil {
		t.Fatal(err)
	}
	return plan.TargetOf(render.Derive(m), hashes)
}

func targetWithout(t *testing.T, g meshgen.Mesh, user string) plan.Target {
	t.Helper()
	tg := generatedTarget(t, g, nil)
	d := *tg.Bus
	d.Principals = nil
	for _, p := range tg.Bus.Principals {
		if p.User != user {
			d.Principals = append(d.Principals, p)
		}
	}
	return plan.TargetOf(&d, nil)
}

func removeUser(t *testing.T, conf []byte, user string) []byte {
	t.Helper()
	start := bytes.Index(conf, []byte(`      { user: "`+user+`"`))
	end := bytes.Index(conf[start:], []byte("\n      } }\n"))
	if start < 0 || end < 0 {
		t.Fatalf("no block for %s", user)
	}
	return append(append([]byte{}, conf[:start]...), conf[start+end+len("\n      } }\n"):]...)
}

// authTarget is examples/quickstart's target with bus.auth set to auth, rendered with hashes.
func authTarget(tb testing.TB, auth string, hashes map[string]string) plan.Target {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join("..", "examples", "quickstart", "mesh.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	m, err := model.Parse([]model.File{{Name: "mesh.yaml", Data: data}, {Name: "bus.yaml", Data: []byte("bus:\n  auth: " + auth + "\n")}})
	if err != nil {
		tb.Fatal(err)
	}
	return plan.TargetOf(render.Derive(m), hashes)
}
