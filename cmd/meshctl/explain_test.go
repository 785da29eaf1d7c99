package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/explain/explaintest"
	"github.com/meshbus/meshctl/model"
)

// An external server's log, explained against the description: each distinct violation once,
// counted, with the YAML that grants it or why none can; other lines are ignored.
func TestExplainReadsAServersLog(t *testing.T) {
	t.Parallel()
	dir, _ := cliFixture(t)
	log := filepath.Join(t.TempDir(), "nats-server.log")
	lines := []string{
		`[1] 2026/12/01 08:00:00.000000 [INF] Server is ready`,
		`[1] 2026/12/01 08:00:01.000000 [ERR] 10.0.0.5:40452 - cid:6 - "v1.55.0:go" - "MESH/user:alpha.shop" - Publish Violation - Subject "mesh.mod.postman.tool.status"`,
		`[1] 2026/12/01 08:00:02.000000 [ERR] 10.0.0.5:40452 - cid:6 - "v1.55.0:go" - "MESH/user:alpha.shop" - Publish Violation - Subject "mesh.mod.postman.tool.status"`,
		`[1] 2026/12/01 08:00:03.000000 [ERR] 10.0.0.6:40453 - cid:7 - "MESH/user:alpha.postman" - Subscription Violation - Subject "_INBOX.alpha.shop.>", SID 3`,
	}
	if err := os.WriteFile(log, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := meshctl(t, "explain", "-f", dir, log)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got := strings.Split(strings.TrimSpace(stdout), "\n")
	fix := "module postman would need `serves: [status]`, and module shop `calls: [postman/status]`"
	if len(got) != 2 ||
		!strings.Contains(got[0], "alpha.shop") || !strings.Contains(got[0], "2 time(s)") || !strings.Contains(got[0], fix) ||
		!strings.Contains(got[1], "alpha.postman") || !strings.Contains(got[1], "no declaration grants it") {
		t.Errorf("explain printed:\n%s", stdout)
	}
	// The fix, written into the description, grants what was refused.
	files, err := model.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := explaintest.Check(files, busclient.PermissionError{User: "alpha.shop", Op: busclient.OpPublish, Subject: "mesh.mod.postman.tool.status"}, fix); err != nil {
		t.Error(err)
	}
}

// A host whose inbox prefix is not set is refused a new random inbox on every connection: the
// server logs each, and explain prints them as one kind, with the count and the latest.
func TestExplainCountsRandomInboxesAsOne(t *testing.T) {
	t.Parallel()
	dir, _ := cliFixture(t)
	log := filepath.Join(t.TempDir(), "nats-server.log")
	var lines []string
	for i, inbox := range []string{"_INBOX.Xy7Rb2kQ9mN4pL1sT6vW8z.*", "_INBOX.Ab3Cd4Ef5Gh6Ij7Kl8Mn9o.*", "_INBOX.Qr1St2Uv3Wx4Yz5Ab6Cd7e.*"} {
		lines = append(lines, fmt.Sprintf(`[1] 2026/12/01 08:00:0%d.000000 [ERR] 10.0.0.5:4045%d - cid:%d - "MESH/user:alpha.shop" - Subscription Violation - Subject %q, SID 1`, i, i, 6+i, inbox))
	}
	if err := os.WriteFile(log, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := meshctl(t, "explain", "-f", dir, log)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(got) != 1 || !strings.Contains(got[0], "3 time(s)") || !strings.Contains(got[0], "subscribe _INBOX.> (latest _INBOX.Qr1St2Uv3Wx4Yz5Ab6Cd7e.*)") ||
		!strings.Contains(got[0], "inbox prefix not set") {
		t.Errorf("explain printed, for three connections refused their random inboxes:\n%s", stdout)
	}
}

// A violation's subject and user are whatever a client sent; explain prints them escaped as
// watch's log does, never the ESC and BEL bytes that would rewrite the operator's terminal.
func TestExplainEscapesTheLogsSubjects(t *testing.T) {
	t.Parallel()
	dir, _ := cliFixture(t)
	log := filepath.Join(t.TempDir(), "nats-server.log")
	line := "[1] 2026/12/01 08:00:01.000000 [ERR] 10.0.0.5:40452 - cid:6 - \"MESH/user:alpha.shop\" - Publish Violation - Subject \"mesh.evil\x1b[2K\x1b[1A\x07\""
	if err := os.WriteFile(log, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := meshctl(t, "explain", "-f", dir, log)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if strings.ContainsAny(stdout, "\x1b\x07") {
		t.Errorf("explain printed the log's control characters:\n%q", stdout)
	}
	if want := `publish mesh.evil\x1b[2K\x1b[1A\a`; !strings.Contains(stdout, want) {
		t.Errorf("explain does not show the subject escaped (%s):\n%s", want, stdout)
	}
}

// `kubectl logs … | meshctl explain -f mesh -`: a log piped in is read from standard input,
// as `-` means to other tools, and explained as a file would be.
func TestExplainReadsTheLogFromStandardInput(t *testing.T) {
	t.Parallel()
	dir, _ := cliFixture(t)
	cmd := exec.Command(builtMeshctl(t), "explain", "-f", dir, "-")
	cmd.Stdin = strings.NewReader(`[1] 2026/12/01 08:00:00.000000 [INF] Server is ready
[1] 2026/12/01 08:00:01.000000 [ERR] 10.0.0.5:40452 - cid:6 - "MESH/user:alpha.shop" - Publish Violation - Subject "mesh.mod.postman.tool.status"
`)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("explain -: %v\n%s", err, stderr.String())
	}
	if got := stdout.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, "alpha.shop") || !strings.Contains(got, "1 time(s)") {
		t.Errorf("explain - printed, for one violation piped in:\n%s\n%s", got, stderr.String())
	}

	// With nothing piped in, it says there was no violation on standard input.
	cmd = exec.Command(builtMeshctl(t), "explain", "-f", dir, "-")
	stderr.Reset()
	cmd.Stdin, cmd.Stderr = strings.NewReader(""), &stderr
	if err := cmd.Run(); err != nil || !strings.Contains(stderr.String(), "no permission violation on standard input") {
		t.Errorf("explain - of an empty input: %v\n%s", err, stderr.String())
	}
}
