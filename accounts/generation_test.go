package accounts

import (
	"testing"

	"github.com/meshbus/meshctl/bench/meshgen"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// A rendering stamped with a generation reads back as the rendering, parses with the
// principal in it, denied everything. Its password follows from the controller's password, the
// rendering and the server — the same for whoever holds the controller's password, in a file
// salted anew each time — and without a controller's password it is new with each stamp.
func TestAGenerationIsAddedAndTakenOutWhole(t *testing.T) {
	t.Parallel()
	m, err := model.Parse(meshgen.Scaled(10).Files())
	if err != nil {
		t.Fatal(err)
	}
	data := render.AccountsConfig(render.Derive(m).Principals, nil)
	a := File{Path: "accounts.conf"}.WrittenBy("", "the controller's password")
	one, g1, err := a.stamp(data, digest(data))
	if err != nil {
		t.Fatal(err)
	}
	two, g2, err := a.stamp(data, digest(data))
	if err != nil {
		t.Fatal(err)
	}
	if g1.Password != g2.Password || string(one) == string(two) {
		t.Error("two stamps of one rendering by one controller do not share a password, or share a file")
	}
	if derived, ok := a.derivedGeneration(one, data); !ok || derived.Password != g1.Password || !derived.describes("accounts.conf", one) {
		t.Error("the generation of a stamped file is not derived again from the file")
	}
	others := []File{
		{Path: "accounts.conf", Server: "n2", controller: "the controller's password"},
		{Path: "accounts.conf", controller: "another controller's password"},
		{Path: "accounts.conf"},
		{Path: "accounts.conf"},
	}
	seen := map[string]bool{g1.Password: true}
	for _, o := range others {
		_, g, err := o.stamp(data, digest(data))
		if err != nil {
			t.Fatal(err)
		}
		if seen[g.Password] {
			t.Errorf("another server, controller or stamp without one shares a generation password")
		}
		seen[g.Password] = true
	}
	if _, _, err := a.stamp(one, digest(one)); err == nil {
		t.Error("a file already stamped was stamped again")
	}
	if back, ok := Unstamp(one); !ok || string(back) != string(data) {
		t.Fatalf("Unstamp did not give back the rendering:\n%s", back)
	}
	if _, ok := Unstamp(data); ok {
		t.Error("a rendering without a generation was read as stamped")
	}
	users, err := parseUsers(one)
	if err != nil {
		t.Fatal(err)
	}
	u := users[GenerationUser]
	if u == nil || u.Permissions == nil || len(u.Permissions.Publish.Allow)+len(u.Permissions.Subscribe.Allow) != 0 ||
		len(u.Permissions.Publish.Deny) != 1 || len(u.Permissions.Subscribe.Deny) != 1 {
		t.Fatalf("the generation principal may do something: %+v", u)
	}
	if !g1.describes("accounts.conf", one) || g1.describes("accounts.conf", two) {
		t.Error("a generation record does not tell its own file from another")
	}
}

// The controller's hash is read from a rendering as render writes the controller's entry, and
// from nothing else: a rendering without the controller carries none.
func TestTheControllerHashIsReadFromItsEntry(t *testing.T) {
	t.Parallel()
	principals := []render.Principal{{User: render.ControllerUser}, {User: "alpha.shop"}}
	hashes := map[string]string{render.ControllerUser: "$2a$04$controller", "alpha.shop": "$2a$04$shop"}
	if got := controllerHashIn(render.AccountsConfig(principals, hashes)); got != "$2a$04$controller" {
		t.Errorf("the controller hash read is %q, want the controller's entry's", got)
	}
	if got := controllerHashIn(render.AccountsConfig(principals[1:], hashes)); got != "" {
		t.Errorf("a rendering without the controller gave the hash %q", got)
	}
}
