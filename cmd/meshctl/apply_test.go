package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An emptied description is invalid, and another mesh's (a wrong directory: another node,
// nothing else) deletes most of this one: apply refuses both (exit 2) and performs the
// second only with --allow-mass-delete.
func TestApplyGuardsAgainstWipingTheMesh(t *testing.T) {
	t.Parallel()
	dir, st := cliFixture(t)
	common := []string{"-f", dir, "--state", st, "--bcrypt-cost", "4"}
	if code, out, errOut := meshctl(t, append([]string{"apply"}, common...)...); code != exitOK {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errOut)
	}
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "mesh.yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("# everything commented out\n# nodes:\n#   - name: alpha\n")
	if code, _, errOut := meshctl(t, append([]string{"apply"}, common...)...); code != exitInvalid || !strings.Contains(errOut, "mesh.yaml:1:1: the description declares no nodes") {
		t.Fatalf("apply of a comments-only description: exit %d\n%s", code, errOut)
	}
	write("bus:\n  listen: \"127.0.0.1:-1\"\nnodes:\n  - name: omega\n")
	if code, _, errOut := meshctl(t, append([]string{"apply"}, common...)...); code != exitError || !strings.Contains(errOut, "--allow-mass-delete") {
		t.Fatalf("apply of a plan deleting most of the mesh: exit %d\n%s", code, errOut)
	}
	if code, _, errOut := meshctl(t, append([]string{"apply", "--allow-mass-delete"}, common...)...); code != exitOK {
		t.Fatalf("apply --allow-mass-delete: exit %d\n%s", code, errOut)
	}
}

// A description whose streams may hold more than the bus's JetStream has is valid, and says
// how much; an apply of it is refused whole, naming the flag, while a dry run given the flag
// plans it unblocked.
func TestApplyRefusesStreamsPastWhatTheBusHas(t *testing.T) {
	t.Parallel()
	dir := writeMesh(t, map[string]string{"mesh.yaml": strings.Replace(cliMesh, "bus:\n",
		"bus:\n  jetstream:\n    streams:\n      events: {max_bytes: 1PiB}\n", 1)})
	st := filepath.Join(t.TempDir(), "state")
	if code, _, errOut := meshctl(t, "validate", "-f", dir); code != exitOK || !strings.Contains(errOut, "this mesh may hold up to 1 PiB on disk on each server") {
		t.Fatalf("validate: exit %d\n%s", code, errOut)
	}
	common := []string{"-f", dir, "--state", st, "--bcrypt-cost", "4"}
	code, out, errOut := meshctl(t, append([]string{"apply"}, common...)...)
	if code != exitError || !strings.Contains(out, "REFUSED: the description lets its streams hold up to 1 PiB on disk on each server") ||
		!strings.Contains(errOut, "--allow-overcommit") {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = meshctl(t, append([]string{"apply", "--dry-run", "--allow-overcommit", "-o", "json"}, common...)...)
	var doc struct {
		Blocked    bool `json:"blocked"`
		Overcommit *struct {
			Refused string `json:"refused"`
		} `json:"overcommit"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &doc) != nil || doc.Blocked || doc.Overcommit == nil || doc.Overcommit.Refused != "" {
		t.Fatalf("apply --dry-run --allow-overcommit: exit %d\n%s\n%s", code, out, errOut)
	}
}
