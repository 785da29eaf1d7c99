package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/meshbus/meshctl/state"
	"github.com/meshbus/meshctl/wire"
)

// storedHashes is the store's credentials of the file modes, by principal.
func storedHashes(t *testing.T, ctx context.Context, dir string) map[string]string {
	t.Helper()
	store, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	hashes, err := store.Hashes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return hashes
}

// TestBusAuthPasswordToJWTIsAGuardedMigration holds a change of bus.auth from password to
// jwt: a mesh applied with passwords, two hosts issued their memberships, then pointed at servers
// in operator mode (its state kept). The apply refuses, naming the host for a new membership,
// and creates nothing of the mesh's nor drops the host's hash (before the fix it applied
// everything: the refused account JWT change was taken out before apply checked). A host
// issued its creds meanwhile is no longer counted, and the issue leaves the other host's hash
// alone; allowed, it creates the mesh's streams in the account, and drops the
// host's bcrypt hash once the account's JWT is proven; the host is then issued creds that log
// in on every server, and the mesh is converged.
func TestBusAuthPasswordToJWTIsAGuardedMigration(t *testing.T) {
	t.Parallel()
	st := t.TempDir()
	pw := writeMesh(t, map[string]string{"mesh.yaml": "bus:\n  listen: 127.0.0.1:0\nnodes: [{name: one}, {name: two}]\nmodules:\n" + jwtModules})
	if code, out, errOut := meshctl(t, "apply", "-f", pw, "--state", st); code != exitOK {
		t.Fatalf("apply with passwords: exit %d\n%s%s", code, out, errOut)
	}
	for _, host := range []string{"two.audit", "one.shop"} {
		if code, out, errOut := meshctl(t, "credentials", "issue", host, "-f", pw, "--state", st); code != exitOK || !strings.Contains(out, `"password"`) {
			t.Fatalf("credentials issue %s with passwords: exit %d\n%s", host, code, errOut)
		}
	}
	c := jwtCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	if storedHashes(t, ctx, st)["two.audit"] == "" {
		t.Fatal("the store holds no hash for the host issued")
	}
	desc := writeMesh(t, jwtDescription(c, jwtModules))

	code, out, errOut := meshctl(t, "apply", "-f", desc, "--state", st)
	if code == exitOK || !strings.Contains(out+errOut, "two.audit (credential reissue)") || !strings.Contains(out+errOut, "--allow-reissue") {
		t.Fatalf("apply moving to jwt without --allow-reissue: exit %d\n%s%s", code, out, errOut)
	}
	if storedHashes(t, ctx, st)["two.audit"] == "" {
		t.Fatal("the refused apply dropped the host's hash")
	}
	// A host issued its creds before the apply: its new membership is made, and the other
	// host's hash is left to the apply the operator allows.
	code, out, errOut = meshctl(t, "credentials", "issue", "one.shop", "-f", desc, "--state", st)
	var shop wire.Membership
	if err := json.Unmarshal([]byte(out), &shop); code != exitOK || err != nil || shop.JWT == "" {
		t.Fatalf("credentials issue one.shop before the apply: exit %d (%v)\n%s", code, err, errOut)
	}
	if storedHashes(t, ctx, st)["two.audit"] == "" {
		t.Fatal("credentials issue dropped another host's hash, which only an allowed apply may")
	}
	code, out, errOut = meshctl(t, "apply", "-f", desc, "--state", st)
	if code == exitOK || !strings.Contains(out+errOut, "1 host(s) holding one") || strings.Contains(out+errOut, "one.shop (credential reissue)") {
		t.Fatalf("apply with one host issued its creds: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut = meshctl(t, "apply", "-f", desc, "--state", st, "--allow-reissue"); code != exitOK {
		t.Fatalf("apply --allow-reissue: exit %d\n%s%s", code, out, errOut)
	}
	for _, host := range []string{"two.audit", "one.shop"} {
		if h, ok := storedHashes(t, ctx, st)[host]; ok {
			t.Fatalf("the allowed apply kept %s's credential of the accounts config (%d bytes)", host, len(h))
		}
	}
	loginEverywhere(t, c, shop.JWT, shop.Seed)
	code, out, errOut = meshctl(t, "credentials", "issue", "two.audit", "-f", desc, "--state", st)
	var mem wire.Membership
	if err := json.Unmarshal([]byte(out), &mem); code != exitOK || err != nil || mem.JWT == "" || mem.Seed == "" {
		t.Fatalf("credentials issue after the migration: exit %d (%v)\n%s", code, err, errOut)
	}
	loginEverywhere(t, c, mem.JWT, mem.Seed)
	if code, out, errOut := meshctl(t, "diff", "-f", desc, "--state", st); code != exitOK {
		t.Fatalf("diff after the migration: exit %d\n%s%s", code, out, errOut)
	}
}

// TestBusAuthJWTToPasswordIsAGuardedMigration holds the reverse: a mesh applied in operator
// mode, one host issued its creds, then pointed at a bus on meshctl's accounts config. The
// apply refuses, naming the host; allowed, it drops the host's user JWT once the accounts
// config is served, its key kept to revoke should bus.auth return to jwt, and the controller's
// user kept; the host is then issued a password that logs in.
func TestBusAuthJWTToPasswordIsAGuardedMigration(t *testing.T) {
	t.Parallel()
	st := t.TempDir()
	c := jwtCluster(t)
	desc := writeMesh(t, jwtDescription(c, jwtModules))
	if code, out, errOut := meshctl(t, "apply", "-f", desc, "--state", st); code != exitOK {
		t.Fatalf("apply in operator mode: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := meshctl(t, "credentials", "issue", "two.audit", "-f", desc, "--state", st); code != exitOK {
		t.Fatalf("credentials issue in operator mode: exit %d\n%s", code, errOut)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	pw := writeMesh(t, map[string]string{"mesh.yaml": "bus:\n  listen: 127.0.0.1:0\nnodes: [{name: one}, {name: two}]\nmodules:\n" + jwtModules})

	code, out, errOut := meshctl(t, "apply", "-f", pw, "--state", st)
	if code == exitOK || !strings.Contains(out+errOut, "two.audit (credential reissue") || !strings.Contains(out+errOut, "changing bus.auth from jwt") {
		t.Fatalf("apply leaving jwt without --allow-reissue: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut = meshctl(t, "apply", "-f", pw, "--state", st, "--allow-reissue"); code != exitOK {
		t.Fatalf("apply --allow-reissue: exit %d\n%s%s", code, out, errOut)
	}
	store, err := state.Open(st)
	if err != nil {
		t.Fatal(err)
	}
	users, err := store.JWTUsers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	revoked, err := store.JWTRevokedKeys(ctx)
	store.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := users["two.audit"]; ok || len(users) != 1 {
		t.Fatalf("the users JWT kept after leaving jwt: %v; want the controller's only", users)
	}
	if len(revoked) != 1 || revoked[0].Principal != "two.audit" {
		t.Fatalf("the keys kept to revoke: %+v; want two.audit's", revoked)
	}
	if code, out, errOut = meshctl(t, "credentials", "issue", "two.audit", "-f", pw, "--state", st); code != exitOK || !strings.Contains(out, `"password"`) {
		t.Fatalf("credentials issue after leaving jwt: exit %d\n%s", code, errOut)
	}
	if code, out, errOut := meshctl(t, "diff", "-f", pw, "--state", st); code != exitOK {
		t.Fatalf("diff after leaving jwt: exit %d\n%s%s", code, out, errOut)
	}
}
