package main

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/meshbus/meshctl/internal/testnats/opmode"
	"github.com/meshbus/meshctl/state"
)

// connectCreds logs a host in on every server of c with its creds file.
func connectCreds(t *testing.T, c *opmode.Cluster, file string) []*nats.Conn {
	t.Helper()
	var conns []*nats.Conn
	for _, srv := range c.Servers {
		nc, err := nats.Connect(srv.URL, nats.UserCredentials(file), nats.NoReconnect())
		if err != nil {
			t.Fatalf("the creds %s do not log in to %s: %v", filepath.Base(file), srv.Name, err)
		}
		t.Cleanup(nc.Close)
		conns = append(conns, nc)
	}
	return conns
}

// TestStateRestoreOfAJWTMesh holds the store of a jwt mesh on the bus: after users issued, one
// reissued for a grant change and one revoked, a store restored from the bus into a fresh
// directory with the controller's creds holds the same users, plans nothing, and revokes a
// user it holds on every server.
func TestStateRestoreOfAJWTMesh(t *testing.T) {
	t.Parallel()
	c := jwtCluster(t)
	files := jwtDescription(c, jwtModules)
	desc := writeMesh(t, files)
	st := t.TempDir()
	run := func(what string, want int, args ...string) string {
		t.Helper()
		code, out, errOut := meshctl(t, args...)
		if code != want {
			t.Fatalf("%s: exit %d, want %d\n%s%s", what, code, want, out, errOut)
		}
		return out + errOut
	}
	run("apply", exitOK, "apply", "-f", desc, "--state", st)
	creds := map[string]string{}
	for _, p := range []string{"one.shop", "two.audit", "two.mailer"} {
		creds[p] = filepath.Join(t.TempDir(), p+".creds")
		run("credentials issue "+p, exitOK, "credentials", "issue", p, "-f", desc, "--state", st, "--creds", creds[p])
	}
	// Audit follows one more event: its JWT is reissued for the same key.
	changed := strings.Replace(jwtModules, "follows: [shop/order.placed]", "follows: [shop/order.placed, mailer/sent]", 1)
	files["mesh.yaml"] = "nodes: [{name: one}, {name: two}]\nmodules:\n" + changed
	desc2 := writeMesh(t, files)
	run("apply of a grant change", exitOK, "apply", "-f", desc2, "--state", st)
	run("credentials revoke two.mailer", exitOK, "credentials", "revoke", "two.mailer", "-f", desc2, "--state", st)
	shop := connectCreds(t, c, creds["one.shop"])

	restoredDir := filepath.Join(t.TempDir(), "restored")
	run("state restore", exitOK, "state", "restore", "-f", desc2, "--state", restoredDir,
		"--controller-creds", filepath.Join(st, "controller.creds"))
	if fi, err := os.Stat(filepath.Join(restoredDir, "controller.creds")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the restored controller's creds: %v %v; want a 0600 file", fi, err)
	}
	original, restored := jwtUsersIn(t, st), jwtUsersIn(t, restoredDir)
	if original != restored || !strings.Contains(restored, "one.shop") || strings.Contains(restored, "two.mailer") {
		t.Errorf("the restored store's users:\n%s\nthe original's:\n%s", restored, original)
	}
	if out := run("diff of the restored store", exitOK, "diff", "-f", desc2, "--state", restoredDir); strings.Contains(out, "accounts JWT") {
		t.Errorf("the restored store plans a change of the account:\n%s", out)
	}

	// A revoke from the restored store cuts the host on every server.
	run("credentials revoke from the restored store", exitOK, "credentials", "revoke", "one.shop", "-f", desc2, "--state", restoredDir)
	disconnectedEverywhere(t, "the shop revoked from the restored store", shop)
	run("diff after the revoke", exitOK, "diff", "-f", desc2, "--state", restoredDir)
}

// jwtUsersIn is the users and the keys still to revoke of the store in dir, one a line.
func jwtUsersIn(t *testing.T, dir string) string {
	t.Helper()
	s, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	users, err := s.JWTUsers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	revoked, err := s.JWTRevokedKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, p := range slices.Sorted(maps.Keys(users)) {
		u := users[p]
		b.WriteString(p + " " + u.UserKey + " " + u.JWT + " pending " + u.Pending + "\n")
	}
	for _, r := range revoked {
		b.WriteString("to revoke " + r.UserKey + "\n")
	}
	return b.String()
}

// Two watches of a jwt mesh, the second's store restored with the controller's creds: the
// second stands by while the first leads, follows the users issued through the first, and
// once the first is killed leads and revokes such a user on every server, planning nothing
// more after.
func TestAStandbyOfAJWTMeshTakesOverAndRevokes(t *testing.T) {
	t.Parallel()
	c := jwtCluster(t)
	desc := writeMesh(t, jwtDescription(c, jwtModules))
	stateA, stateB := t.TempDir(), filepath.Join(t.TempDir(), "b")
	if code, out, errOut := meshctl(t, "apply", "-f", desc, "--state", stateA); code != exitOK {
		t.Fatalf("the first apply: exit %d\n%s%s", code, out, errOut)
	}
	a := watchProcess(t, desc, stateA)
	a.logged(t, 0, "the first watch leading", "leading the mesh")
	b := watchProcess(t, desc, stateB, "--controller-creds", filepath.Join(stateA, "controller.creds"))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the first watch's log:\n%s\nthe second's:\n%s", a.stderr.String(), b.stderr.String())
		}
	})
	b.logged(t, 0, "the second watch standing by", "standing by: another watch leads the mesh")

	shopCreds := filepath.Join(t.TempDir(), "shop.creds")
	if code, out, errOut := meshctl(t, "credentials", "issue", "one.shop", "-f", desc, "--state", stateA, "--creds", shopCreds); code != exitOK {
		t.Fatalf("credentials issue through the leader's store: exit %d\n%s%s", code, out, errOut)
	}
	shop := connectCreds(t, c, shopCreds)

	mark := len(b.stderr.String())
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-a.exited
	b.logged(t, mark, "the standby leading", "leading the mesh")
	if code, out, errOut := meshctl(t, "credentials", "revoke", "one.shop", "-f", desc, "--state", stateB); code != exitOK {
		t.Fatalf("credentials revoke through the new leader's store: exit %d\n%s%s", code, out, errOut)
	}
	disconnectedEverywhere(t, "the shop revoked by the new leader", shop)
	if code, out, errOut := meshctl(t, "diff", "-f", desc, "--state", stateB); code != exitOK {
		t.Errorf("diff of the new leader's store: exit %d\n%s%s", code, out, errOut)
	}
}
