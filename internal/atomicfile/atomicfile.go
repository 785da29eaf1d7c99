// Package atomicfile replaces a file's contents so that a reader — a server reloading its
// config, another meshctl, a crash — sees the old bytes or the new ones, never half of
// either. Every file meshctl writes this way may hold a secret or a server's config, so it
// is written 0600 whatever the umask.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with data: a temporary file in the same directory (named
// `<base>.tmp-*`), synced, renamed over path, and the directory synced so the rename
// survives a power cut.
func Write(path string, data []byte) error {
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
	// CreateTemp asks for 0600, but a umask could narrow it to something the owner cannot read.
	if err := f.Chmod(0o600); err != nil {
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
