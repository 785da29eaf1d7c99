package main

import (
	"encoding/json"
	"errors"
	"os/exec"
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

// A one-shot apply that started the embedded bus, which only meshctl used, exits without
// waiting for the server's stop (bus.StopForExit, whose own test shows which stop it takes), and
// a new process on the same store finds everything the apply created: diff is in sync and the
// next apply changes nothing.
func TestAOneShotApplyLeavesEverythingForTheNext(t *testing.T) {
	t.Parallel()
	dir, st := cliFixture(t)
	common := []string{"-f", dir, "--state", st}
	if code, out, errOut := runBuilt(t, append([]string{"apply", "--bcrypt-cost", "4"}, common...)...); code != exitOK {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errOut)
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
