package render

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/meshbus/meshctl/internal/testnats"
	"github.com/meshbus/meshctl/model"
)

// quickstartWith is examples/quickstart with bus.auth set to auth ("" leaves it out).
func quickstartWith(tb testing.TB, auth string) *model.Mesh {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join("..", "examples", "quickstart", "mesh.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	files := []model.File{{Name: "mesh.yaml", Data: data}}
	if auth != "" {
		files = append(files, model.File{Name: "bus.yaml", Data: []byte("bus:\n  auth: " + auth + "\n")})
	}
	m, err := model.Parse(files)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// With bus.auth: nkey each host principal issued an nkey is an nkey user of the MESH account,
// with exactly the permissions its password user has; meshctl's own users, an unissued host
// and a host still holding a password's hash are password users, the latter two locked.
func TestNkeyMeshRendersHostsAsNkeyUsers(t *testing.T) {
	t.Parallel()
	nodeKey, shopKey := testnats.UserPublicKey(t), testnats.UserPublicKey(t)
	controllerHash := "$2a$04$" + strings.Repeat("c", 53)
	stored := map[string]string{
		ControllerUser:  controllerHash,
		"node.alpha":    nodeKey,
		"alpha.shop":    shopKey,
		"beta.postman":  "$2a$04$" + strings.Repeat("p", 53), // minted before bus.auth changed
		"enrol.beta":    "",
		"never.derived": testnats.UserPublicKey(t),
	}
	conf := AccountsConfig(Derive(quickstartWith(t, model.AuthNkey)).Principals, stored)
	opts := &server.Options{}
	if err := opts.ProcessConfigString(string(conf)); err != nil {
		t.Fatalf("the server's parser refused the config: %v\n%s", err, conf)
	}
	if !NkeysIn(conf) {
		t.Error("the config does not say its hosts log in with nkeys")
	}
	nkeyUsers := map[string]*server.NkeyUser{}
	for _, nk := range opts.Nkeys {
		nkeyUsers[nk.Nkey] = nk
	}
	if len(nkeyUsers) != 2 || nkeyUsers[nodeKey] == nil || nkeyUsers[shopKey] == nil {
		t.Fatalf("nkey users %v; want node.alpha's and alpha.shop's keys", nkeyUsers)
	}
	users := map[string]*server.User{}
	for _, u := range opts.Users {
		users[u.Username] = u
	}
	if users[ControllerUser] == nil || users[ControllerUser].Password != controllerHash {
		t.Errorf("the controller is not a password user with its hash: %+v", users[ControllerUser])
	}
	for _, u := range []string{"beta.postman", "enrol.beta", "enrol.alpha", "node.beta"} {
		if users[u] == nil || users[u].Password != LockedHash {
			t.Errorf("%s is not a locked password user: %+v", u, users[u])
		}
	}
	for _, u := range []string{"node.alpha", "alpha.shop"} {
		if users[u] != nil {
			t.Errorf("%s is a password user as well as an nkey user", u)
		}
	}

	// The same permissions as the password mesh's users of those principals.
	password := parseUsers(t, string(AccountsConfig(Derive(quickstartWith(t, "")).Principals, nil)))
	for user, key := range map[string]string{"node.alpha": nodeKey, "alpha.shop": shopKey} {
		if diff := cmp.Diff(password[user].Permissions, nkeyUsers[key].Permissions); diff != "" {
			t.Errorf("%s's permissions as an nkey user differ from its password user's (-password +nkey):\n%s", user, diff)
		}
	}
	// Its principal is named in the comment above its entry, for the plan and for a reader.
	if !strings.Contains(string(conf), NkeyEntryStart+`"node.alpha"`+NkeyEntryKey+`"`+nodeKey+`"`) {
		t.Errorf("node.alpha's entry does not name it:\n%s", conf)
	}
}

// A public key is never a password: in a mesh of password users a principal whose stored
// credential is a public key (minted while bus.auth was nkey) is locked, not given a password
// anyone who read the key could send.
func TestPasswordMeshLocksAStoredPublicKey(t *testing.T) {
	t.Parallel()
	key := testnats.UserPublicKey(t)
	conf := AccountsConfig(Derive(quickstartWith(t, "")).Principals, map[string]string{"alpha.shop": key})
	users := parseUsers(t, string(conf))
	if users["alpha.shop"].Password != LockedHash {
		t.Errorf("alpha.shop's password is %q; want the lock", users["alpha.shop"].Password)
	}
	if strings.Contains(string(conf), key) || NkeysIn(conf) {
		t.Errorf("a password mesh's config carries an nkey:\n%s", conf)
	}
}

func TestCredentialOf(t *testing.T) {
	t.Parallel()
	key, hash := testnats.UserPublicKey(t), "$2a$04$"+strings.Repeat("h", 53)
	host := Principal{User: "alpha.shop", Kind: KindModule}
	nkeyHost := host
	nkeyHost.Nkey = true
	for _, c := range []struct {
		name   string
		p      Principal
		stored string
		want   Credential
	}{
		{"password, issued", host, hash, Credential{Hash: hash}},
		{"password, none", host, "", Credential{Hash: LockedHash}},
		{"password, an nkey left from bus.auth: nkey", host, key, Credential{Hash: LockedHash, Reissue: true}},
		{"nkey, issued", nkeyHost, key, Credential{Nkey: key}},
		{"nkey, none", nkeyHost, "", Credential{Hash: LockedHash}},
		{"nkey, a hash left from bus.auth: password", nkeyHost, hash, Credential{Hash: LockedHash, Reissue: true}},
		{"nkey, a key whose checksum is broken", nkeyHost, broken(key), Credential{Hash: LockedHash, Reissue: true}},
	} {
		if got := CredentialOf(c.p, map[string]string{c.p.User: c.stored}); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// broken is key with one character changed, so its checksum fails.
func broken(key string) string {
	c := byte('A')
	if key[10] == c {
		c = 'B'
	}
	return key[:10] + string(c) + key[11:]
}

// Only the host principals become nkey users: meshctl's own log in with passwords.
func TestOnlyHostsAreNkeyPrincipals(t *testing.T) {
	t.Parallel()
	for _, p := range Derive(quickstartWith(t, model.AuthNkey)).Principals {
		if want := p.Kind != KindController && p.Kind != KindSystem; p.Nkey != want {
			t.Errorf("%s (%s): nkey %v, want %v", p.User, p.Kind, p.Nkey, want)
		}
	}
	for _, p := range Derive(quickstartWith(t, model.AuthPassword)).Principals {
		if p.Nkey {
			t.Errorf("%s is an nkey principal of a password mesh", p.User)
		}
	}
}
