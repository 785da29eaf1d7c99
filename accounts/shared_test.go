package accounts

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/meshbus/meshctl/bench/meshgen"
	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// Under bus.accounts: account the stamped file is the MESH account alone with its generation
// principal in it: it reads back as the rendering, its users (the generation principal's
// among them) parse as the server reads them inside its accounts block, and its record says
// its shape. A file of the other shape, stamped by meshctl, is written again, and the plan
// says why; a record of the other shape is not taken for the rendering, nor its generation
// principal's login for a proof of this one.
func TestTheAccountAloneIsStampedReadAndProvenAsTheWholeBlock(t *testing.T) {
	t.Parallel()
	m, err := model.Parse(meshgen.Scaled(3).Files())
	if err != nil {
		t.Fatal(err)
	}
	data := render.AccountsConfig(render.Derive(m).Principals, nil)
	dir := t.TempDir()
	path := filepath.Join(dir, "mesh-account.conf")
	alone := File{Path: path, StateDir: dir, AccountOnly: true, Reloader: bus.NoReloader()}.WrittenBy("# meshctl manager: {}\n", "the controller's password")
	block := alone
	block.AccountOnly = false

	stamped, g, err := alone.stamp(data, digest(data))
	if err != nil {
		t.Fatal(err)
	}
	if !g.AccountOnly || bytes.Contains(stamped, []byte("\naccounts {")) || !accountOnlyFile(stamped) {
		t.Fatalf("the stamped file is not the account alone (record says %v):\n%s", g.AccountOnly, stamped)
	}
	if back, ok := Unstamp(stamped); !ok || !bytes.Equal(back, data) {
		t.Fatalf("Unstamp did not give back the rendering:\n%s", back)
	}
	users, err := parseUsers(stamped)
	if err != nil {
		t.Fatalf("the account alone does not parse as the server reads it: %v", err)
	}
	if users[GenerationUser] == nil || users[render.ControllerUser] == nil {
		t.Fatal("the generation principal or the controller is missing from the account alone")
	}
	if _, err := alone.check(stamped, dir); err != nil {
		t.Fatalf("the server's parser refuses the account alone inside an accounts block: %v", err)
	}
	if _, err := block.check(stamped, dir); err == nil {
		t.Fatal("the account alone passed a check as a whole accounts block: the check does not read it in its context")
	}
	if derived, ok := alone.derivedGeneration(stamped, data); !ok || derived.Password != g.Password || !derived.AccountOnly {
		t.Error("the generation of the account alone is not derived again from the file")
	}

	whole, wg, err := block.stamp(data, digest(data))
	if err != nil {
		t.Fatal(err)
	}
	// A server that refuses the one shape while serving the other must not be seen serving it.
	if wg.Password == g.Password {
		t.Error("the whole block and the account alone of one rendering share a generation password")
	}
	ctx := context.Background()
	for _, c := range []struct {
		name string
		a    File
		conf []byte
		want string
	}{
		{"the whole block where the account alone is written", alone, whole, "holds the whole accounts block"},
		{"the account alone where the whole block is written", block, stamped, "holds the MESH account alone"},
	} {
		if c.a.inShape(c.conf) {
			t.Errorf("%s: taken for a file of the right shape", c.name)
		}
		rendered, why, err := c.a.servedServer(ctx, c.conf)
		if err != nil || !strings.Contains(why, c.want) || !bytes.Equal(rendered, data) {
			t.Errorf("%s: the plan reads %q (%v), want a reason naming what it %s", c.name, why, err, c.want)
		}
	}

	// The operator's own first file, the account with nobody in it, is read as the server reads it.
	first := []byte("MESH { jetstream: enabled }\n")
	if !alone.inShape(first) {
		t.Error("the operator's first file of the account was taken for one of the other shape")
	}
	rendered, _, err := alone.servedServer(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if users, err := ReadServedUsers(rendered); err != nil || len(users) != 0 {
		t.Errorf("the operator's first file reads as %d users (%v), want none", len(users), err)
	}

	// A record of the whole block is not the account alone's, whatever its digests say.
	if err := os.WriteFile(path, whole, 0o600); err != nil {
		t.Fatal(err)
	}
	_, wholeGen, _ := block.stamp(data, digest(data))
	wholeGen.SHA256 = digest(whole)
	if err := saveGeneration(dir, "", wholeGen); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := alone.ServedAsRendered(ctx, func() string { return digest(data) }); ok {
		t.Error("a record of the whole block was taken for the account alone's rendering")
	}
}

// The operator's system user's secret is read from its file at each reload; an error names the
// file and never what is in it.
func TestTheOperatorsSystemUserIsReadFromItsFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	r := func(u model.SystemUser) operatorSystemReload {
		return operatorSystemReload{t: busclient.Target{URL: "nats://127.0.0.1:1"}, user: u}
	}

	cred, err := r(model.SystemUser{User: "ops", PasswordFile: write("pw", "s3cret\n")}).credential()
	if err != nil || cred.User != "ops" || cred.Password != "s3cret" {
		t.Errorf("the password file reads as %v (%v)", cred, err)
	}
	cred, err = r(model.SystemUser{SeedFile: write("seed", string(seed)+"\n")}).credential()
	if pub, _ := kp.PublicKey(); err != nil || cred.Seed != string(seed) || cred.User != pub {
		t.Errorf("the seed file reads as %v (%v)", cred, err)
	}
	for _, c := range []struct {
		name string
		user model.SystemUser
	}{
		{"an empty password file", model.SystemUser{User: "ops", PasswordFile: write("empty", "\n")}},
		{"a seed that is not a user's", model.SystemUser{SeedFile: write("bad-seed", "SUnot-a-seed-at-all")}},
		{"no file", model.SystemUser{User: "ops", PasswordFile: filepath.Join(dir, "missing")}},
	} {
		_, err := r(c.user).credential()
		if err == nil {
			t.Errorf("%s was read as a credential", c.name)
			continue
		}
		if strings.Contains(err.Error(), "SUnot-a-seed") {
			t.Errorf("%s: the error shows the file's text: %v", c.name, err)
		}
	}
	_, err = r(model.SystemUser{SeedFile: filepath.Join(dir, "missing")}).credential()
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing seed file: %v, want it wrapped", err)
	}
}
