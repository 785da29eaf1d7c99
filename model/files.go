package model

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"

	"github.com/meshbus/meshctl/internal/printable"
)

// File is one YAML file of a description: its name as errors should show it, and its bytes.
type File struct {
	Name string
	Data []byte
}

// MaxFileSize bounds one description file. The largest generated mesh meshctl is measured
// on (20,000 module instances) keeps each file under 200 KiB; a file of many megabytes is a
// mistake (a log or a dump saved as .yaml), and every command would read it whole.
const MaxFileSize = 4 << 20

// ReadDir returns the description files under dir, named relative to it and sorted by
// name: the order Load reads them in. Entries the description may not hold (see the package
// doc) are never read; when there are any, ReadDir returns the files it could read together
// with a *LoadError naming each refused entry. A directory that cannot be read is an
// ordinary error.
func ReadDir(dir string) ([]File, error) {
	files, refused, err := readDir(context.Background(), dir)
	if err != nil {
		return nil, err
	}
	return files, refused.err(context.Background())
}

// readDir walks dir for ReadDir and LoadContext, stopping when ctx ends.
func readDir(ctx context.Context, dir string) ([]File, diagnostics, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the mesh description: %w", err)
	}
	if !info.IsDir() {
		return nil, nil, fmt.Errorf("reading the mesh description: %s is not a directory", dir)
	}
	// A root that is a symlink (a release switched with `ln -sfn`) is walked where it points:
	// WalkDir does not follow the root itself.
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the mesh description: %w", err)
	}
	t := tree{root: root}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == root {
			return nil
		}
		return t.visit(p, d)
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, fmt.Errorf("reading the mesh description in %s: %w", dir, err)
	}
	sort.Slice(t.files, func(i, j int) bool { return t.files[i].Name < t.files[j].Name })
	return t.files, t.refused, nil
}

// tree is one walk of a description directory.
type tree struct {
	root    string
	files   []File
	refused diagnostics
}

// visit reads one entry under the root, or refuses it by name without reading it.
func (t *tree) visit(p string, d fs.DirEntry) error {
	rel := t.rel(p)
	hidden := strings.HasPrefix(d.Name(), ".")
	isLink := d.Type()&fs.ModeSymlink != 0
	// .git and editors' hidden directories hold YAML that is not the mesh; editors' swap
	// and backup files are not the mesh either.
	if hidden || !d.IsDir() && !isLink && !IsDescriptionFile(d.Name()) {
		if d.IsDir() {
			return filepath.SkipDir
		}
		return nil
	}
	// A name with a control character in it prints as two lines, the second one whatever the
	// name's author wrote: a forged message in a log, a workflow command in CI.
	if !printableName(d.Name()) {
		t.refuse(Pos{File: t.rel(filepath.Dir(p))}, "the name %s is not printable text: rename it; nothing under that name is read", printable.Quote(d.Name()))
		if d.IsDir() {
			return filepath.SkipDir
		}
		return nil
	}
	switch {
	case d.IsDir():
		return nil
	case isLink:
		return t.link(p, rel, d.Name())
	case !d.Type().IsRegular():
		t.refuse(Pos{File: rel}, "not a regular file but %s: a description is made of regular files, so this is not opened", typeName(d.Type()))
		return nil
	}
	return t.read(p, rel)
}

// link follows a symbolic link, to a regular file inside the description only. A link can
// name anything its reader may read (the controller's password, a private key, /dev/zero);
// the description is what is reviewed in git, so what it declares must be in it.
func (t *tree) link(p, rel, name string) error {
	target, _ := os.Readlink(p)
	shown := printable.Quote(target)
	resolved, err := filepath.EvalSymlinks(p)
	var info fs.FileInfo
	if err == nil {
		info, err = os.Stat(resolved)
	}
	if err != nil {
		if !IsDescriptionFile(name) {
			return nil // not part of the description, whatever it names
		}
		why := "does not resolve"
		if errors.Is(err, fs.ErrNotExist) {
			why = "names a file that does not exist"
		}
		t.refuse(Pos{File: rel}, "a symbolic link to %s, which %s", shown, why)
		return nil
	}
	if info.IsDir() {
		// WalkDir does not follow it, and skipping it in silence would drop every
		// declaration under it: an apply would then delete what they describe.
		t.refuse(Pos{File: rel}, "a symbolic link to a directory (%s): meshctl reads the directories inside the description, never through a link, so what it holds would be missing from the mesh; move or copy the directory here", shown)
		return nil
	}
	if !IsDescriptionFile(name) {
		return nil
	}
	inside, err := filepath.Rel(t.root, resolved)
	switch {
	case err != nil || inside == ".." || strings.HasPrefix(inside, ".."+string(filepath.Separator)) || filepath.IsAbs(inside):
		t.refuse(Pos{File: rel}, "a symbolic link to %s, outside the description: only links to regular files inside it are read", shown)
	case hiddenPath(inside):
		t.refuse(Pos{File: rel}, "a symbolic link into a hidden directory (%s), which is not part of the description", shown)
	case !info.Mode().IsRegular():
		t.refuse(Pos{File: rel}, "a symbolic link to %s, which is not a regular file but %s", shown, typeName(info.Mode()))
	default:
		return t.read(resolved, rel)
	}
	return nil
}

// read reads a file that was a regular file when the walk saw it. It is opened without
// blocking and checked again once open: a file swapped for a FIFO in between must not hang
// the command.
func (t *tree) read(p, rel string) error {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		t.refuse(Pos{File: rel}, "not a regular file but %s", typeName(info.Mode()))
		return nil
	}
	if info.Size() > MaxFileSize {
		t.refuse(Pos{File: rel}, "%s", tooLarge(info.Size()))
		return nil
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return err
	}
	if len(data) > MaxFileSize {
		t.refuse(Pos{File: rel}, "%s", tooLarge(int64(len(data))))
		return nil
	}
	t.files = append(t.files, File{Name: rel, Data: data})
	return nil
}

func (t *tree) refuse(p Pos, format string, args ...any) { t.refused.add(p, format, args...) }

// rel names p as errors show it: relative to the root, with slashes; the root itself is ".".
func (t *tree) rel(p string) string {
	rel, err := filepath.Rel(t.root, p)
	if err != nil {
		return filepath.ToSlash(p)
	}
	return filepath.ToSlash(rel)
}

// tooLarge says why a file was refused for its size.
func tooLarge(size int64) string {
	return fmt.Sprintf("too large (%.1f MiB): a description file may be at most %d MiB; split it, or if it is not part of the mesh, name it other than *.yaml",
		float64(size)/(1<<20), MaxFileSize>>20)
}

// hiddenPath reports whether a slash- or separator-joined relative path passes through a
// hidden directory or names a hidden file, which Load never reads.
func hiddenPath(rel string) bool {
	for _, part := range strings.Split(filepath.ToSlash(rel), "/") {
		if strings.HasPrefix(part, ".") {
			return true
		}
	}
	return false
}

// printableName reports whether a file or directory name is UTF-8 without control or
// other invisible format characters.
func printableName(name string) bool {
	if !utf8.ValidString(name) {
		return false
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

func typeName(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	}
	return "something else"
}
