package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	if len(got) != 2 ||
		!strings.Contains(got[0], "alpha.shop") || !strings.Contains(got[0], "2 time(s)") ||
		!strings.Contains(got[0], "module shop does not declare calls: [postman/status]") ||
		!strings.Contains(got[1], "alpha.postman") || !strings.Contains(got[1], "no declaration grants it") {
		t.Errorf("explain printed:\n%s", stdout)
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
