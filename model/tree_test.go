package model_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshbus/meshctl/model"
)

// loadRefused loads dir, which must be refused, and returns the error's text. Load runs in a
// goroutine with a generous bound: a load that opens a FIFO for reading never returns, and
// the test should say so rather than hang the suite.
func loadRefused(t *testing.T, dir string) string {
	t.Helper()
	type result struct {
		m   *model.Mesh
		err error
	}
	done := make(chan result, 1)
	go func() {
		m, err := model.Load(dir)
		done <- result{m, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("Load(%s) has not returned after 20s: it is blocked reading something that is not a regular file", dir)
	}
	if r.err == nil {
		t.Fatalf("Load(%s) succeeded, want it refused", dir)
	}
	var lerr *model.LoadError
	if !errors.As(r.err, &lerr) {
		t.Fatalf("Load(%s) = %v (%T), want a *LoadError the operator can act on", dir, r.err, r.err)
	}
	return r.err.Error()
}

// meshWith writes a valid one-node description into a fresh directory, so a test adds only
// the file it is about.
func meshWith(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mesh.yaml"), "nodes:\n  - name: one\n")
	return dir
}

// A symlink in the description can point anywhere the reader of the tree can read: at the
// controller's password, at a private key. Its target is never read unless it is a regular
// file inside the description, and what an error says about it never includes its content.
func TestSymlinksOutsideTheDescriptionAreNotRead(t *testing.T) {
	t.Parallel()
	const secret = "5LJOq8vZr2c1XyPassw0rdLike"
	stateDir := t.TempDir()
	writeFile(t, filepath.Join(stateDir, "controller.password"), secret+"\n")
	// Even a target that is YAML is refused: what it declares would change the mesh from
	// outside the reviewed tree.
	writeFile(t, filepath.Join(stateDir, "extra.yaml"), "nodes:\n  - name: "+secret+"\n")

	for _, tc := range []struct {
		name, target string
		relative     bool
	}{
		{"a secret outside", filepath.Join(stateDir, "controller.password"), false},
		{"a relative path outside", filepath.Join(stateDir, "controller.password"), true},
		{"YAML outside", filepath.Join(stateDir, "extra.yaml"), false},
		{"a device", "/dev/zero", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := meshWith(t)
			target := tc.target
			if tc.relative {
				rel, err := filepath.Rel(dir, target)
				if err != nil {
					t.Fatal(err)
				}
				target = rel
			}
			if err := os.Symlink(target, filepath.Join(dir, "zz.yaml")); err != nil {
				t.Fatal(err)
			}
			msg := loadRefused(t, dir)
			if strings.Contains(msg, secret[:4]) {
				t.Errorf("the error shows the target's content:\n%s", msg)
			}
			if !strings.Contains(msg, "zz.yaml") || !strings.Contains(msg, "symbolic link") {
				t.Errorf("the error does not name zz.yaml as a symbolic link:\n%s", msg)
			}
		})
	}
}

// What a symlink may name: a regular file inside the description, which is read as if it
// were there. Links to directories, to hidden directories and to nothing are refused by
// name, because skipping them would drop what they hold from the mesh without a word.
func TestSymlinksInsideTheDescription(t *testing.T) {
	t.Parallel()
	t.Run("to a regular file inside", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "shared", "nodes.txt"), "nodes:\n  - name: one\n")
		if err := os.Symlink("shared/nodes.txt", filepath.Join(dir, "nodes.yaml")); err != nil {
			t.Fatal(err)
		}
		m, err := model.Load(dir)
		if err != nil || len(m.Nodes) != 1 {
			t.Fatalf("Load through a link to a file inside the description: %v", err)
		}
	})
	for _, tc := range []struct{ name, link, target, want string }{
		{"to a directory", "more", "sub", "directory"},
		{"to a directory, named like YAML", "more.yaml", "sub", "directory"},
		{"to nothing", "gone.yaml", "missing.yaml", "does not exist"},
		{"into a hidden directory", "cfg.yaml", ".git/config.yaml", "hidden"},
		{"to itself", "loop.yaml", "loop.yaml", "symbolic link"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := meshWith(t)
			writeFile(t, filepath.Join(dir, "sub", "x.yaml"), "nodes:\n  - name: two\n")
			writeFile(t, filepath.Join(dir, ".git", "config.yaml"), "nodes:\n  - name: three\n")
			if err := os.Symlink(tc.target, filepath.Join(dir, tc.link)); err != nil {
				t.Fatal(err)
			}
			msg := loadRefused(t, dir)
			if !strings.HasPrefix(msg, tc.link+": ") || !strings.Contains(msg, tc.want) {
				t.Errorf("want the error at %s saying %q, got:\n%s", tc.link, tc.want, msg)
			}
		})
	}
}

// A FIFO named like a description file hung every command for ever: reading it waits for a
// writer. Nothing that is not a regular file is opened for reading.
func TestNonRegularFilesAreRefusedUnread(t *testing.T) {
	t.Parallel()
	dir := meshWith(t)
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	msg := loadRefused(t, dir)
	if !strings.HasPrefix(msg, "pipe.yaml: ") || !strings.Contains(msg, "not a regular file") {
		t.Errorf("want the FIFO refused by name, got:\n%s", msg)
	}
}

// A description file larger than the cap is refused before it is read: nobody reviews a
// 50 MB mesh file, and every command would read it whole.
func TestOversizedFilesAreRefusedUnread(t *testing.T) {
	t.Parallel()
	dir := meshWith(t)
	// Sparse: the size is there, the bytes are not, so a loader that read it would have to
	// read zeros and a loader that does not read it costs nothing.
	f, err := os.Create(filepath.Join(dir, "huge.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	msg := loadRefused(t, dir)
	if !strings.HasPrefix(msg, "huge.yaml: ") || !strings.Contains(msg, "MiB") {
		t.Errorf("want huge.yaml refused for its size, got:\n%s", msg)
	}
}

// A file name with a control character in it would print as two lines, the second forged
// (a CI log reads `::warning …` on a line of its own as a workflow command). Such a name is
// refused, quoted, at the directory that holds it.
func TestFileNamesWithControlCharactersAreRefused(t *testing.T) {
	t.Parallel()
	dir := meshWith(t)
	name := "evil\n::warning file=README.md,line=1::INJECTED\nx.yaml"
	writeFile(t, filepath.Join(dir, "sub", name), "nodes:\n  - name: two\n")
	msg := loadRefused(t, dir)
	if strings.Count(msg, "\n") != 0 {
		t.Errorf("the error spans several lines:\n%s", msg)
	}
	if !strings.HasPrefix(msg, "sub: ") {
		t.Errorf("want the error at the directory sub, got:\n%s", msg)
	}
}

// An empty directory is a problem with the directory, not with a line of a file: no 0:0.
func TestEmptyDirectoryHasNoFakePosition(t *testing.T) {
	t.Parallel()
	msg := loadRefused(t, t.TempDir())
	if strings.Contains(msg, ":0") || !strings.HasPrefix(msg, ".: ") {
		t.Errorf("want the directory itself as the position, got:\n%s", msg)
	}
}
