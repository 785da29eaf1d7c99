package model_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshbus/meshctl/model"
)

// copyCase copies the description files of testdata/<name> into a fresh directory.
func copyCase(t *testing.T, name string) string {
	t.Helper()
	src := filepath.Join("testdata", name)
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !model.IsDescriptionFile(d.Name()) {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func writeFile(t testing.TB, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A checkout holds YAML that is not the mesh: git's own files, editors' swap and backup
// files. Each would be an error (or worse, a second declaration) if it were read.
func TestLoadIgnoresHiddenAndBackupFiles(t *testing.T) {
	t.Parallel()
	dir := copyCase(t, "valid-seed")
	junk := "nodes:\n  - name: one\n  - name: Bad_Name\nnot yaml: [\n"
	for _, name := range []string{
		".git/x.yaml",
		".git/refs/heads/main.yaml",
		".idea/workspace.yml",
		"sub/.hidden/nodes.yaml",
		"mesh.yaml~",
		".mesh.yaml.swp",
		".#mesh.yaml",
		"#mesh.yaml#",
		"mesh.yaml.orig",
		"mesh.yaml.bak",
		"notes.txt",
		".hidden.yaml",
	} {
		writeFile(t, filepath.Join(dir, name), junk)
	}

	m, err := model.Load(dir)
	if err != nil {
		t.Fatalf("Load read a hidden or backup file:\n%v", err)
	}
	want, err := os.ReadFile(filepath.Join("testdata", "valid-seed", "want.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), dump(m)); diff != "" {
		t.Errorf("seed with junk files around it loads differently from the seed alone (-want +got):\n%s", diff)
	}
}

func TestReadDirNamesFilesRelativeAndSorted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, name := range []string{"z.yaml", "a/b.yml", "a/a.yaml", "m.yml", ".git/x.yaml", "b.yaml~"} {
		writeFile(t, filepath.Join(dir, name), "# "+name+"\n")
	}
	files, err := model.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range files {
		got = append(got, f.Name)
		if want := "# " + f.Name + "\n"; string(f.Data) != want {
			t.Errorf("file %s holds %q, want %q", f.Name, f.Data, want)
		}
	}
	want := []string{"a/a.yaml", "a/b.yml", "m.yml", "z.yaml"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ReadDir(%s) file names (-want +got):\n%s", dir, diff)
	}
}

func TestIsDescriptionFile(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"mesh.yaml":       true,
		"mesh.yml":        true,
		"a.b.yaml":        true,
		"mesh.yaml~":      false,
		".mesh.yaml.swp":  false,
		".mesh.yaml":      false,
		"#mesh.yaml#":     false,
		"mesh.yaml.orig":  false,
		"mesh.json":       false,
		"mesh.YAML":       false,
		"yaml":            false,
		"mesh.yaml.d":     false,
		"kustomization.y": false,
	} {
		if got := model.IsDescriptionFile(name); got != want {
			t.Errorf("IsDescriptionFile(%q) = %v, want %v", name, got, want)
		}
	}
}

// An empty directory is a description problem (the operator pointed at the wrong place),
// reported like any other; a directory that does not exist is not.
func TestLoadEmptyDirectory(t *testing.T) {
	t.Parallel()
	_, err := model.Load(t.TempDir())
	var lerr *model.LoadError
	if !errors.As(err, &lerr) {
		t.Fatalf("Load(empty dir) = %v (%T), want a *LoadError", err, err)
	}
	want := []model.Diagnostic{{
		Pos:     model.Pos{File: "."},
		Message: "no mesh description here: no *.yaml or *.yml file in this directory or below it (hidden directories and editors' backup files are skipped)",
	}}
	if diff := cmp.Diff(want, lerr.Diagnostics); diff != "" {
		t.Errorf("Load(empty dir) diagnostics (-want +got):\n%s", diff)
	}
	if got, want := err.Error(), ".: "+want[0].Message; got != want {
		t.Errorf("Load(empty dir) = %q, want %q: the directory, without a line and column it does not have", got, want)
	}
}

func TestLoadUnreadableDirectory(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "missing")
	file := filepath.Join(t.TempDir(), "mesh.yaml")
	writeFile(t, file, "nodes: []\n")
	for _, dir := range []string{missing, file} {
		_, err := model.Load(dir)
		if err == nil {
			t.Errorf("Load(%s) succeeded, want an error", dir)
			continue
		}
		if errors.Is(err, model.ErrInvalid) {
			t.Errorf("Load(%s) = %v: a directory that cannot be read is not an invalid description", dir, err)
		}
		if !strings.Contains(err.Error(), dir) {
			t.Errorf("Load(%s) = %q: the error should name the directory", dir, err)
		}
	}
}

// One load reports every problem, not the first: an operator fixing a pull request should
// not have to push once per mistake.
func TestLoadCollectsAllErrors(t *testing.T) {
	t.Parallel()
	_, err := model.Load(filepath.Join("testdata", "invalid-collected"))
	var lerr *model.LoadError
	if !errors.As(err, &lerr) {
		t.Fatalf("Load(invalid-collected) = %v, want a *LoadError", err)
	}
	files := map[string]int{}
	messages := map[string]bool{}
	for i, d := range lerr.Diagnostics {
		files[d.Pos.File]++
		messages[d.Message] = true
		if i == 0 {
			continue
		}
		prev := lerr.Diagnostics[i-1].Pos
		if prev.File > d.Pos.File || prev.File == d.Pos.File && prev.Line > d.Pos.Line {
			t.Errorf("diagnostic %d (%s) comes after %s: want them sorted by file, then line", i, d.Pos, prev)
		}
	}
	if len(lerr.Diagnostics) < 8 || len(messages) != len(lerr.Diagnostics) {
		t.Errorf("got %d diagnostics (%d distinct), want at least 8 different ones:\n%v", len(lerr.Diagnostics), len(messages), err)
	}
	if files["a.yaml"] < 3 || files["b.yaml"] < 5 {
		t.Errorf("diagnostics per file = %v, want at least 3 in a.yaml and 5 in b.yaml:\n%v", files, err)
	}
}

// No password ever appears in an error, wherever in the description it was written.
func TestPasswordNeverInError(t *testing.T) {
	t.Parallel()
	const password = "hunter2"
	for _, tc := range []struct{ name, yaml, wantIn string }{
		{"user and password", "bus:\n  url: nats://controller:hunter2@bus.example.org:4222\n  accounts_file: a.conf\n", "must not carry a user or password"},
		{"token as user", "bus:\n  url: nats://hunter2@bus.example.org:4222\n  accounts_file: a.conf\n", "must not carry a user or password"},
		{"other scheme", "bus:\n  url: http://u:hunter2@bus.example.org\n  accounts_file: a.conf\n", "must not carry"},
		{"no host", "bus:\n  url: nats://u:hunter2@\n  accounts_file: a.conf\n", "not a valid address"},
		{"bad port", "bus:\n  url: nats://u:hunter2@h:x:y\n  accounts_file: a.conf\n", "not a valid address"},
		{"bad escape", "bus:\n  url: nats://u:hunter2@h%zz\n  accounts_file: a.conf\n", "not a valid address"},
		{"bus as a string", "bus: nats://u:hunter2@bus.example.org:4222\n", "bus must be a mapping"},
		{"top level string", "nats://u:hunter2@bus.example.org:4222\n", "must be a mapping"},
		{"as a key", "bus:\n  nats://u:hunter2@h:4222: x\n", "unknown key"},
		{"as reload", "bus:\n  reload: nats://u:hunter2@h:4222\n", "bus.reload must be"},
		{"as max age", "bus:\n  events_max_age: nats://u:hunter2@h:4222\n", "events_max_age"},
		{"as replicas", "bus:\n  replicas: nats://u:hunter2@h:4222\n", "whole number"},
		{"as a node", "nodes:\n  - name: nats://u:hunter2@h:4222\n", "node name"},
		{"as an event", "modules:\n  - name: m\n    on: []\n    emits: [nats://u:hunter2@h]\n", "event"},
		{"as listen", "bus:\n  listen: nats://admin:hunter2@127.0.0.1:4301\n", "bus.listen"},
		{"as listen, without a scheme", "bus:\n  listen: admin:hunter2@127.0.0.1:4301\n", "bus.listen"},
		{"a space in the password", "nodes:\n  - name: nats://admin:hunter2 x@h:4222\n", "node name"},
		{"an @ in the password", "nodes:\n  - name: nats://admin:p@hunter2@h:4222\n", "node name"},
		{"a quote in the password", "nodes:\n  - name: 'nats://admin:hunter2\"x@h:4222'\n", "node name"},
		{"a space in a listen password", "bus:\n  listen: \"nats://admin:hunter2 x@h:4222\"\n", "bus.listen"},
		{"an @ in a url password", "bus:\n  url: nats://admin:p@hunter2@h:4222\n  accounts_file: a.conf\n", "must not carry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := model.Parse([]model.File{{Name: "mesh.yaml", Data: []byte(tc.yaml)}})
			if err == nil {
				t.Fatalf("Parse(%q) succeeded, want an error", tc.yaml)
			}
			if strings.Contains(err.Error(), password) {
				t.Errorf("the error repeats the password:\n%v", err)
			}
			if !strings.Contains(err.Error(), tc.wantIn) {
				t.Errorf("the error does not say %q:\n%v", tc.wantIn, err)
			}
		})
	}
}

// A description root that is a symlink is read where it points.
func TestASymlinkedRootIsFollowed(t *testing.T) {
	t.Parallel()
	real := t.TempDir()
	if err := os.WriteFile(filepath.Join(real, "mesh.yaml"), []byte("nodes:\n  - name: one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "current")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(link)
	if err != nil || len(m.Nodes) != 1 {
		t.Fatalf("loading through a symlinked root: %v", err)
	}
}
