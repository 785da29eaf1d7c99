package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/lockedbuf"
	"github.com/meshbus/meshctl/internal/testnats/opmode"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/wire"
)

// embeddedJWTMesh is a quickstart-like mesh on the embedded bus in operator mode, modules apart.
func embeddedJWTMesh(modules string) string {
	return "bus:\n  auth: jwt\n  listen: 127.0.0.1:0\nnodes: [{name: one}, {name: two}]\nmodules:\n" + modules
}

// embeddedVarz is what the embedded bus says of itself over the system account, as the
// system user of the operator meshctl made in stateDir: when it last loaded its config.
func embeddedConfigLoadTime(t *testing.T, url, stateDir string) time.Time {
	t.Helper()
	creds := filepath.Join(stateDir, reconcile.OperatorStoreDir, "keys", "creds", accounts.FreshOperatorName, "SYSTEM", "sys.creds")
	nc, err := nats.Connect(url, nats.UserCredentials(creds), nats.NoReconnect())
	if err != nil {
		t.Fatalf("logging in as the fresh operator's system user: %v", err)
	}
	defer nc.Close()
	msg, err := nc.Request("$SYS.REQ.SERVER.PING.VARZ", nil, 30*time.Second)
	if err != nil {
		t.Fatalf("asking the embedded bus its varz: %v", err)
	}
	var v struct {
		Data struct {
			ConfigLoadTime time.Time `json:"config_load_time"`
		} `json:"data"`
	}
	if err := json.Unmarshal(msg.Data, &v); err != nil || v.Data.ConfigLoadTime.IsZero() {
		t.Fatalf("the embedded bus's varz %s: %v", msg.Data, err)
	}
	return v.Data.ConfigLoadTime
}

// issueMembership issues user's credential and returns its membership.
func issueMembership(t *testing.T, user, desc, stateDir string) wire.Membership {
	t.Helper()
	code, out, errOut := meshctl(t, "credentials", "issue", user, "-f", desc, "--state", stateDir)
	if code != exitOK {
		t.Fatalf("credentials issue %s: exit %d\n%s%s", user, code, out, errOut)
	}
	var mem wire.Membership
	if err := json.Unmarshal([]byte(out), &mem); err != nil || mem.JWT == "" || mem.Seed == "" || mem.User != user {
		t.Fatalf("the membership %q (%v); want the user JWT and the seed", out, err)
	}
	return mem
}

// watchedConn is a connection of mem's that does not reconnect, to see it cut.
func watchedConn(t *testing.T, mem wire.Membership) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(mem.Address, nats.UserJWTAndSeed(mem.JWT, mem.Seed), nats.NoReconnect())
	if err != nil {
		t.Fatalf("logging in as %s: %v", mem.User, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestApplyDiffAndCredentialsOnTheEmbeddedBusInOperatorMode is the operator-mode cluster
// test's twin on the embedded bus, with the operator meshctl makes: the first apply makes
// the operator in <state>/nsc (every seed 0600) and serves the bus in operator mode; diff is
// clean and an apply of the same mesh changes nothing; hosts issued by hand join and do their
// job (an event published reaches its follower); a permission change shows as the
// credential's reissue and, applied by watch, cuts that host's old JWT and leaves the other
// host connected; a revoke disconnects its host; and the bus never reloads.
func TestApplyDiffAndCredentialsOnTheEmbeddedBusInOperatorMode(t *testing.T) {
	t.Parallel()
	modules := "  - {name: shop, on: [one], emits: [order.placed]}\n  - {name: audit, on: [two], follows: [shop/order.placed]}\n  - {name: mailer, on: [two], emits: [sent]}\n"
	desc := writeMesh(t, map[string]string{"mesh.yaml": embeddedJWTMesh(modules)})
	st := filepath.Join(t.TempDir(), "state")

	if code, out, errOut := meshctl(t, "apply", "-f", desc, "--state", st); code != exitOK || !strings.Contains(errOut, "made operator "+accounts.FreshOperatorName) {
		t.Fatalf("first apply: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := meshctl(t, "diff", "-f", desc, "--state", st); code != exitOK {
		t.Fatalf("diff after apply: exit %d\n%s%s", code, out, errOut)
	}
	seeds := 0
	err := filepath.WalkDir(filepath.Join(st, reconcile.OperatorStoreDir), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir() && fi.Mode().Perm() != 0o700:
			t.Errorf("%s is %v; want 0700", path, fi.Mode().Perm())
		case !d.IsDir() && fi.Mode().Perm() != 0o600:
			t.Errorf("%s is %v; want 0600", path, fi.Mode().Perm())
		}
		if strings.HasSuffix(path, ".nk") {
			seeds++
		}
		return nil
	})
	if err != nil || seeds != 6 {
		t.Fatalf("the fresh operator's store: %d seeds (%v); want 6", seeds, err)
	}

	// watch serves the bus for the hosts from here on.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &lockedbuf.Buffer{}
	done, stopped := make(chan int, 1), make(chan struct{})
	go func() {
		defer close(stopped)
		done <- run(ctx, []string{"watch", "-f", desc, "--state", st, "--debounce", "50ms", "--resync", "1h"}, &bytes.Buffer{}, stderr)
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
		if t.Failed() {
			t.Logf("watch's log:\n%s", stderr)
		}
	})
	inSync := func(what string) {
		t.Helper()
		testwait.Until(t, what, func() error {
			if code, out, errOut := meshctl(t, "diff", "-f", desc, "--state", st); code != exitOK {
				return fmt.Errorf("diff exited %d:\n%s%s", code, out, errOut)
			}
			return nil
		})
	}
	// Waited for in watch's log: a command run before watch's bus is up starts a bus of its
	// own for a moment, which watch's start then retries around.
	testwait.Until(t, "watch serving the bus", func() error {
		if !strings.Contains(stderr.String(), "started the embedded bus") {
			return errors.New("watch has not started the embedded bus")
		}
		return nil
	})
	if code, out, errOut := meshctl(t, "apply", "-f", desc, "--state", st, "--wait"); code != exitOK || !strings.Contains(out, "in sync") || !strings.Contains(errOut, "served by meshctl pid") {
		t.Fatalf("apply of the mesh applied: exit %d; want in sync on watch's bus\n%s%s", code, out, errOut)
	}

	shopMem := issueMembership(t, "one.shop", desc, st)
	auditMem := issueMembership(t, "two.audit", desc, st)
	loaded := embeddedConfigLoadTime(t, shopMem.Address, st)
	jobCtx, jobCancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer jobCancel()
	shop, err := host.Join(jobCtx, shopMem)
	if err != nil {
		t.Fatalf("the shop joining with its membership: %v", err)
	}
	defer shop.Close()
	audit, err := host.Join(jobCtx, auditMem)
	if err != nil {
		t.Fatalf("the audit joining with its membership: %v", err)
	}
	defer audit.Close()
	got := make(chan string, 1)
	cc, err := audit.Events(jobCtx, model.Instance{Node: "two", Module: "audit"}, func(m jetstream.Msg) {
		_ = m.Ack()
		select {
		case got <- string(m.Data()):
		default:
		}
	})
	if err != nil {
		t.Fatalf("the audit following its events: %v", err)
	}
	defer cc.Stop()
	if _, err := shop.Publish(jobCtx, "mesh.mod.shop.event.order.placed", []byte("order 1")); err != nil {
		t.Fatalf("the shop publishing its event: %v", err)
	}
	select {
	case data := <-got:
		if data != "order 1" {
			t.Fatalf("the audit got %q", data)
		}
	case <-jobCtx.Done():
		t.Fatal("the audit never got the shop's event")
	}
	shopConn, auditConn := watchedConn(t, shopMem), watchedConn(t, auditMem)

	// The audit follows one more event: its credential is reissued, and watch's push cuts the
	// JWT it holds; the shop, whose grants did not change, stays connected.
	changed := strings.Replace(modules, "follows: [shop/order.placed]", "follows: [shop/order.placed, mailer/sent]", 1)
	if code, out, errOut := meshctl(t, "diff", "-f", writeMesh(t, map[string]string{"mesh.yaml": embeddedJWTMesh(changed)}), "--state", st); code != exitChanges ||
		!strings.Contains(out, "~ accounts JWT") || !strings.Contains(out, "user two.audit (credential reissue)") {
		t.Fatalf("diff of a permission change: exit %d\n%s%s", code, out, errOut)
	}
	if err := os.WriteFile(filepath.Join(desc, "mesh.yaml"), []byte(embeddedJWTMesh(changed)), 0o644); err != nil {
		t.Fatal(err)
	}
	inSync("watch applying a permission change")
	disconnectedEverywhere(t, "the audit's old JWT", []*nats.Conn{auditConn})
	// watch records the new JWT in force once its push is proven, just after the servers
	// apply it (what the diff saw).
	testwait.Until(t, "the store holding the audit's new JWT in force", func() error {
		users, err := openedJWTUsers(t, st)
		if err != nil || !strings.Contains(users["two.audit"], "mesh.mod.mailer.event.sent") {
			return fmt.Errorf("the audit's JWT in force does not grant its new event (%v)", err)
		}
		return nil
	})
	if !shopConn.IsConnected() {
		t.Errorf("the shop, whose grants did not change, was disconnected: %v", shopConn.LastError())
	}

	if code, out, errOut := meshctl(t, "credentials", "revoke", "one.shop", "-f", desc, "--state", st); code != exitOK {
		t.Fatalf("credentials revoke: exit %d\n%s%s", code, out, errOut)
	}
	disconnectedEverywhere(t, "the revoked shop", []*nats.Conn{shopConn})
	if err := joins(shopMem); err == nil {
		t.Error("the revoked shop's membership still joins")
	}

	if at := embeddedConfigLoadTime(t, auditMem.Address, st); !at.Equal(loaded) {
		t.Errorf("the embedded bus reloaded: config_load_time %s, was %s", at, loaded)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("watch exited %d when stopped; want 0", code)
	}
}

// TestRenderedServerConfigRunsAFreshExternalBus holds a fresh deployment on an external bus:
// with bus.auth: jwt and no bus.operator, `meshctl render -o server` makes the operator in the
// state directory and prints the servers' config; three nats-server processes started on
// exactly that text, their own listen, jetstream and cluster blocks apart, take the mesh from
// `meshctl apply`, which then converges, with no server reloading. A second render prints the
// same text: the operator is read back, never made again.
func TestRenderedServerConfigRunsAFreshExternalBus(t *testing.T) {
	t.Parallel()
	st := filepath.Join(t.TempDir(), "state")
	sysCreds := filepath.Join(st, reconcile.OperatorStoreDir, "keys", "creds", accounts.FreshOperatorName, "SYSTEM", "sys.creds")
	streams := "  jetstream:\n    streams:\n      control: {max_bytes: 16MiB}\n      events: {max_bytes: 16MiB}\n      nodes: {max_bytes: 16MiB}\n      seats: {max_bytes: 16MiB}\n"
	describe := func(urls []string) string {
		var b strings.Builder
		b.WriteString("bus:\n  auth: jwt\n  replicas: 3\n  servers:\n")
		for _, u := range urls {
			fmt.Fprintf(&b, "    - url: %s\n", u)
		}
		return writeMesh(t, map[string]string{"bus.yaml": b.String() + streams, "mesh.yaml": "nodes: [{name: one}, {name: two}]\nmodules:\n" + jwtModules})
	}
	// The servers' config does not depend on their addresses, which are known once they run.
	planned := describe([]string{"nats://127.0.0.1:4222", "nats://127.0.0.1:4223", "nats://127.0.0.1:4224"})
	render := func(resolverDir string) string {
		t.Helper()
		code, out, errOut := meshctl(t, "render", "-f", planned, "--state", st, "-o", "server", "--resolver-dir", resolverDir, "--interval", "2s")
		if code != exitOK {
			t.Fatalf("render -o server: exit %d\n%s%s", code, out, errOut)
		}
		return out
	}
	var printed []string
	c := opmode.StartClusterTrusting(t, opmode.ClusterOptions{ResolverInterval: "2s"}, func(resolverDir, interval string) string {
		text := render(resolverDir)
		printed = append(printed, text)
		return text
	}, sysCreds)
	if again := render(c.Servers[0].ResolverDir); again != printed[0] {
		t.Errorf("a second render printed another config:\n%s\nfirst:\n%s", again, printed[0])
	}
	for _, srv := range c.Servers {
		conf, err := os.ReadFile(srv.ConfigFile)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(conf), render(srv.ResolverDir)) {
			t.Fatalf("%s does not run on what render printed:\n%s", srv.Name, conf)
		}
	}
	loaded := map[string]time.Time{}
	for _, srv := range c.Servers {
		at, err := srv.ConfigLoadTime()
		if err != nil {
			t.Fatal(err)
		}
		loaded[srv.Name] = at
	}

	desc := describe(c.URLs())
	if code, out, errOut := meshctl(t, "apply", "-f", desc, "--state", st); code != exitOK {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := meshctl(t, "diff", "-f", desc, "--state", st); code != exitOK {
		t.Fatalf("diff after apply: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := meshctl(t, "apply", "-f", desc, "--state", st, "--wait"); code != exitOK || !strings.Contains(out, "in sync") {
		t.Fatalf("apply of the mesh applied: exit %d; want in sync\n%s%s", code, out, errOut)
	}
	mem := issueMembership(t, "two.audit", desc, st)
	loginEverywhere(t, c, mem.JWT, mem.Seed)
	for _, srv := range c.Servers {
		if at, err := srv.ConfigLoadTime(); err != nil || !at.Equal(loaded[srv.Name]) {
			t.Errorf("%s reloaded: config_load_time %s, was %s (%v)", srv.Name, at, loaded[srv.Name], err)
		}
	}
}
