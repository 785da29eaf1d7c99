package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshbus/meshctl/plan"
)

// meshctl runs the CLI in-process and returns its exit code and what it wrote.
func meshctl(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// writeMesh writes files (name → YAML) into a new directory and returns it.
func writeMesh(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, yaml := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// diffCase is a pair of descriptions the plan package's golden tests also use.
func diffCase(name string) (old, new string) {
	dir := filepath.Join("..", "..", "plan", "testdata", "diff", name)
	return filepath.Join(dir, "old"), filepath.Join(dir, "new")
}

// A bus the description names but nothing listens on: a diff that dialled it would fail.
const unreachableBus = `
bus:
  url: nats://127.0.0.1:1
  accounts_file: /nonexistent/mesh-accounts.conf
  reload: none
`

func TestDiffFromExitCodes(t *testing.T) {
	t.Parallel()
	sameOld, sameNew := diffCase("in-sync")
	addedOld, addedNew := diffCase("module-added")
	for _, tc := range []struct {
		name     string
		old, new string
		format   string
		code     int
		stdout   string // a line stdout must hold
	}{
		{"in sync", sameOld, sameNew, "text", exitOK, "Both descriptions derive the same bus: nothing would change."},
		{"in sync, markdown", sameOld, sameNew, "markdown", exitOK, "**meshctl diff:** Both descriptions derive the same bus: nothing would change."},
		{"a module added", addedOld, addedNew, "text", exitChanges, "+ consumer EVENTS/alpha_ledger"},
		{"a module added, markdown", addedOld, addedNew, "markdown", exitChanges, "| create | `consumer EVENTS/alpha_ledger` | derived from the mesh and not on the bus |"},
		{"a module added, json", addedOld, addedNew, "json", exitChanges, `"schema": "meshctl.plan/v1",`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			state := filepath.Join(t.TempDir(), "state")
			code, stdout, stderr := meshctl(t, "diff", "--from", tc.old, "-f", tc.new, "-o", tc.format, "--state", state)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tc.code, stderr)
			}
			if !strings.Contains(stdout, tc.stdout+"\n") {
				t.Errorf("stdout lacks %q:\n%s", tc.stdout, stdout)
			}
			if _, err := os.Stat(state); !os.IsNotExist(err) {
				t.Errorf("diff --from touched the state directory: %v", err)
			}
		})
	}
}

// TestDiffFromNeedsNoBusAndNoState gives both descriptions a bus nobody listens on and a
// state directory that does not exist: a diff that opened the store or dialled would fail
// or leave the directory behind.
func TestDiffFromNeedsNoBusAndNoState(t *testing.T) {
	t.Parallel()
	oldDir, newDir := diffCase("node-removed")
	withBus := func(dir string) string {
		data, err := os.ReadFile(filepath.Join(dir, "mesh.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		return writeMesh(t, map[string]string{"mesh.yaml": string(data), "bus.yaml": unreachableBus})
	}
	state := filepath.Join(t.TempDir(), "no", "such", "state")
	code, stdout, stderr := meshctl(t, "diff", "--from", withBus(oldDir), "-f", withBus(newDir), "-o", "json", "--state", state)
	if code != exitChanges {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitChanges, stderr)
	}
	if _, err := os.Stat(filepath.Dir(filepath.Dir(state))); !os.IsNotExist(err) {
		t.Errorf("diff --from created the state directory's parents: %v", err)
	}
	var doc plan.Document
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("stdout is not a plan document: %v\n%s", err, stdout)
	}
	if doc.Schema != plan.SchemaVersion || doc.Baseline != plan.BaselineDescription || doc.InSync || doc.Summary.Delete != 2 {
		t.Errorf("document: schema %q, baseline %q, in sync %v, summary %+v", doc.Schema, doc.Baseline, doc.InSync, doc.Summary)
	}
	// Nothing on stderr but what the new description's streams may hold.
	if stderr != "this mesh may hold up to 1.4 GiB on disk on each server\n" {
		t.Errorf("stderr says more than the footprint:\n%s", stderr)
	}
}

func TestDiffFromReportsInvalidDescriptions(t *testing.T) {
	t.Parallel()
	valid, _ := diffCase("in-sync")
	unknownNode := "nodes:\n  - name: one\nmodules:\n  - name: shop\n    on: [two]\n"
	invalid, invalidToo := writeMesh(t, map[string]string{"mesh.yaml": unknownNode}), writeMesh(t, map[string]string{"mesh.yaml": unknownNode})
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		stderr   []string
		noStdout bool
	}{
		{"the new tree invalid", []string{"--from", valid, "-f", invalid}, exitInvalid,
			[]string{"meshctl: " + invalid + "/mesh.yaml:5:10: module \"shop\" runs on unknown node \"two\"", "the description in " + invalid + " is invalid"}, true},
		{"the old tree invalid", []string{"--from", invalid, "-f", valid}, exitInvalid,
			[]string{invalid + "/mesh.yaml:5:10:"}, true},
		{"both invalid, both reported", []string{"--from", invalid, "-f", invalidToo}, exitInvalid,
			[]string{invalid + "/mesh.yaml:5:10:", invalidToo + "/mesh.yaml:5:10:"}, true},
		{"a missing directory", []string{"--from", filepath.Join(t.TempDir(), "gone"), "-f", valid}, exitError,
			[]string{"no such file or directory"}, true},
		{"a directory without -f", []string{"--from", valid, valid}, exitError,
			[]string{`unexpected argument "` + valid + `": give the description with -f ` + valid}, true},
		{"an unknown format", []string{"--from", valid, "-f", valid, "-o", "html"}, exitError,
			[]string{`unknown output format "html"`}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := meshctl(t, append([]string{"diff"}, tc.args...)...)
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			for _, want := range tc.stderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
			if tc.noStdout && stdout != "" {
				t.Errorf("stdout is not empty:\n%s", stdout)
			}
		})
	}
}

func TestDiffHelpNamesTheSchema(t *testing.T) {
	t.Parallel()
	code, stdout, _ := meshctl(t, "diff", "--help")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"--from", "docs/plan-schema.md", plan.SchemaVersion, "-o markdown"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("diff --help does not mention %q:\n%s", want, stdout)
		}
	}
	// The schema document must exist where the help says.
	if _, err := os.Stat(filepath.Join("..", "..", "docs", "plan-schema.md")); err != nil {
		t.Error(err)
	}
}
