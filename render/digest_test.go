package render

import (
	"bytes"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/meshbus/meshctl/bench/meshgen"
	"github.com/meshbus/meshctl/model"
)

// digestMeshes are meshes whose accounts configs differ in every way the layout does: the
// default, push consumers, nkey hosts, and meshctl's system user beside the mesh's.
func digestMeshes(t *testing.T) map[string]*model.Mesh {
	t.Helper()
	parse := func() *model.Mesh {
		m, err := model.Parse(meshgen.Scaled(500).Files())
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	push, nkey, system := parse(), parse(), parse()
	push.Bus.Consumers = model.ConsumersPush
	nkey.Bus.Auth = model.AuthNkey
	system.Bus.Servers = []model.Server{{Reload: model.Reload{System: true}}}
	return map[string]*model.Mesh{"default": parse(), "push": push, "nkey": nkey, "system user": system}
}

// hashesFor gives some principals a credential, so that entries differ in what they hold: a
// bcrypt hash, or for an nkey host a public key of its own.
func hashesFor(t *testing.T, principals []Principal) map[string]string {
	t.Helper()
	hashes := map[string]string{}
	for i, p := range principals {
		switch {
		case i%3 != 0:
		case p.Nkey:
			kp, err := nkeys.CreateUser()
			if err != nil {
				t.Fatal(err)
			}
			if hashes[p.User], err = kp.PublicKey(); err != nil {
				t.Fatal(err)
			}
		default:
			hashes[p.User] = "$2a$04$abcdefghijklmnopqrstuu5Ltm8kM2bVNRl9hH8v3Yw1RsF7QWzQy"
		}
	}
	return hashes
}

// The config's digest written a principal at a time, derived one by one from the mesh or from
// the principals Derive keeps, is the digest of the config AccountsConfig renders; and the
// config is, entry by entry, what IsAccountsConfig and SplitAccountsConfig read.
func TestTheConfigReadAnEntryAtATimeIsTheRendering(t *testing.T) {
	t.Parallel()
	for name, m := range digestMeshes(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := Derive(m)
			if objects := DeriveObjects(m); len(objects.Streams) != len(d.Streams) || len(objects.Consumers) != len(d.Consumers) || objects.Principals != nil {
				t.Fatal("DeriveObjects derived other streams or consumers than Derive, or principals")
			}
			hashes := hashesFor(t, d.Principals)
			conf := AccountsConfig(d.Principals, hashes)
			if got, want := AccountsDigestOf(m, nil, hashes), Digest(conf); got != want {
				t.Errorf("AccountsDigestOf = %s; the rendering's digest is %s", got, want)
			}
			if got, want := AccountsDigest(d.Principals, hashes), Digest(conf); got != want {
				t.Errorf("AccountsDigest = %s; the rendering's digest is %s", got, want)
			}
			if !IsAccountsConfig(conf, d.Principals, hashes) {
				t.Error("IsAccountsConfig does not know the rendering")
			}
			edited := bytes.Replace(conf, []byte(`"_INBOX.`), []byte(`"_INBOX.x`), 1)
			if IsAccountsConfig(edited, d.Principals, hashes) || IsAccountsConfig(conf[:len(conf)-1], d.Principals, hashes) {
				t.Error("IsAccountsConfig takes a config that is not the rendering for it")
			}
			s, ok := SplitAccountsConfig(conf)
			if !ok {
				t.Fatal("the rendering does not split")
			}
			whole := append([]byte{}, s.Head...)
			users, nkeyEntries := 0, 0
			for _, e := range s.Entries {
				whole = append(whole, e.Text...)
				p, ok := d.Principal(e.User)
				if !ok || p.Kind == KindSystem {
					t.Errorf("an entry for %q, which is no mesh user", e.User)
				}
				if want := CredentialOf(p, hashes).Nkey; e.Nkey != want {
					t.Errorf("the entry of %s reads nkey %q; it holds %q", e.User, e.Nkey, want)
				}
				if e.Nkey != "" {
					nkeyEntries++
				}
				users++
			}
			if whole = append(whole, s.Tail...); !bytes.Equal(whole, conf) {
				t.Error("the head, entries and tail are not the config")
			}
			want := 0
			for _, p := range d.Principals {
				if p.Kind != KindSystem {
					want++
				}
			}
			if users != want {
				t.Errorf("%d entries; the mesh has %d users", users, want)
			}
			if m.Bus.Nkeys() && nkeyEntries == 0 {
				t.Error("the nkey mesh's config has no nkey entry")
			}
		})
	}
}

// A config in which a user's entry is written twice, or the users are out of the order
// AccountsConfig writes them in, splits only where each user is once.
func TestASplitFindsAUserTwice(t *testing.T) {
	t.Parallel()
	m := digestMeshes(t)["default"]
	conf := AccountsConfig(Derive(m).Principals, nil)
	s, ok := SplitAccountsConfig(conf)
	if !ok || len(s.Entries) < 3 {
		t.Fatal("the rendering does not split")
	}
	build := func(entries ...AccountsEntry) []byte {
		out := append([]byte{}, s.Head...)
		for _, e := range entries {
			out = append(out, e.Text...)
		}
		return append(out, s.Tail...)
	}
	e := s.Entries
	if _, ok := SplitAccountsConfig(build(e[0], e[1], e[1], e[2])); ok {
		t.Error("a config with a user twice, in order, splits")
	}
	if _, ok := SplitAccountsConfig(build(e[1], e[0], e[2], e[0])); ok {
		t.Error("a config with a user twice, out of order, splits")
	}
	if got, ok := SplitAccountsConfig(build(e[2], e[0], e[1])); !ok || len(got.Entries) != 3 || got.Entries[0].User != e[2].User {
		t.Error("a config with its users out of order, each once, does not split as it stands")
	}
}
