package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// cliNkeyMesh is cliMesh with bus.auth: nkey.
var cliNkeyMesh = strings.Replace(cliMesh, "bus:\n", "bus:\n  auth: nkey\n", 1)

// seedLogin logs in to url as user with seed, alone, and hangs up; nil means it was let in.
func seedLogin(url, user, seed string) error {
	kp, err := nkeys.FromSeed([]byte(seed))
	if err != nil {
		return err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return err
	}
	nc, err := nats.Connect(url, nats.Nkey(pub, kp.Sign), nats.CustomInboxPrefix(render.Inbox(user)),
		nats.NoReconnect(), nats.Timeout(5*time.Second))
	if err != nil {
		return err
	}
	nc.Close()
	return nil
}

// refusedSeed reports whether a login with a seed was refused.
func refusedSeed(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrNkeysNotSupported)
}

// serveEmbedded brings up the state directory's embedded bus in this process, as a watch
// would, so that credentials commands have it reload their file and return once it serves it.
func serveEmbedded(t *testing.T, dir, stateDir string) string {
	t.Helper()
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	store, err := state.Open(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	sess, err := reconcile.Connect(context.Background(), m, store, reconcile.Options{Cost: 4, OwnEmbedded: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sess.Close)
	return sess.Embedded.URL()
}

// With bus.auth: nkey, `credentials issue` prints a membership carrying a seed instead of a
// password, which the host package reads and the bus lets in; rotate prints a new one and the
// old seed is refused; revoke locks the host out. The seed is on stdout (or in the 0600 file)
// alone: not on stderr, not in the state directory, not in the accounts config, which holds
// the public key.
func TestCredentialsOfAnNkeyMeshLogInWithASeed(t *testing.T) {
	t.Parallel()
	dir := writeMesh(t, map[string]string{"mesh.yaml": cliNkeyMesh})
	st := filepath.Join(t.TempDir(), "state")
	common := []string{"-f", dir, "--state", st}
	if code, _, errOut := meshctl(t, append([]string{"apply", "--bcrypt-cost", "4"}, common...)...); code != exitOK {
		t.Fatalf("apply: exit %d: %s", code, errOut)
	}
	url := serveEmbedded(t, dir, st)

	code, out, errOut := meshctl(t, append([]string{"credentials", "issue", "alpha.shop"}, common...)...)
	if code != exitOK {
		t.Fatalf("issue: exit %d\n%s", code, errOut)
	}
	var fields map[string]any
	if err := json.Unmarshal([]byte(out), &fields); err != nil {
		t.Fatal(err)
	}
	if _, has := fields["password"]; has {
		t.Errorf("an nkey membership carries a password field: %v", fields["user"])
	}
	m, err := host.ReadMembership(strings.NewReader(out))
	if err != nil || m.User != "alpha.shop" || !strings.HasPrefix(m.Seed, "SU") {
		t.Fatalf("the membership printed is not alpha.shop's with a seed: %v", err)
	}
	if strings.Contains(errOut, m.Seed) || !strings.Contains(errOut, "the only copy of its seed") {
		t.Errorf("stderr shows the seed, or does not say what the membership holds:\n%s", strings.ReplaceAll(errOut, m.Seed, "SEED"))
	}
	if err := seedLogin(url, m.User, m.Seed); err != nil {
		t.Fatalf("the issued seed does not log in: %v", err)
	}
	kp, _ := nkeys.FromSeed([]byte(m.Seed))
	pub, _ := kp.PublicKey()
	accounts, err := os.ReadFile(filepath.Join(st, "bus", "accounts.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(accounts, []byte(`{ nkey: "`+pub+`"`)) {
		t.Error("the accounts config does not hold alpha.shop's public key")
	}

	file := filepath.Join(t.TempDir(), "shop.json")
	if code, _, errOut := meshctl(t, append([]string{"credentials", "rotate", "alpha.shop", "-o", file}, common...)...); code != exitOK {
		t.Fatalf("rotate: exit %d\n%s", code, errOut)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the rotated membership's file: %v, %v", fi, err)
	}
	rotated := readMembershipFile(t, file)
	if rotated.Seed == m.Seed || rotated.Seed == "" {
		t.Fatal("rotate printed the old seed, or none")
	}
	if err := seedLogin(url, m.User, m.Seed); !refusedSeed(err) {
		t.Errorf("the rotated-out seed still logs in: %v", err)
	}
	if err := seedLogin(url, m.User, rotated.Seed); err != nil {
		t.Errorf("the rotated seed does not log in: %v", err)
	}

	if code, _, errOut := meshctl(t, append([]string{"credentials", "revoke", "alpha.shop"}, common...)...); code != exitOK {
		t.Fatalf("revoke: exit %d\n%s", code, errOut)
	}
	if err := seedLogin(url, m.User, rotated.Seed); !refusedSeed(err) {
		t.Errorf("the revoked seed still logs in: %v", err)
	}
	err = filepath.Walk(st, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		for _, seed := range []string{m.Seed, rotated.Seed} {
			if err == nil && bytes.Contains(data, []byte(seed)) {
				t.Errorf("%s holds an issued seed", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Changing bus.auth with a password in use: diff shows the plan refused and why, apply refuses
// it and changes nothing, a credential cannot be issued beside it; --allow-reissue applies it.
func TestApplyChangesBusAuthOnlyWithAllowReissue(t *testing.T) {
	t.Parallel()
	dir := writeMesh(t, map[string]string{"mesh.yaml": cliMesh})
	st := filepath.Join(t.TempDir(), "state")
	common := []string{"-f", dir, "--state", st, "--bcrypt-cost", "4"}
	if code, _, errOut := meshctl(t, append([]string{"credentials", "issue", "alpha.shop"}, common...)...); code != exitOK {
		t.Fatalf("issue: %s", errOut)
	}
	if code, _, errOut := meshctl(t, append([]string{"apply"}, common...)...); code != exitOK {
		t.Fatalf("apply: %s", errOut)
	}
	if err := os.WriteFile(filepath.Join(dir, "mesh.yaml"), []byte(cliNkeyMesh), 0o644); err != nil {
		t.Fatal(err)
	}
	diffArgs := []string{"diff", "-f", dir, "--state", st}
	code, out, errOut := meshctl(t, diffArgs...)
	if code != exitChanges || !strings.Contains(out, "bus.auth changes to nkey") || !strings.Contains(out, "REFUSED") ||
		!strings.Contains(out, "--allow-reissue") || !strings.Contains(out, "user alpha.shop (credential reissue)") {
		t.Fatalf("diff of a change of bus.auth: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := meshctl(t, append([]string{"apply"}, common...)...); code != exitError || !strings.Contains(errOut, "nothing was changed") {
		t.Fatalf("apply without --allow-reissue: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := meshctl(t, append([]string{"credentials", "issue", "alpha.postman"}, common...)...); code != exitError || out != "" ||
		!strings.Contains(errOut, "--allow-reissue") {
		t.Fatalf("issuing beside a pending change of bus.auth: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, _, errOut := meshctl(t, append([]string{"apply", "--allow-reissue"}, common...)...); code != exitOK {
		t.Fatalf("apply --allow-reissue: exit %d\n%s", code, errOut)
	}
	if code, out, _ := meshctl(t, diffArgs...); code != exitOK {
		t.Fatalf("diff after the change of bus.auth: exit %d\n%s", code, out)
	}
	code, out, errOut = meshctl(t, append([]string{"credentials", "issue", "alpha.shop"}, common...)...)
	if m, err := host.ReadMembership(strings.NewReader(out)); code != exitOK || err != nil || m.Seed == "" {
		t.Fatalf("issuing once bus.auth is nkey: exit %d, %v\n%s", code, err, errOut)
	}
}

// explain names an nkey host, which the server's log names by its public key, by its
// principal, from the state store; without the store, by the key.
func TestExplainNamesAnNkeyHostByItsPrincipal(t *testing.T) {
	t.Parallel()
	dir := writeMesh(t, map[string]string{"mesh.yaml": cliNkeyMesh})
	st := filepath.Join(t.TempDir(), "state")
	store, err := state.Open(st)
	if err != nil {
		t.Fatal(err)
	}
	seeds, err := store.MintNkeys(context.Background(), []string{"alpha.shop"}, "test")
	hashes, _ := store.Hashes(context.Background())
	store.Close()
	if err != nil {
		t.Fatal(err)
	}
	pub := hashes["alpha.shop"]
	log := filepath.Join(t.TempDir(), "nats.log")
	line := `[1] 2026/01/02 03:04:05.000000 [ERR] 127.0.0.1:40452 - cid:6 - "v1.55.0:go" - "MESH/nkey:` + pub +
		`" - Publish Violation - Subject "mesh.mod.postman.tool.status"` + "\n"
	if err := os.WriteFile(log, []byte(line+line), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := meshctl(t, "explain", "-f", dir, "--state", st, log)
	if code != exitOK || !strings.HasPrefix(out, "alpha.shop ") || !strings.Contains(out, "2 time(s)") || strings.Contains(out, pub) {
		t.Fatalf("explain with the store: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = meshctl(t, "explain", "-f", dir, "--state", filepath.Join(t.TempDir(), "none"), log)
	if code != exitOK || !strings.HasPrefix(out, "nkey:"+pub) || !strings.Contains(errOut, "public key") {
		t.Fatalf("explain without the store: exit %d\n%s\n%s", code, out, errOut)
	}
	if strings.Contains(out+errOut, seeds["alpha.shop"]) {
		t.Error("explain shows a seed")
	}
}
