package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/meshbus/meshctl/internal/testnats"
)

// `make demo PORT=…` puts the quickstart's embedded bus on that port, as `make demo-node`
// does, for a machine where 4222 is taken; without PORT it applies examples/quickstart
// itself, on 127.0.0.1:4222, as the README says. The meshctl make runs is this test's build
// (-o build: the Makefile's own build is not redone).
func TestMakeDemoListensOnPORT(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	bin, err := filepath.Rel(root, builtMeshctl(t))
	if err != nil {
		t.Fatal(err)
	}
	make := func(args ...string) (string, error) {
		cmd := exec.Command("make", append([]string{"-s", "-o", "build", "BIN=" + bin}, args...)...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	port := strconv.Itoa(testnats.FreePort(t))
	stateDir := filepath.Join(t.TempDir(), "state")
	if out, err := make("demo", "PORT="+port, "STATE="+stateDir); err != nil {
		t.Fatalf("make demo PORT=%s: %v\n%s", port, err, out)
	}
	conf, err := os.ReadFile(filepath.Join(stateDir, "bus", "server.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(conf), `"127.0.0.1:`+port+`"`) {
		t.Errorf("make demo PORT=%s ran the embedded bus with:\n%s", port, conf)
	}

	// Without PORT (an empty one on the command line outweighs one in the environment), the
	// commands name the quickstart itself, whose bus listens on the default address.
	out, err := make("-n", "demo", "PORT=", "STATE="+stateDir)
	if err != nil {
		t.Fatalf("make -n demo: %v\n%s", err, out)
	}
	for _, cmd := range []string{"validate", "apply", "diff"} {
		if !strings.Contains(out, bin+" "+cmd+" -f examples/quickstart") {
			t.Errorf("make demo without PORT does not %s examples/quickstart:\n%s", cmd, out)
		}
	}
}
