package state

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// The commands that only look (diff, status, render) must not write the state directory:
// Open creates it and ControllerPassword mints, so a mistyped --state or a first diff
// would leave a store and a credential behind. These are the reads they use instead.

// ErrNoController means no controller credential was ever minted in the state directory:
// nothing has been applied from it, and meshctl holds no credential for the bus yet.
var ErrNoController = errors.New("no controller credential has been minted in this state directory")

// ErrControllerMismatch means the controller's password file and its stored hash disagree
// (the controller was revoked, or a file restored from an old backup): the next
// ControllerPassword mints a new pair.
var ErrControllerMismatch = errors.New("the controller's password file and its stored hash disagree")

// Exists reports whether dir holds a state store, creating nothing. A path that does not
// exist is false, not an error.
func Exists(dir string) (bool, error) {
	fi, err := os.Stat(filepath.Join(dir, dbFileName))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	case !fi.Mode().IsRegular():
		return false, fmt.Errorf("%s is not a file", filepath.Join(dir, dbFileName))
	}
	return true, nil
}

// StoredControllerPassword is ControllerPassword without ever minting: the password when
// the file and the hash agree, ErrNoController when neither exists, ErrControllerMismatch
// otherwise.
func (s *Store) StoredControllerPassword(ctx context.Context) (string, error) {
	pw, err := s.verifiedOwnPassword(ctx, s.db, controllerOwn, false)
	if err != nil || pw != "" {
		return pw, err
	}
	_, statErr := os.Stat(filepath.Join(s.dir, controllerPasswordFileName))
	var n int
	if err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM credentials WHERE principal = ?", controllerPrincipal).Scan(&n); err != nil {
		return "", fmt.Errorf("reading the controller's hash: %w", err)
	}
	if errors.Is(statErr, fs.ErrNotExist) && n == 0 {
		return "", fmt.Errorf("%s: %w", s.dir, ErrNoController)
	}
	return "", fmt.Errorf("%s: %w", s.dir, ErrControllerMismatch)
}
