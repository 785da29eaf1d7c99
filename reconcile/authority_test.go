package reconcile

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/bus/bustest"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/render"
)

// reloadedByHand is a cluster reloaded by request (systemMesh) brought to its first config:
// the first connect writes the file carrying meshctl's system user everywhere and asks for one
// reload by hand, which the test does; the session after it is converged.
func reloadedByHand(t *testing.T, ctx context.Context, c *bustest.TestCluster, f *fixture) *Session {
	t.Helper()
	_, err := Connect(ctx, f.mesh(), f.store, Options{Cost: 4, Logf: f.logf})
	f.ownSecrets()
	if !errors.Is(err, accounts.ErrNotLive) {
		t.Fatalf("the first connect did not ask for a reload by hand: %v", err)
	}
	signalled := configTimes(t, c)
	for _, srv := range c.Servers {
		if err := bus.PIDFileReloader(srv.PIDFile).Reload(ctx); err != nil {
			t.Fatal(err)
		}
	}
	awaitReloads(t, c, signalled)
	s := f.connect(ctx)
	f.mustApply(ctx, s)
	return s
}

// servedAsIs snapshots what every server of c serves — each accounts file on disk (the staged
// copy too) and when each server last loaded its config — and returns the check that none of
// it changed since.
func servedAsIs(t *testing.T, c *bustest.TestCluster) func(after string) {
	t.Helper()
	read := func() (map[string][]byte, []time.Time) {
		files := map[string][]byte{}
		for _, srv := range c.Servers {
			for _, p := range []string{srv.AccountsFile, srv.AccountsFile + ".staged"} {
				if data, err := os.ReadFile(p); err == nil {
					files[p] = data
				}
			}
		}
		return files, configTimes(t, c)
	}
	files, loaded := read()
	return func(after string) {
		t.Helper()
		now, at := read()
		for p, data := range files {
			if !bytes.Equal(now[p], data) {
				t.Errorf("%s wrote the accounts config at %s of a converged bus", after, p)
			}
		}
		for i, srv := range c.Servers {
			if !at[i].Equal(loaded[i]) {
				t.Errorf("%s reloaded server %s of a converged bus", after, srv.Name)
			}
		}
	}
}

// Whoever holds the controller's password is the same authority, with the same system user
// and generation principals. A store restored from the bus, and a CI apply from an empty
// directory, each prove with a login per server that the cluster serves their rendering, and
// write and reload nothing on it; and a change through the restored store is reloaded by
// request on every server, as the system user the servers know.
func TestWhoeverHoldsTheControllerPasswordIsTheSameAuthority(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	c := bustest.StartTestCluster(t, 3)
	f := newFixture(t, systemMesh(c))
	s := reloadedByHand(t, ctx, c, f)
	shop := f.mint(ctx, "alpha.shop")["alpha.shop"]
	f.mustApply(ctx, s)
	f.mustConverge(ctx, s)
	s.Close()
	data, err := os.ReadFile(filepath.Join(f.stateDi, "controller.password"))
	if err != nil {
		t.Fatal(err)
	}
	password := strings.TrimSpace(string(data))
	untouched := servedAsIs(t, c)

	st, what, err := Restore(ctx, f.mesh(), filepath.Join(t.TempDir(), "restored"), password, true)
	if err != nil {
		t.Fatalf("restoring: %v", err)
	}
	defer st.Close()
	f.logf("restored: %s", what)
	untouched("a restore")

	ci, _, err := Restore(ctx, f.mesh(), filepath.Join(t.TempDir(), "ci"), password, true)
	if err != nil {
		t.Fatalf("restoring the CI runner's store: %v", err)
	}
	defer ci.Close()
	runner := &fixture{t: t, dir: f.dir, stateDi: ci.Dir(), store: ci, log: f.log}
	cs := runner.connect(ctx)
	runner.mustConverge(ctx, cs)
	cs.Close()
	untouched("a CI apply")

	// A credential issued through the restored store, as `credentials issue` does: under the
	// apply lock on the bus, the config written and each server reloaded by request.
	restored := &fixture{t: t, dir: f.dir, stateDi: st.Dir(), store: st, log: f.log}
	stop, err := KeepOnBus(ctx, f.mesh(), st)
	if err != nil {
		t.Fatal(err)
	}
	audit := restored.mint(ctx, "alpha.audit")["alpha.audit"]
	before := configTimes(t, c)
	if what, err := SyncAccounts(ctx, f.mesh(), st); err != nil {
		t.Fatalf("issuing through the restored store: %v", err)
	} else {
		f.logf("issued: %s", what)
	}
	stop()
	for i, at := range configTimes(t, c) {
		if !at.After(before[i]) {
			t.Errorf("server %s was not reloaded for the restored store's change", c.Servers[i].Name)
		}
	}
	eachServer(t, ctx, c.Servers, "alpha.audit", audit, true)
	eachServer(t, ctx, c.Servers, "alpha.shop", shop, true)
	rs := restored.connect(ctx)
	restored.mustConverge(ctx, rs)
	f.secrets = append(f.secrets, password, audit)
}

// What an earlier meshctl wrote keeps working. Its system user's password was minted at random
// into STATE/system.password, and each accounts file's generation principal too, kept in the
// generation record. On the control host that wrote them, the file is proven by its record,
// and the system user's hash is replaced once by the derived one's — a change the plan shows —
// the server reloaded by request as the user it knows until then, with no reload by hand. A
// store restored from the bus cannot prove such a file: it writes it once more, and from then
// on whoever holds the controller's password proves it.
func TestWhatAnEarlierMeshctlWroteKeepsWorking(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	x := startExternal(t)
	f := newFixture(t, regexp.MustCompile(`reload: \{ pid_file: [^}]*\}`).ReplaceAllString(x.mesh(x.fingerprint), "reload: system"))
	_, err := Connect(ctx, f.mesh(), f.store, Options{Cost: 4, Logf: f.logf})
	f.ownSecrets()
	if !errors.Is(err, accounts.ErrNotLive) {
		t.Fatalf("the first connect did not ask for a reload by hand: %v", err)
	}
	if err := bus.PIDFileReloader(x.pidFile).Reload(ctx); err != nil {
		t.Fatal(err)
	}
	// A reload by signal is done a moment after the signal: seen once the file is served.
	firstFile := accounts.File{Target: busclient.Target{URL: x.url, Fingerprint: x.fingerprint}, StateDir: f.stateDi}
	if err := firstFile.ServesRecorded(ctx); err != nil {
		t.Fatalf("the server does not serve the first file after its reload by hand: %v", err)
	}
	s := f.connect(ctx)
	f.mustApply(ctx, s)

	// As an earlier meshctl left it: a system user minted at random and its password file,
	// a file stamped with a random generation principal, and the record of it.
	legacy := f.mint(ctx, render.SystemUser)[render.SystemUser]
	if err := os.WriteFile(filepath.Join(f.stateDi, "system.password"), []byte(legacy+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	earlier := func() {
		t.Helper()
		target, err := desired(ctx, f.store, f.mesh())
		if err != nil {
			t.Fatal(err)
		}
		a := s.Accounts.WrittenBy(s.Accounts.Manager, "")
		if err := a.Install(target.Rendering()); err != nil {
			t.Fatal(err)
		}
		if err := bus.PIDFileReloader(x.pidFile).Reload(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.ServesRecorded(ctx); err != nil {
			t.Fatalf("the server does not serve the file an earlier meshctl would have written: %v", err)
		}
	}
	earlier()

	s = f.connect(ctx)
	p, err := s.Plan(ctx, f.mesh(), plan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Changes) != 1 || p.Changes[0].Kind != plan.KindAccounts {
		t.Fatalf("the upgraded control host plans %d change(s), want the accounts config's system user alone: %+v", len(p.Changes), p.Changes)
	}
	f.mustApply(ctx, s)
	f.mustConverge(ctx, s)

	data, err := os.ReadFile(filepath.Join(f.stateDi, "controller.password"))
	if err != nil {
		t.Fatal(err)
	}
	password := strings.TrimSpace(string(data))
	served, err := os.ReadFile(x.accounts)
	if err != nil {
		t.Fatal(err)
	}
	st, _, err := Restore(ctx, f.mesh(), filepath.Join(t.TempDir(), "restored"), password, true)
	if err != nil {
		t.Fatalf("restoring: %v", err)
	}
	st.Close()
	if now, _ := os.ReadFile(x.accounts); !bytes.Equal(now, served) {
		t.Fatal("a restore wrote the file the upgraded control host wrote")
	}

	// The file stamped by an earlier meshctl again: a restored store writes it once more.
	earlier()
	served, err = os.ReadFile(x.accounts)
	if err != nil {
		t.Fatal(err)
	}
	st, what, err := Restore(ctx, f.mesh(), filepath.Join(t.TempDir(), "restored-again"), password, true)
	if err != nil {
		t.Fatalf("restoring beside an earlier meshctl's file: %v", err)
	}
	defer st.Close()
	f.logf("restored: %s", what)
	if now, _ := os.ReadFile(x.accounts); bytes.Equal(now, served) {
		t.Fatal("a restored store took a file it cannot prove for served")
	}
	restored := &fixture{t: t, dir: f.dir, stateDi: st.Dir(), store: st, log: f.log}
	restored.mustConverge(ctx, restored.connect(ctx))
	// The control host that wrote the earlier file proves the new one too.
	f.mustConverge(ctx, f.connect(ctx))
	f.secrets = append(f.secrets, password, legacy)
}
