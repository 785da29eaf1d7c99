package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `credentials issue -o FILE` writes the membership readable by its owner only, and refuses
// to replace a file without --force, before minting: the README's `> /tmp/audit.json` left a
// password in a 0644 file.
func TestCredentialsIssueWritesTheMembershipPrivately(t *testing.T) {
	t.Parallel()
	dir, st := cliFixture(t)
	file := filepath.Join(t.TempDir(), "audit.json")
	issue := func(extra ...string) (int, string, string) {
		return meshctl(t, append([]string{"credentials", "issue", "alpha.shop", "-f", dir, "--state", st, "--bcrypt-cost", "4", "-o", file}, extra...)...)
	}
	code, stdout, stderr := issue()
	if code != exitOK || stdout != "" || !strings.Contains(stderr, file) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	first := readMembership(t, file)
	if first.User != "alpha.shop" || first.Password == "" || strings.Contains(stderr, first.Password) {
		t.Fatalf("membership %+v; stderr %q", first, stderr)
	}

	// Without --force an existing file is refused, and nothing is minted: the membership in
	// it still holds the principal's password.
	code, _, stderr = issue()
	if code != exitError || !strings.Contains(stderr, "--force") {
		t.Fatalf("a second issue over the file: exit %d, stderr %q", code, stderr)
	}
	if again := readMembership(t, file); again != first {
		t.Fatal("the refused issue changed the file")
	}
	_, list, _ := meshctl(t, "credentials", "list", "-f", dir, "--state", st, "-o", "json")
	if strings.Count(list, `"operation": "credentials issue"`) != 1 {
		t.Errorf("the refused issue minted anyway:\n%s", list)
	}

	// With --force the file is replaced, still 0600.
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := issue("--force"); code != exitOK {
		t.Fatalf("issue --force: exit %d %s", code, stderr)
	}
	if again := readMembership(t, file); again.Password == first.Password {
		t.Error("--force did not write the new membership")
	}
}

func readMembership(t *testing.T, path string) (m struct{ Address, Fingerprint, User, Password string }) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", path, fi.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}
