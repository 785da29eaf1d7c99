package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runBuilt runs the built meshctl to its end and returns its exit code, stdout and stderr.
func runBuilt(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(builtMeshctl(t), args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode(), stdout.String(), stderr.String()
	case err != nil:
		t.Fatal(err)
	}
	return 0, stdout.String(), stderr.String()
}

// A one-shot apply that started the embedded bus, which only meshctl used, exits without the
// server's stop of every stream and consumer — a clean stop would have written each stream's
// index.db — and a new process on the same store finds everything the apply created: diff is in
// sync and the next apply changes nothing.
func TestAOneShotApplyExitsWithoutTheSlowStop(t *testing.T) {
	t.Parallel()
	dir, st := cliFixture(t)
	common := []string{"-f", dir, "--state", st}
	if code, out, errOut := runBuilt(t, append([]string{"apply", "--bcrypt-cost", "4"}, common...)...); code != exitOK {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errOut)
	}
	// The server keeps its store under store_dir/jetstream, one directory per account.
	streams, err := filepath.Glob(filepath.Join(st, "bus", "jetstream", "jetstream", "*", "streams", "*"))
	if err != nil || len(streams) == 0 {
		t.Fatalf("the apply made no stream in the store: %v", err)
	}
	for _, s := range streams {
		if _, err := os.Stat(filepath.Join(s, "msgs", "index.db")); err == nil {
			t.Errorf("%s was stopped by the server (its index.db is written): the apply took the slow stop", filepath.Base(s))
		}
	}
	code, out, errOut := runBuilt(t, append([]string{"diff", "-o", "json"}, common...)...)
	var doc struct {
		InSync bool `json:"in_sync"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &doc) != nil || !doc.InSync {
		t.Fatalf("diff after the apply's fast exit: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, _, errOut := runBuilt(t, append([]string{"apply"}, common...)...); code != exitOK || !strings.Contains(errOut, "already in sync") {
		t.Fatalf("a second apply: exit %d\n%s", code, errOut)
	}
}
