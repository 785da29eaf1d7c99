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
)

// A fresh state directory in front of a bus another store manages — a rebuilt control host, a
// CI runner without the controller's password, a second mesh's — changes nothing and exits 2
// naming the manager, from apply (even told it may delete most of what it finds), diff and
// credentials issue; a watch run from it is refused too, saying so, and changes nothing, and
// the first mesh's diff is clean after. The accounts config the server serves is the one it
// served, and the host issued before still logs in.
func TestAFreshStateWithoutThePasswordChangesNothing(t *testing.T) {
	t.Parallel()
	srv := bustest.StartTestServer(t, t.TempDir())
	dir := writeMesh(t, map[string]string{"mesh.yaml": srv.Mesh()})
	managing := t.TempDir()
	if code, out, errOut := meshctl(t, "apply", "-f", dir, "--state", managing, "--bcrypt-cost", "4"); code != exitOK {
		t.Fatalf("the first apply: exit %d\n%s%s", code, out, errOut)
	}
	membership := filepath.Join(t.TempDir(), "shop.json")
	if code, out, errOut := meshctl(t, "credentials", "issue", "alpha.shop", "-f", dir, "--state", managing, "--bcrypt-cost", "4", "-o", membership); code != exitOK {
		t.Fatalf("issuing alpha.shop: exit %d\n%s%s", code, out, errOut)
	}
	data, err := os.ReadFile(membership)
	if err != nil {
		t.Fatal(err)
	}
	shop, err := host.ReadMembership(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	served, err := os.ReadFile(srv.AccountsFile)
	if err != nil {
		t.Fatal(err)
	}
	logsIn := func(when string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h, err := host.Join(ctx, shop)
		if err != nil {
			t.Fatalf("alpha.shop no longer logs in %s: %v", when, err)
		}
		h.Close()
	}
	logsIn("before")

	// A second mesh, with a state of its own, on the same bus.
	other := writeMesh(t, map[string]string{"mesh.yaml": strings.ReplaceAll(srv.Mesh(), "alpha", "beta")})
	fresh := t.TempDir()
	for _, args := range [][]string{
		{"apply", "-f", other, "--state", t.TempDir(), "--allow-mass-delete"},
		{"apply", "-f", dir, "--state", fresh},
		{"diff", "-f", dir, "--state", fresh},
		{"credentials", "issue", "alpha.shop", "-f", dir, "--state", fresh},
	} {
		code, _, errOut := meshctl(t, args...)
		if code != exitError || !strings.Contains(errOut, "manage") {
			t.Errorf("meshctl %s from a fresh state: exit %d, want %d naming the manager:\n%s", strings.Join(args, " "), code, exitError, errOut)
		}
	}
	w := watchProcess(t, dir, filepath.Join(t.TempDir(), "watch"))
	// Refused at its first try at the bus, saying who manages it: all the watch does there for
	// a while, since it asks again only after its longest retry (30 s).
	w.logged(t, 0, "the watch from a fresh state saying who manages the bus", "another meshctl state store manages this bus")
	if code, _ := w.signal(t, os.Interrupt); code != exitOK {
		t.Errorf("the watch exited %d on SIGINT:\n%s", code, w.stderr)
	}
	if now, _ := os.ReadFile(srv.AccountsFile); !bytes.Equal(now, served) {
		t.Errorf("the accounts config changed under commands from a fresh state:\nwas:\n%s\nnow:\n%s", served, now)
	}
	logsIn("after")
	if code, out, errOut := meshctl(t, "diff", "-f", dir, "--state", managing); code != exitOK {
		t.Errorf("the first mesh is not as it was (exit %d):\n%s%s", code, out, errOut)
	}
}
