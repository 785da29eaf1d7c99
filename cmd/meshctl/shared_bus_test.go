package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/meshbus/meshctl/bus/bustest"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/testnats/opmode"
	"github.com/meshbus/meshctl/render"
)

// A bus shared with the operator's own accounts (bus.accounts: account): each server's config
// holds an account OTHER with its own user, a system account SYS with the operator's own user,
// and includes meshctl's file inside that accounts block. Through more than 20 of meshctl's
// changes — applies adding nodes, credentials issued, rotated (the controller's among them) and
// revoked, each proven served on every server — the operator's config files stay byte for byte
// and mtime as they were, an OTHER user connected before the first change keeps publishing and
// receiving without a disconnect, the bus converges, and the operator's system user (which
// meshctl reloads the servers as, and never writes) runs `nats server report connections`.
func TestASharedServerKeepsTheOperatorsAccountsThroughMeshctlsChanges(t *testing.T) {
	t.Parallel()
	sharedBusThroughChanges(t, bustest.StartSharedTestCluster(t, 1))
}

// The same on a three-server cluster: two servers reloaded by request as the operator's
// system user — here its user by nkey, its seed in a file — the third by its pid file.
func TestASharedClusterKeepsTheOperatorsAccountsThroughMeshctlsChanges(t *testing.T) {
	t.Parallel()
	sharedBusThroughChanges(t, bustest.StartSharedTestCluster(t, 3))
}

// sharedMesh is the description of a mesh on c, sharing its servers under bus.accounts:
// account, with the nodes alpha and extra; systemUser is bus.system_user's value.
func sharedMesh(c *bustest.TestCluster, systemUser string, extra []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "bus:\n  accounts: account\n  system_user: %s\n", systemUser)
	if len(c.Servers) == 1 {
		srv := c.Servers[0]
		fmt.Fprintf(&b, "  url: %s\n  accounts_file: %s\n  reload: system\n", srv.URL, srv.AccountsFile)
	} else {
		fmt.Fprintf(&b, "  replicas: %d\n  servers:\n", len(c.Servers))
		for i, srv := range c.Servers {
			reload := "system"
			if i == len(c.Servers)-1 {
				reload = fmt.Sprintf("{pid_file: %s}", srv.PIDFile)
			}
			fmt.Fprintf(&b, "    - url: %s\n      accounts_file: %s\n      reload: %s\n", srv.URL, srv.AccountsFile, reload)
		}
	}
	b.WriteString("nodes:\n  - name: alpha\n")
	for _, n := range extra {
		fmt.Fprintf(&b, "  - name: %s\n", n)
	}
	b.WriteString("modules:\n  - name: shop\n    on: [alpha]\n    emits: [order.placed]\n")
	return b.String()
}

// Under bus.accounts: account, meshctl render prints the file as meshctl writes it: the MESH
// account alone, which the server's parser reads inside an accounts block.
func TestRenderPrintsTheAccountAlone(t *testing.T) {
	t.Parallel()
	desc := writeMesh(t, map[string]string{"mesh.yaml": `bus:
  url: nats://127.0.0.1:4222
  accounts_file: /etc/nats/mesh-account.conf
  accounts: account
nodes:
  - name: alpha
`})
	code, out, errOut := meshctl(t, "render", "-f", desc)
	if code != exitOK {
		t.Fatalf("render: exit %d\n%s", code, errOut)
	}
	if strings.Contains(out, "\naccounts {") || !strings.Contains(out, "  "+render.Account+" {\n") {
		t.Fatalf("render does not print the MESH account alone:\n%s", out)
	}
	if _, ok := render.WholeBlock([]byte(out)); !ok {
		t.Fatalf("render prints something meshctl would not write:\n%s", out)
	}
}

// fileState is a file's bytes and modification time.
type fileState struct {
	data  []byte
	mtime time.Time
}

func statFile(t *testing.T, path string) fileState {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fileState{data: data, mtime: fi.ModTime()}
}

func sharedBusThroughChanges(t *testing.T, c *bustest.TestCluster) {
	dir := t.TempDir()
	// One server asks as the operator's system user by password, the cluster as its user by
	// nkey: each file as an operator writes it, with a newline at its end.
	secret, systemUser := bustest.OperatorSystemPassword, "{ user: "+bustest.OperatorSystemUser+", password_file: %s }"
	if len(c.Servers) > 1 {
		secret, systemUser = bustest.OperatorSystemSeed(), "{ seed_file: %s }"
	}
	secretFile := filepath.Join(dir, "ops.secret")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	systemUser = fmt.Sprintf(systemUser, secretFile)
	desc := filepath.Join(dir, "mesh")
	if err := os.MkdirAll(desc, 0o755); err != nil {
		t.Fatal(err)
	}
	describe := func(extra []string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(desc, "mesh.yaml"), []byte(sharedMesh(c, systemUser, extra)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	describe(nil)
	st := filepath.Join(dir, "state")
	common := []string{"-f", desc, "--state", st, "--bcrypt-cost", "4"}
	configs := map[string]fileState{}
	for _, srv := range c.Servers {
		configs[srv.ConfigFile] = statFile(t, srv.ConfigFile)
	}

	// An OTHER user on the first server publishes, one on the last receives: through the
	// cluster's routes where there are several.
	var disconnects atomic.Int32
	other := func(srv *bustest.TestClusterServer) *nats.Conn {
		t.Helper()
		nc, err := nats.Connect(srv.URL, nats.UserInfo(bustest.OtherUser, bustest.OtherPassword), nats.NoReconnect(),
			nats.DisconnectErrHandler(func(*nats.Conn, error) { disconnects.Add(1) }))
		if err != nil {
			t.Fatalf("the operator's OTHER user cannot log in to %s: %v", srv.Name, err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	pub, sub := other(c.Servers[0]), other(c.Servers[len(c.Servers)-1])
	received, err := sub.SubscribeSync("other.work")
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	roundTrips := 0
	otherStillWorks := func(after string) {
		t.Helper()
		roundTrips++
		payload := fmt.Sprintf("after %s (%d)", after, roundTrips)
		// The subscription reaches the first server over the route a moment after it is made:
		// the first message may go before it does, so each is sent again until one arrives.
		deadline := time.Now().Add(60 * time.Second)
		for {
			if err := pub.Publish("other.work", []byte(payload)); err != nil {
				t.Fatalf("the OTHER user cannot publish %s: %v", after, err)
			}
			msg, err := received.NextMsg(time.Second)
			if err == nil && string(msg.Data) == payload {
				break
			}
			if err != nil && !errors.Is(err, nats.ErrTimeout) || time.Now().After(deadline) {
				t.Fatalf("the OTHER user receives nothing %s: %v", after, err)
			}
		}
		if n := disconnects.Load(); n > 0 || !pub.IsConnected() || !sub.IsConnected() {
			t.Fatalf("an OTHER user was disconnected %s (%d disconnects)", after, n)
		}
	}
	otherStillWorks("connecting")

	run := func(what string, args ...string) string {
		t.Helper()
		code, out, errOut := meshctl(t, append(args, common...)...)
		if code != exitOK {
			t.Fatalf("%s: exit %d\n%s%s", what, code, out, errOut)
		}
		otherStillWorks(what)
		return out
	}
	// logIn reports on which servers user logs in with password, each server alone.
	logIn := func(user, password string) (in []string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		for _, srv := range c.Servers {
			conn, err := busclient.DialAlone(ctx, busclient.Target{URL: srv.URL}, busclient.Credential{User: user, Password: password})
			if err == nil {
				conn.Close()
				in = append(in, srv.Name)
			} else if !errors.Is(err, nats.ErrAuthorization) {
				t.Fatalf("logging in as %s to %s: %v", user, srv.Name, err)
			}
		}
		return in
	}
	changes := 0
	run("the first apply", "apply")
	changes++
	var extra []string
	for k := range 5 {
		node := fmt.Sprintf("n%d", k)
		extra = append(extra, node)
		describe(extra)
		run("an apply adding node "+node, "apply")
		enrol := render.EnrolUser(node)
		issued, err := host.ReadMembership(strings.NewReader(run("issuing "+enrol, "credentials", "issue", enrol)))
		if err != nil {
			t.Fatal(err)
		}
		rotated, err := host.ReadMembership(strings.NewReader(run("rotating "+enrol, "credentials", "rotate", enrol)))
		if err != nil {
			t.Fatal(err)
		}
		if in := logIn(enrol, rotated.Password); len(in) != len(c.Servers) {
			t.Fatalf("the rotated %s logs in only to %v", enrol, in)
		}
		if in := logIn(enrol, issued.Password); len(in) > 0 {
			t.Fatalf("the password of %s rotated away still logs in to %v", enrol, in)
		}
		run("revoking "+enrol, "credentials", "revoke", enrol)
		if in := logIn(enrol, rotated.Password); len(in) > 0 {
			t.Fatalf("the revoked %s still logs in to %v", enrol, in)
		}
		changes += 4
		if k == 2 {
			run("rotating the controller", "credentials", "rotate", "controller")
			changes++
		}
	}
	if changes < 20 {
		t.Fatalf("the test made %d changes, fewer than 20", changes)
	}
	if code, out, errOut := meshctl(t, "diff", "-f", desc, "--state", st); code != exitOK || !strings.Contains(out+errOut, "in sync") {
		t.Fatalf("the diff after %d changes: exit %d\n%s%s", changes, code, out, errOut)
	}

	for _, srv := range c.Servers {
		if got := statFile(t, srv.ConfigFile); !bytes.Equal(got.data, configs[srv.ConfigFile].data) || !got.mtime.Equal(configs[srv.ConfigFile].mtime) {
			t.Errorf("server %s's own config (OTHER and SYS) changed:\n%s", srv.Name, got.data)
		}
		conf, err := os.ReadFile(srv.AccountsFile)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(conf, []byte("\naccounts {")) || bytes.Contains(conf, []byte(render.SystemUser)) ||
			bytes.Contains(conf, []byte(bustest.OtherAccount)) || bytes.Contains(conf, []byte("SYS")) {
			t.Errorf("server %s's file of meshctl's holds more than the MESH account:\n%s", srv.Name, conf)
		}
	}
	if in := logIn(bustest.OtherUser, bustest.OtherPassword); len(in) != len(c.Servers) {
		t.Errorf("a new OTHER login is let in only by %v", in)
	}

	// The operator's system user asks every server for its connections, the OTHER users'
	// among them.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	home := t.TempDir()
	cmd := exec.CommandContext(ctx, opmode.NatsCLIBinary(t), "--server", c.Servers[0].URL,
		"--user", bustest.OperatorSystemUser, "--password", bustest.OperatorSystemPassword, "server", "report", "connections")
	cmd.Env = []string{"HOME=" + home, "XDG_CONFIG_HOME=" + home}
	var report, cliErr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &report, &cliErr
	if err := cmd.Run(); err != nil {
		t.Fatalf("nats server report connections as the operator's system user: %v\n%s%s", err, report.String(), cliErr.String())
	}
	if !strings.Contains(report.String(), bustest.OtherAccount) {
		t.Errorf("the connections report does not show the OTHER users' connections:\n%s", report.String())
	}
}

// bus.accounts and the server's config change together: an apply of the whole block to a
// server whose accounts block includes the file is refused by the server's reload, and the
// file of the account alone goes back, byte for byte, still served.
func TestTheWholeBlockWhereTheServerIncludesTheAccountAloneIsPutBack(t *testing.T) {
	t.Parallel()
	c := bustest.StartSharedTestCluster(t, 1)
	srv := c.Servers[0]
	alone := fmt.Sprintf("bus:\n  url: %s\n  accounts_file: %s\n  accounts: account\n  reload: {pid_file: %s}\nnodes:\n  - name: alpha\n",
		srv.URL, srv.AccountsFile, srv.PIDFile)
	desc := writeMesh(t, map[string]string{"mesh.yaml": alone})
	st := t.TempDir()
	if code, out, errOut := meshctl(t, "apply", "-f", desc, "--state", st, "--bcrypt-cost", "4"); code != exitOK {
		t.Fatalf("the apply of the account alone: exit %d\n%s%s", code, out, errOut)
	}
	before := statFile(t, srv.AccountsFile)

	block := strings.Replace(alone, "  accounts: account\n", "", 1)
	if err := os.WriteFile(filepath.Join(desc, "mesh.yaml"), []byte(block), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := meshctl(t, "apply", "-f", desc, "--state", st, "--bcrypt-cost", "4")
	if code != exitError || !strings.Contains(errOut, "is back at") || !strings.Contains(errOut, "seen serving it") {
		t.Fatalf("the apply of the whole block: exit %d, want %d with the previous file back and served\n%s%s", code, exitError, out, errOut)
	}
	if after, err := os.ReadFile(srv.AccountsFile); err != nil || !bytes.Equal(after, before.data) {
		t.Fatalf("the file of the account alone is not back as it was (%v):\n%s", err, after)
	}
	if err := os.WriteFile(filepath.Join(desc, "mesh.yaml"), []byte(alone), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := meshctl(t, "diff", "-f", desc, "--state", st); code != exitOK {
		t.Fatalf("the account alone, as before: exit %d\n%s%s", code, out, errOut)
	}
}
