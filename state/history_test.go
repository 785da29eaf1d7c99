package state

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRecordApplyAndHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	if h, err := s.History(ctx, 0); err != nil || len(h) != 0 {
		t.Errorf("History of a new store = %v, %v", h, err)
	}
	base := time.Date(2025, 3, 4, 5, 6, 7, 891011121, time.FixedZone("CET", 3600))
	var want []ApplyRecord
	for i, outcome := range []string{"applied", "failed: reload refused", "no changes"} {
		r := ApplyRecord{
			ID:       99, // ignored
			Started:  base.Add(time.Duration(i) * time.Hour),
			Finished: base.Add(time.Duration(i)*time.Hour + 3*time.Second),
			User:     "ops", Host: "control-1", Commit: "0123abcd-dirty",
			Summary: "2 created, 1 updated", Outcome: outcome,
		}
		id, err := s.RecordApply(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && id <= want[0].ID {
			t.Errorf("apply %d got ID %d, not after %d", i, id, want[0].ID)
		}
		r.ID = id
		r.Started, r.Finished = r.Started.UTC(), r.Finished.UTC()
		want = append([]ApplyRecord{r}, want...)
	}
	got, err := s.History(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("History (-want +got):\n%s", diff)
	}
	got, err = s.History(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want[:2], got); diff != "" {
		t.Errorf("History(2) (-want +got):\n%s", diff)
	}
}

func TestWhoAmI(t *testing.T) {
	t.Parallel()
	user, host, commit := WhoAmI(t.TempDir())
	if user == "" || host == "" {
		t.Errorf("WhoAmI = user %q, host %q; want both", user, host)
	}
	if commit != "" {
		t.Errorf("commit outside a git work tree = %q, want empty", commit)
	}
	if _, _, commit := WhoAmI(filepath.Join(t.TempDir(), "missing")); commit != "" {
		t.Errorf("commit of a missing directory = %q, want empty", commit)
	}
}

func TestWhoAmIInGitWorkTree(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	repo := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=test", "-c", "user.email=test@example.com",
			"-c", "commit.gpgsign=false"}, args...)...)
		cmd.Env = withoutGitEnv(os.Environ())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	if _, _, commit := WhoAmI(repo); commit != "" {
		t.Errorf("commit of a repository without commits = %q, want empty", commit)
	}
	yamlDir := filepath.Join(repo, "mesh")
	if err := os.Mkdir(yamlDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(yamlDir, "nodes.yaml"), []byte("nodes: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", ".")
	git("commit", "-q", "-m", "mesh")
	head := git("rev-parse", "HEAD")

	if _, _, commit := WhoAmI(yamlDir); commit != head {
		t.Errorf("commit of a clean tree = %q, want %q", commit, head)
	}
	// A change outside dir does not make dir dirty.
	if err := os.WriteFile(filepath.Join(repo, "README"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, commit := WhoAmI(yamlDir); commit != head {
		t.Errorf("commit with a change outside dir = %q, want %q", commit, head)
	}
	if err := os.WriteFile(filepath.Join(yamlDir, "nodes.yaml"), []byte("nodes: [one]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, commit := WhoAmI(yamlDir); commit != head+"-dirty" {
		t.Errorf("commit of a modified tree = %q, want %q", commit, head+"-dirty")
	}
}
