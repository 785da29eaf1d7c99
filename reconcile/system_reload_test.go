package reconcile

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/bus/bustest"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// systemMesh is clusterMesh with every server reloaded by request, as meshctl's system user.
func systemMesh(c *bustest.TestCluster) string {
	return regexp.MustCompile(`reload: \{pid_file: [^}]*\}`).ReplaceAllString(clusterMesh(c), "reload: system")
}

// A cluster whose servers meshctl reloads by request: the first file is made live by the
// operator's one reload by hand, every change after it by a request each server answers, a
// refusal comes back as the server's own reason, and the system user can do nothing else.
func TestAClusterReloadedByRequest(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	c := bustest.StartTestCluster(t, 3)
	f := newFixture(t, systemMesh(c))

	// The servers do not know meshctl's system user yet: the file carrying it is written
	// everywhere, and the operator is told to reload each once.
	_, err := Connect(ctx, f.mesh(), f.store, Options{Cost: 4, Logf: f.logf})
	f.ownSecrets()
	t.Logf("the first connect: %v", err)
	if !errors.Is(err, accounts.ErrNotLive) || !strings.Contains(err.Error(), "reload that server once by hand") {
		t.Fatalf("the first connect did not say the servers must be reloaded once by hand: %v", err)
	}
	for _, srv := range c.Servers {
		path := srv.AccountsFile
		if srv == c.Servers[len(c.Servers)-1] {
			path += ".staged"
		}
		conf, err := os.ReadFile(path)
		if err != nil || !strings.Contains(string(conf), `"`+render.SystemUser+`"`) {
			t.Fatalf("server %s's accounts config does not carry the system user (%v)", srv.Name, err)
		}
	}
	signalled := configTimes(t, c)
	for _, srv := range c.Servers[:len(c.Servers)-1] {
		if err := bus.PIDFileReloader(srv.PIDFile).Reload(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The last server's file is copied into place by the copy command, which the failed
	// connect ran: its one reload by hand reads it too.
	if err := bus.PIDFileReloader(c.Servers[len(c.Servers)-1].PIDFile).Reload(ctx); err != nil {
		t.Fatal(err)
	}
	awaitReloads(t, c, signalled)

	s := f.connect(ctx)
	f.mustApply(ctx, s)
	f.mustConverge(ctx, s)

	// A change: each server reloads on request, and each is seen serving it.
	before := configTimes(t, c)
	shop := f.mint(ctx, "alpha.shop")["alpha.shop"]
	f.mustApply(ctx, s)
	eachServer(t, ctx, c.Servers, "alpha.shop", shop, true)
	for i, at := range configTimes(t, c) {
		if !at.After(before[i]) {
			t.Fatalf("server %s was not reloaded", c.Servers[i].Name)
		}
	}

	// The system user may ask for a reload and hear the answer, nothing else of the system
	// account.
	controller, err := state.ReadControllerPassword(f.stateDi)
	if err != nil {
		t.Fatal(err)
	}
	pw := state.SystemPasswordFor(controller)
	sys, err := busclient.DialAlone(ctx, busclient.Target{URL: c.Servers[0].URL}, busclient.Credential{User: render.SystemUser, Password: pw},
		nats.CustomInboxPrefix(render.Inbox(render.SystemUser)))
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	if _, err := sys.Request("$SYS.REQ.SERVER.PING", nil, time.Second); err == nil {
		t.Fatal("the system user may ping every server")
	}
	if v, err := sys.WaitViolation(ctx, "$SYS.REQ.SERVER.PING"); err != nil || v == nil {
		t.Fatalf("the server did not refuse the system user's ping: %v", err)
	}
	if _, err := sys.SubscribeSync("$SYS.ACCOUNT.>"); err != nil {
		t.Fatal(err)
	}
	if v, err := sys.WaitViolation(ctx, "$SYS.ACCOUNT.>"); err != nil || v == nil {
		t.Fatalf("the server did not refuse the system user's subscription to the account events: %v", err)
	}

	// One server refusing its reload says why at once, in the server's words, and leaves all
	// three on the previous file.
	n2 := c.Servers[1]
	if err := os.WriteFile(n2.ConfigFile, []byte(strings.Replace(string(n2.Original), "server_name: n2", "server_name: renamed", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	audit := f.mint(ctx, "alpha.audit")["alpha.audit"]
	started := time.Now()
	_, _, err = f.apply(ctx, s, RunOptions{})
	t.Logf("the refused apply took %s: %v", time.Since(started).Round(time.Millisecond), err)
	if !errors.Is(err, accounts.ErrRefused) || !strings.Contains(err.Error(), "config reload not supported for ServerName") {
		t.Fatalf("a server refusing its reload did not fail the apply with the server's reason: %v", err)
	}
	eachServer(t, ctx, c.Servers, "alpha.audit", audit, false)
	servesItsRecord(t, ctx, c, s)
	if err := os.WriteFile(n2.ConfigFile, n2.Original, 0o600); err != nil {
		t.Fatal(err)
	}
	f.mustApply(ctx, s)
	eachServer(t, ctx, c.Servers, "alpha.audit", audit, true)
	f.mustConverge(ctx, s)
	f.assertNoSecretLeaked()
}
