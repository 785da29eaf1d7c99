package main

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshbus/meshctl/model"
)

// invalidMesh has four problems in two files, one of them in a subdirectory, and a message
// holding a `%`, which a workflow command must escape.
var invalidMesh = map[string]string{
	"mesh.yaml": `nodes:
  - name: One
modules:
  - name: shop
    on: [two]
    colour: red
`,
	"sub/seats.yaml": `seats:
  - name: mailer
    accepts: [send]
    emits: ["100% done"]
`,
}

func TestValidateOutputs(t *testing.T) {
	t.Parallel()
	dir := writeMesh(t, invalidMesh)
	at := func(file string, line, col int) string {
		return filepath.ToSlash(dir) + "/" + file + ":" + strconv.Itoa(line) + ":" + strconv.Itoa(col)
	}
	messages := []string{
		`node name "One" must be lowercase letters, digits and ` + "`-`" + `, starting with a letter`,
		`module "shop" runs on unknown node "two"`,
		`unknown key "colour" in a module`,
		`event "100% done" must be subject tokens joined by dots`,
	}
	positions := []string{at("mesh.yaml", 2, 11), at("mesh.yaml", 5, 10), at("mesh.yaml", 6, 5), at("sub/seats.yaml", 4, 13)}

	t.Run("text", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := meshctl(t, "validate", "-f", dir)
		if code != exitInvalid {
			t.Fatalf("exit %d, want %d", code, exitInvalid)
		}
		lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
		if len(lines) != len(messages) {
			t.Fatalf("want %d lines, one per problem:\n%s", len(messages), stdout)
		}
		for i, l := range lines {
			if !strings.HasPrefix(l, positions[i]+": "+messages[i]) {
				t.Errorf("line %d:\n got %s\nwant %s: %s…", i+1, l, positions[i], messages[i])
			}
		}
		if !strings.Contains(stderr, "4 problem(s)") {
			t.Errorf("stderr: %q", stderr)
		}
	})

	t.Run("github", func(t *testing.T) {
		t.Parallel()
		code, stdout, _ := meshctl(t, "validate", "-f", dir, "-o", "github")
		if code != exitInvalid {
			t.Fatalf("exit %d, want %d", code, exitInvalid)
		}
		lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
		if len(lines) != len(messages) {
			t.Fatalf("want %d annotations:\n%s", len(messages), stdout)
		}
		for i, l := range lines {
			file, pos, _ := strings.Cut(positions[i], ":")
			line, col, _ := strings.Cut(pos, ":")
			want := "::error file=" + file + ",line=" + line + ",col=" + col + "::" + strings.ReplaceAll(messages[i], "%", "%25")
			if !strings.HasPrefix(l, want) {
				t.Errorf("annotation %d:\n got %s\nwant %s…", i+1, l, want)
			}
		}
	})

	t.Run("json", func(t *testing.T) {
		t.Parallel()
		code, stdout, _ := meshctl(t, "validate", "-f", dir, "-o", "json")
		if code != exitInvalid {
			t.Fatalf("exit %d, want %d", code, exitInvalid)
		}
		var got struct {
			Valid       bool               `json:"valid"`
			Diagnostics []model.Diagnostic `json:"diagnostics"`
		}
		if err := json.Unmarshal([]byte(stdout), &got); err != nil {
			t.Fatalf("%v:\n%s", err, stdout)
		}
		if got.Valid || len(got.Diagnostics) != len(messages) {
			t.Fatalf("valid %v, %d diagnostics", got.Valid, len(got.Diagnostics))
		}
		// JSON positions are relative to the directory, as the loader reports them.
		if diff := cmp.Diff(model.Pos{File: "sub/seats.yaml", Line: 4, Col: 13}, got.Diagnostics[3].Pos); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
}

func TestValidateAValidDescription(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"text", "github"} {
		code, stdout, stderr := meshctl(t, "validate", "-f", filepath.Join("..", "..", "examples", "seed"), "-o", format)
		if code != exitOK || stdout != "" {
			t.Errorf("-o %s: exit %d, stdout %q", format, code, stdout)
		}
		// The seed's two seats: CONTROL 64 MiB, EVENTS 1 GiB, NODES 256 MiB, 64 MiB a seat.
		if !strings.Contains(stderr, "is valid: 2 node(s), 2 seat(s), 4 module instance(s)\nthis mesh may hold up to 1.4 GiB on disk on each server\n") {
			t.Errorf("-o %s: stderr %q", format, stderr)
		}
	}
	code, stdout, _ := meshctl(t, "validate", "-f", filepath.Join("..", "..", "examples", "seed"), "-o", "json")
	want := `{
  "diagnostics": [],
  "footprint": {
    "file": 1543503872,
    "memory": 0
  },
  "total": 0,
  "valid": true
}`
	if code != exitOK || strings.TrimSpace(stdout) != want {
		t.Errorf("-o json: exit %d, stdout %s", code, stdout)
	}
}

func TestValidateAnUnreadableDirectory(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := meshctl(t, "validate", "-f", filepath.Join(t.TempDir(), "gone"))
	if code != exitError || stdout != "" || !strings.Contains(stderr, "no such file or directory") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
