package reconcile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/meshbus/meshctl/bus"
)

// Accounts is where the accounts config lives and how the server is told to re-read it.
type Accounts struct {
	Path     string
	Reloader bus.Reloader
	// Verify proves the server took the new config, for example by logging in as the
	// controller afresh. Nil skips it.
	Verify func(ctx context.Context) error
}

// ErrNotLive is returned (wrapped) when the accounts config was written but the operator
// reloads the server: the change is on disk, not yet in force.
var ErrNotLive = bus.ErrReloadByOperator

// write installs a new accounts config: checked with the server's own parser first,
// written atomically beside the old one, reloaded, verified; when the server refuses it,
// the previous file goes back and is reloaded again, so the bus keeps the config it had.
func (a Accounts) write(ctx context.Context, data []byte) error {
	dir := filepath.Dir(a.Path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating the directory of the accounts config: %w", err)
	}
	if err := bus.CheckAccounts(data, dir); err != nil {
		return fmt.Errorf("the rendered accounts config does not pass the server's parser, so it was not installed: %w", err)
	}
	previous, err := os.ReadFile(a.Path)
	existed := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("reading the accounts config in use: %w", err)
	}
	if existed && bytes.Equal(previous, data) {
		return nil
	}
	if err := WriteFileAtomic(a.Path, data); err != nil {
		return fmt.Errorf("writing the accounts config: %w", err)
	}
	if err := a.reloadAndVerify(ctx); err != nil {
		if errors.Is(err, ErrNotLive) {
			return err
		}
		restore := func() error {
			if !existed {
				return os.Remove(a.Path)
			}
			if err := WriteFileAtomic(a.Path, previous); err != nil {
				return err
			}
			return a.Reloader.Reload(ctx)
		}
		if rerr := restore(); rerr != nil {
			return fmt.Errorf("the server refused the new accounts config (%w), and restoring the previous one failed too: %v", err, rerr)
		}
		return fmt.Errorf("the server refused the new accounts config; the previous one was restored: %w", err)
	}
	return nil
}

func (a Accounts) reloadAndVerify(ctx context.Context) error {
	if err := a.Reloader.Reload(ctx); err != nil {
		return err
	}
	if a.Verify != nil {
		return a.Verify(ctx)
	}
	return nil
}

// WriteFileAtomic writes data to path through a temporary file in the same directory,
// synced and renamed over the old one, mode 0600: a reader (the server, at reload) sees
// the old file or the new one, never half of either.
func WriteFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename there is nothing left to remove
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
