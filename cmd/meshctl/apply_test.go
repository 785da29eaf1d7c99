package main

import (
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
