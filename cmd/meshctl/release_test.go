package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshbus/meshctl/bus/bustest"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/testnats"
	"github.com/meshbus/meshctl/replica"
)

// What an operator does with an external nats-server, through the CLI, on whichever release
// the tests run against (the pinned one, or each release of `make test-compat`): an apply, a
// clean diff, a credential issued that logs in, its revocation that locks it out at once.
func TestAnExternalServerTakesEveryChange(t *testing.T) {
	t.Parallel()
	srv := bustest.StartTestServer(t, t.TempDir())
	dir := writeMesh(t, map[string]string{"mesh.yaml": srv.Mesh()})
	st := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		code, out, errOut := meshctl(t, append(args, "-f", dir, "--state", st)...)
		if code != exitOK {
			t.Fatalf("meshctl %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		return out + errOut
	}
	run("apply", "--bcrypt-cost", "4")
	if out := run("diff"); !strings.Contains(out, "in sync") {
		t.Errorf("the diff after the apply is not clean:\n%s", out)
	}
	file := filepath.Join(t.TempDir(), "shop.json")
	run("credentials", "issue", "alpha.shop", "--bcrypt-cost", "4", "-o", file)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	shop, err := host.ReadMembership(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := host.Join(ctx, shop)
	if err != nil {
		t.Fatalf("the issued alpha.shop cannot log in: %v", err)
	}
	h.Close()
	run("credentials", "revoke", "alpha.shop")
	if h, err := host.Join(ctx, shop); err == nil {
		h.Close()
		t.Fatal("the revoked alpha.shop still logs in")
	}
}

// oldServerEnv names a nats-server binary older than replica.OldestServer, for the release
// matrix (`make test-compat`) to prove the refusal on a real one.
const oldServerEnv = "MESHCTL_TEST_OLD_NATS_SERVER"

// A server older than the oldest meshctl supports is refused by name, exit 2, rather than
// every write of the store failing as if another meshctl had fenced its bucket.
func TestAServerOlderThanTheOldestSupportedIsRefused(t *testing.T) {
	old := os.Getenv(oldServerEnv)
	if old == "" {
		t.Skipf("%s names no nats-server older than %s (make test-compat sets it)", oldServerEnv, replica.OldestServer)
	}
	t.Setenv(testnats.TestServerEnv, old)
	srv := bustest.StartTestServer(t, t.TempDir())
	dir := writeMesh(t, map[string]string{"mesh.yaml": srv.Mesh()})
	code, out, errOut := meshctl(t, "apply", "-f", dir, "--state", t.TempDir(), "--bcrypt-cost", "4")
	if code != exitError || !strings.Contains(errOut, "needs "+replica.OldestServer+" or newer") {
		t.Fatalf("apply on an old nats-server: exit %d, want %d naming the release:\n%s%s", code, exitError, out, errOut)
	}
}
