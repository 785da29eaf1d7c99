package main

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/meshbus/meshctl/bus"
)

// A second embedded bus on a port another meshctl's bus holds says which meshctl: its pid
// and its state directory, not only "address already in use".
func TestATakenPortNamesTheMeshctlHoldingIt(t *testing.T) {
	t.Parallel()
	holderState := filepath.Join(t.TempDir(), "holder")
	held, err := bus.StartEmbedded(context.Background(), bus.EmbeddedOptions{StateDir: holderState, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(held.Shutdown)
	u, err := url.Parse(held.URL())
	if err != nil {
		t.Fatal(err)
	}
	dir := writeMesh(t, map[string]string{"mesh.yaml": "bus:\n  listen: 127.0.0.1:" + u.Port() + "\nnodes:\n  - name: one\n"})
	code, _, stderr := meshctl(t, "apply", "-f", dir, "--state", filepath.Join(t.TempDir(), "second"), "--bcrypt-cost", "4")
	if code != exitError {
		t.Fatalf("exit %d, want %d:\n%s", code, exitError, stderr)
	}
	for _, want := range []string{"address already in use", "meshctl pid " + strconv.Itoa(os.Getpid()), holderState} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr)
		}
	}
}
