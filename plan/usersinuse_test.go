package plan

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshbus/meshctl/bench/meshgen"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

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
		target Target
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
			got, gotOK := diffAccounts(c.target, Live{Accounts: c.inUse, AccountsKnown: true})
			want, wantOK := diffAccounts(c.target, Live{Accounts: append([]byte("# edited\n"), c.inUse...), AccountsKnown: true})
			if !gotOK || !wantOK {
				t.Fatalf("planned a change: %v, with a whole parse: %v; every case differs from the rendering", gotOK, wantOK)
			}
			if d := cmp.Diff(want.Users, got.Users); d != "" || want.Risk != got.Risk {
				t.Errorf("the users planned differ from a whole parse's (-whole +changed only):\n%s", d)
			}
			if strings.Contains(want.Reason, "does not parse") != strings.Contains(got.Reason, "does not parse") {
				t.Errorf("reason %q, with a whole parse %q", got.Reason, want.Reason)
			}
		})
	}
}

func generatedTarget(t *testing.T, g meshgen.Mesh, hashes map[string]string) Target {
	t.Helper()
	m, err := model.Parse(g.Files())
	if err != nil {
		t.Fatal(err)
	}
	return TargetOf(render.Derive(m), hashes)
}

func targetWithout(t *testing.T, g meshgen.Mesh, user string) Target {
	t.Helper()
	tg := generatedTarget(t, g, nil)
	d := *tg.Bus
	d.Principals = nil
	for _, p := range tg.Bus.Principals {
		if p.User != user {
			d.Principals = append(d.Principals, p)
		}
	}
	return TargetOf(&d, nil)
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
