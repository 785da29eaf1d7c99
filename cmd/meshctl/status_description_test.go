package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshbus/meshctl/bus/bustest"
)

// `meshctl status -f DIR` takes the description as diff and apply do. An external bus is not
// served from the state directory, so the description is what says where it is: status reads
// the seats' queues from it, as the controller, changing nothing.
func TestStatusReadsTheExternalBusTheDescriptionNames(t *testing.T) {
	t.Parallel()
	srv := bustest.StartTestServer(t, t.TempDir())
	dir := writeMesh(t, map[string]string{"mesh.yaml": srv.Mesh(), "seats.yaml": `
seats:
  - name: mailer
    accepts: [send]
modules:
  - name: postman
    on: [alpha]
    claims: [mailer]
`})
	st := filepath.Join(t.TempDir(), "state")
	if code, out, errOut := meshctl(t, "apply", "-f", dir, "--state", st, "--bcrypt-cost", "4"); code != exitOK {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut := meshctl(t, "status", "-f", dir, "--state", st)
	if code != exitOK {
		t.Fatalf("status -f: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "Bus:") || !strings.Contains(out, srv.URL) || !strings.Contains(out, "Seats on the bus:") ||
		!lineHolds(out, "mailer", "alpha.postman", "not bound", "0", "0") {
		t.Errorf("status -f does not show the external bus's seats:\n%s%s", out, errOut)
	}

	// Without -f it reads the state directory alone, as before; a description that does not
	// load is refused as diff refuses it.
	if code, out, errOut := meshctl(t, "status", "--state", st); code != exitOK || strings.Contains(out, "Seats on the bus:") {
		t.Errorf("status without -f: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := meshctl(t, "status", "-f", filepath.Join(dir, "nope"), "--state", st); code != exitError {
		t.Errorf("status -f of a missing directory: exit %d\n%s", code, errOut)
	}
}
