package accounts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshbus/meshctl/internal/testnats/opmode"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// makeOperator makes a fresh operator in the nats CLI's store under home, for RunCLI to read.
func makeOperator(t *testing.T, home, name string) Operator {
	t.Helper()
	o, err := MakeOperator(opmode.StoreRoot(home), name, "")
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func publicKey(t *testing.T, kp nkeys.KeyPair) string {
	t.Helper()
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// TestMakeOperatorWritesTheStoreTheNatsCLIReads holds a fresh operator's store as nsc's layout:
// the nats CLI lists the operator and its two accounts, finds the operator's and the account's
// seeds where MakeOperator filed them (it signs a new account and a new user with them), and
// every JWT, seed and creds file is where and what the Operator returned says, 0600 in
// directories 0700.
func TestMakeOperatorWritesTheStoreTheNatsCLIReads(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	o := makeOperator(t, home, "FRESH")
	root := opmode.StoreRoot(home)

	if o.Account.Name != render.Account {
		t.Errorf("the mesh's account is %q; the default is %q", o.Account.Name, render.Account)
	}
	opc, err := jwt.DecodeOperatorClaims(o.JWT)
	if err != nil {
		t.Fatal(err)
	}
	if opc.Subject != o.PublicKey || opc.SystemAccount != o.SystemAccount || len(opc.SigningKeys) != 1 || !opc.SigningKeys.Contains(publicKey(t, o.Signer)) {
		t.Errorf("operator JWT: subject %s, system account %s, signing keys %v; want %s, %s, [%s]",
			opc.Subject, opc.SystemAccount, opc.SigningKeys, o.PublicKey, o.SystemAccount, publicKey(t, o.Signer))
	}
	mesh, err := jwt.DecodeAccountClaims(o.AccountJWT)
	if err != nil {
		t.Fatal(err)
	}
	if mesh.Subject != o.Account.PublicKey || mesh.Issuer != publicKey(t, o.Signer) || !mesh.Limits.IsJSEnabled() || !mesh.SigningKeys.Contains(publicKey(t, o.UserSigner)) {
		t.Errorf("mesh account JWT: subject %s, issuer %s, JetStream %v, signing keys %v", mesh.Subject, mesh.Issuer, mesh.Limits.IsJSEnabled(), mesh.SigningKeys.Keys())
	}
	sys, err := jwt.DecodeAccountClaims(o.SystemAccountJWT)
	if err != nil {
		t.Fatal(err)
	}
	if sys.Subject != o.SystemAccount || sys.Issuer != publicKey(t, o.Signer) {
		t.Errorf("system account JWT: subject %s, issuer %s", sys.Subject, sys.Issuer)
	}

	store := filepath.Join(root, "stores", "FRESH")
	for path, want := range map[string]string{
		filepath.Join(store, "FRESH.jwt"):                                    o.JWT,
		filepath.Join(store, "accounts", "SYSTEM", "SYSTEM.jwt"):             o.SystemAccountJWT,
		filepath.Join(store, "accounts", "MESH", "MESH.jwt"):                 o.AccountJWT,
		filepath.Join(root, "keys", "creds", "FRESH", "SYSTEM", "sys.creds"): string(o.SystemCreds),
	} {
		if got, err := os.ReadFile(path); err != nil || string(got) != want {
			t.Errorf("%s: %v; does not hold what the Operator returned", path, err)
		}
	}
	for _, kp := range []nkeys.KeyPair{o.Signer, o.UserSigner} {
		pub := publicKey(t, kp)
		seed, err := os.ReadFile(filepath.Join(root, "keys", "keys", pub[:1], pub[1:3], pub+".nk"))
		if err != nil {
			t.Fatal(err)
		}
		if back, err := nkeys.FromSeed(seed); err != nil || publicKey(t, back) != pub {
			t.Errorf("the seed filed as %s is not its key's (%v)", pub, err)
		}
	}
	if _, err := jwt.ParseDecoratedUserNKey(o.SystemCreds); err != nil {
		t.Errorf("the system user's creds hold no seed: %v", err)
	}
	// A store kept in git never commits a seed or a creds file.
	if ignore, err := os.ReadFile(filepath.Join(root, "keys", ".gitignore")); err != nil || !bytes.Contains(ignore, []byte("**/*.nk")) || !bytes.Contains(ignore, []byte("**/*.creds")) {
		t.Errorf("keys/.gitignore: %q (%v); want seeds and creds ignored", ignore, err)
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if want := fs.FileMode(0o600); d.IsDir() {
			want = 0o700
			if fi.Mode().Perm() != want {
				t.Errorf("directory %s is %v, want %v", path, fi.Mode().Perm(), want)
			}
		} else if fi.Mode().Perm() != want {
			t.Errorf("%s is %v, want %v", path, fi.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	if out := opmode.RunCLI(t, home, "auth", "operator", "ls"); !bytes.Contains(out, []byte(o.PublicKey)) {
		t.Errorf("the nats CLI does not list operator FRESH:\n%s", out)
	}
	if out := string(opmode.RunCLI(t, home, "auth", "account", "ls", "FRESH", "--names")); strings.Fields(out) == nil ||
		strings.Join(strings.Fields(out), " ") != "MESH SYSTEM" {
		t.Errorf("the nats CLI lists accounts %q; want MESH and SYSTEM", out)
	}
	if out := opmode.RunCLI(t, home, "auth", "operator", "info", "FRESH"); !bytes.Contains(out, []byte("SYSTEM ("+o.SystemAccount+")")) {
		t.Errorf("the nats CLI does not name SYSTEM the system account:\n%s", out)
	}
	// Signing needs the seeds: the CLI finds the operator's and the account's where they were
	// filed.
	opmode.RunCLI(t, home, "auth", "account", "add", "OTHER", "--operator", "FRESH", "--defaults")
	other, err := os.ReadFile(filepath.Join(store, "accounts", "OTHER", "OTHER.jwt"))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := jwt.DecodeAccountClaims(string(other)); err != nil || !opc.DidSign(c) {
		t.Errorf("the account the nats CLI added is not signed by operator FRESH (%v)", err)
	}
	creds := filepath.Join(home, "u.creds")
	opmode.RunCLI(t, home, "auth", "user", "add", "u", "MESH", "--operator", "FRESH", "--defaults", "--credential", creds)
	b, err := os.ReadFile(creds)
	if err != nil {
		t.Fatal(err)
	}
	token, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		t.Fatal(err)
	}
	if uc, err := jwt.DecodeUserClaims(token); err != nil || !mesh.DidSign(uc) {
		t.Errorf("the user the nats CLI added to MESH is not signed by the account's keys (%v)", err)
	}

	// The store marker is the nats CLI's own, but for the operator's name.
	cli := opmode.NewOperator(t, "CLI")
	var ours, theirs map[string]any
	for path, v := range map[string]*map[string]any{filepath.Join(store, ".nsc"): &ours, filepath.Join(cli.StoreDir, ".nsc"): &theirs} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatal(err)
		}
	}
	theirs["name"] = "FRESH"
	if !jsonEqual(t, ours, theirs) {
		t.Errorf(".nsc is %v; the nats CLI writes %v", ours, theirs)
	}
}

func jsonEqual(t *testing.T, a, b any) bool {
	t.Helper()
	x, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(x, y)
}

// TestMakeOperatorNeverOverwritesAStore holds the refusal: a second MakeOperator on a root
// holding one, of any name, and one on a store the nats CLI made, are ErrOperatorExists and
// leave every file as it was.
func TestMakeOperatorNeverOverwritesAStore(t *testing.T) {
	t.Parallel()
	ours := opmode.StoreRoot(t.TempDir())
	if _, err := MakeOperator(ours, "FRESH", "MESH"); err != nil {
		t.Fatal(err)
	}
	cli := opmode.NewOperator(t, "CLI")
	theirs := filepath.Dir(filepath.Dir(cli.StoreDir))
	for _, root := range []string{ours, theirs} {
		before := snapshot(t, root)
		for _, name := range []string{"FRESH", "CLI", "ANOTHER"} {
			if _, err := MakeOperator(root, name, "MESH"); !errors.Is(err, ErrOperatorExists) {
				t.Errorf("MakeOperator(%s, %s): %v; want ErrOperatorExists", root, name, err)
			}
		}
		if after := snapshot(t, root); !jsonEqual(t, before, after) {
			t.Errorf("a refused MakeOperator changed %s", root)
		}
	}
}

// snapshot is every file under root and its bytes.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		files[path] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestMakeOperatorRefusesANameOutsideTheStore holds the names a store files by: none climbs
// out of its directory, and the mesh's account is not the system account.
func TestMakeOperatorRefusesANameOutsideTheStore(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, account string }{
		{"", "MESH"}, {"..", "MESH"}, {"a/b", "MESH"}, {"OP", "../MESH"}, {"OP", ".MESH"}, {"OP", "ME SH"}, {"OP", "SYSTEM"},
	} {
		root := t.TempDir()
		if _, err := MakeOperator(root, c.name, c.account); err == nil {
			t.Errorf("MakeOperator(%q, %q) made an operator", c.name, c.account)
		}
		if entries, err := os.ReadDir(root); err != nil || len(entries) != 0 {
			t.Errorf("MakeOperator(%q, %q) wrote %v (%v)", c.name, c.account, entries, err)
		}
	}
}

// TestServerConfigIsWhatTheServersRunOn starts three nats-server processes on the config
// ServerConfig writes for a fresh operator and nothing else of operator mode: each starts, the
// system user from the Operator's creds logs in and every server answers it, every server
// applies the mesh account's preloaded JWT, and a user of the mesh's account keeps a
// replicated stream across the cluster, with no push made.
func TestServerConfigIsWhatTheServersRunOn(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	o := makeOperator(t, home, "FRESH")
	sysCreds := filepath.Join(home, "sys.creds")
	if err := os.WriteFile(sysCreds, o.SystemCreds, 0o600); err != nil {
		t.Fatal(err)
	}
	var written []string
	c := opmode.StartClusterTrusting(t, opmode.ClusterOptions{}, func(resolverDir, interval string) string {
		text, err := o.ServerConfig(resolverDir, interval)
		if err != nil {
			t.Fatal(err)
		}
		written = append(written, text)
		return text
	}, sysCreds)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	for _, text := range written {
		for _, want := range []string{"operator: \"" + o.JWT + "\"", "system_account: \"" + o.SystemAccount + "\"", "type: full", "allow_delete: false",
			"interval: \"2s\"", o.SystemAccount + ": \"" + o.SystemAccountJWT + "\"", o.Account.PublicKey + ": \"" + o.AccountJWT + "\""} {
			if !strings.Contains(text, want) {
				t.Errorf("the servers' config lacks %.60s…:\n%s", want, text)
			}
		}
		for _, kp := range []nkeys.KeyPair{o.Signer, o.UserSigner} {
			if seed, err := kp.Seed(); err != nil || strings.Contains(text, string(seed)) {
				t.Errorf("the servers' config holds a seed (%v)", err)
			}
		}
		if sysSeed, err := jwt.ParseDecoratedNKey(o.SystemCreds); err != nil {
			t.Fatal(err)
		} else if seed, err := sysSeed.Seed(); err != nil || strings.Contains(text, string(seed)) {
			t.Errorf("the servers' config holds the system user's seed (%v)", err)
		}
	}

	r := Resolver{Conn: c.ConnectSystem(), Servers: c.Names(), Wait: 60 * time.Second}
	creds, err := o.Account.MintUser(o.UserSigner, "worker", Grants{Publish: []string{"$JS.API.>", "work.>"}, Subscribe: []string{"_INBOX.>"}})
	if err != nil {
		t.Fatal(err)
	}
	m := &liveMesh{c: c}
	var conns []*nats.Conn
	for _, srv := range c.Servers {
		conns = append(conns, m.connect(t, srv, creds))
	}
	st, err := r.Status(ctx, o.AccountJWT)
	if err != nil || !allCurrent(st) {
		t.Fatalf("the mesh account's preloaded JWT on each server: %+v (%v); want every server current", st, err)
	}
	js, err := jetstream.New(conns[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "WORK", Subjects: []string{"work.>"}, Replicas: 3}); err != nil {
		t.Fatalf("the mesh account's user creating a stream of three replicas: %v", err)
	}
	for i, nc := range conns {
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, "work.x", []byte("job")); err != nil {
			t.Fatalf("publishing through %s: %v", c.Servers[i].Name, err)
		}
	}
	stream, err := js.Stream(ctx, "WORK")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := stream.Info(ctx); err != nil || info.State.Msgs != uint64(len(conns)) {
		t.Fatalf("stream WORK: %+v (%v); want %d messages", info, err, len(conns))
	}
}

// TestLoadOperatorReadsWhatMakeOperatorWrote holds a fresh operator's store as meshctl reads it
// back on every later run: the same keys, JWTs and system user, and the system account's JWT,
// which the embedded bus and the servers' static config preload.
func TestLoadOperatorReadsWhatMakeOperatorWrote(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "nsc")
	made, err := MakeOperator(root, "FRESH", "")
	if err != nil {
		t.Fatal(err)
	}
	read, err := LoadOperator(model.Operator{Store: root})
	if err != nil {
		t.Fatal(err)
	}
	for what, pair := range map[string][2]string{
		"name":                {made.Name, read.Name},
		"public key":          {made.PublicKey, read.PublicKey},
		"JWT":                 {made.JWT, read.JWT},
		"system account":      {made.SystemAccount, read.SystemAccount},
		"system account JWT":  {made.SystemAccountJWT, read.SystemAccountJWT},
		"system creds":        {string(made.SystemCreds), string(read.SystemCreds)},
		"account JWT":         {made.AccountJWT, read.AccountJWT},
		"account":             {made.Account.PublicKey, read.Account.PublicKey},
		"signer":              {publicKey(t, made.Signer), publicKey(t, read.Signer)},
		"user signer":         {publicKey(t, made.UserSigner), publicKey(t, read.UserSigner)},
		"account signing key": {strings.Join(made.Account.SigningKeys, ","), strings.Join(read.Account.SigningKeys, ",")},
	} {
		if pair[0] != pair[1] {
			t.Errorf("%s read back %.40q; made %.40q", what, pair[1], pair[0])
		}
	}
	if made.Account.JetStream != read.Account.JetStream || made.Account.Name != read.Account.Name {
		t.Errorf("the mesh's account read back %v; made %v", read.Account, made.Account)
	}
}
