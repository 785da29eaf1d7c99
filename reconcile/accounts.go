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
	"github.com/meshbus/meshctl/internal/atomicfile"
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
	if err := atomicfile.Write(a.Path, data); err != nil {
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
			if err := atomicfile.Write(a.Path, previous); err != nil {
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
