// Package atomicfile replaces a file's contents so that a reader — a server reloading its
// config, another meshctl, a crash — sees the old bytes or the new ones, never half of
// either. Every file meshctl writes this way may hold a secret or a server's config, so it
// is written 0600 whatever the umask (Write); a file another process reads as its own user
// keeps the mode, group and owner it was given (WriteShared), and is never open to every
// user.
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrOpenToAll is returned (wrapped) by WriteShared for a file every user of the host may
// read or write: it is refused, and nothing is written.
var ErrOpenToAll = errors.New("every user of the host may read or write it")

// Write replaces path with data: a temporary file in the same directory (named
// `<base>.tmp-*`), synced, renamed over path, and the directory synced so the rename
// survives a power cut. The new file is 0600, the process's own.
func Write(path string, data []byte) error {
	return write(path, data, func(f *os.File) error {
		// CreateTemp asks for 0600, but a umask could narrow it to something the owner cannot read.
		return f.Chmod(0o600)
	})
}

// WriteShared is Write for a file a server reads as a user of its own (nats-server run as
// `nats`, reading its accounts file through its group): where path exists, the new file gets
// its permission bits and its group, and its owner where the process may set one (as root);
// a new file is 0600. A file with any permission for every user is refused (ErrOpenToAll)
// before anything is written: it holds secrets, and its mode is the operator's to narrow.
func WriteShared(path string, data []byte) error {
	info, err := CheckShared(path)
	if err != nil {
		return err
	}
	if info == nil {
		return Write(path, data)
	}
	return write(path, data, func(f *os.File) error {
		if err := keepOwner(f, info); err != nil {
			return fmt.Errorf("giving the new %s the group of the one it replaces: %w", path, err)
		}
		// After the chown, which clears set-id bits and may be refused a mode it would allow.
		return f.Chmod(info.Mode().Perm())
	})
}

// CheckShared returns what WriteShared keeps of the file at path (nil when there is none), or
// the error it would refuse the file with.
func CheckShared(path string) (fs.FileInfo, error) {
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, err
	case openToAll(info.Mode()):
		return nil, fmt.Errorf("%s is mode %04o: %w; remove that (chmod o= %s), giving the server that reads it its group "+
			"if it runs as another user", path, info.Mode().Perm(), ErrOpenToAll, path)
	}
	return info, nil
}

// write replaces path with data, the temporary file set up by prepare before it is written.
func write(path string, data []byte, prepare func(*os.File) error) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, base+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	renamed := false
	defer func() {
		if !renamed {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := prepare(f); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	renamed = true
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
