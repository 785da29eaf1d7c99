package plan

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// meshOf writes a description and returns its target.
func meshOf(t *testing.T, yaml string) Target {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mesh.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return target(t, dir, nil)
}

func TestAPlanDeletingMostOfTheMeshIsRefusedWithItsCounts(t *testing.T) {
	t.Parallel()
	seed := target(t, "../examples/seed", nil)
	live := serverView(LiveOf(seed))
	live.Baseline = ""
	// One node and nothing else left: every module, seat and their consumers and users go.
	shrunk := meshOf(t, "nodes:\n  - name: one\n")

	p := Compute(shrunk, live, Options{})
	if p.MassDelete == nil || !p.Blocked() || !p.MassDeleteRefused() {
		t.Fatalf("a plan deleting most of the mesh is not refused: %+v", p.MassDelete)
	}
	m := p.MassDelete
	if m.Objects == 0 || 2*m.Objects <= m.OwnedObjects && 2*m.Principals <= m.OwnedPrincipals {
		t.Fatalf("the counts do not show more than half deleted: %+v", m)
	}
	for _, want := range []string{"--allow-mass-delete", "streams and consumers meshctl owns"} {
		if !strings.Contains(m.Refused, want) {
			t.Errorf("the refusal %q does not say %q", m.Refused, want)
		}
	}
	var text, js strings.Builder
	_ = p.Text(&text, false)
	_ = p.JSON(&js)
	if !strings.Contains(text.String(), "REFUSED: the plan deletes") || !strings.Contains(js.String(), `"mass_delete"`) {
		t.Errorf("the text or JSON does not show the refusal:\n%s\n%s", text.String(), js.String())
	}

	allowed := Compute(shrunk, live, Options{AllowMassDelete: true})
	if allowed.Blocked() || allowed.MassDelete == nil || allowed.MassDelete.Refused != "" {
		t.Fatalf("--allow-mass-delete still refuses: %+v", allowed.MassDelete)
	}
	// An ordinary change deletes little and is not counted as a mass deletion.
	if p := Compute(seed, live, Options{}); p.MassDelete != nil {
		t.Fatalf("a converged plan is a mass deletion: %+v", p.MassDelete)
	}
}
