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

// ErrControllerMismatch means the controller's password file and its stored hash disagree: the
// file replaced, edited or missing, or the controller revoked. It is never minted anew for it
// (ControllerMismatchError, which says what to do).
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
// the file and the hash agree, ErrNoController when neither exists, a *ControllerMismatchError
// (ErrControllerMismatch) otherwise. It writes nothing, not even the record of a match.
func (s *Store) StoredControllerPassword(ctx context.Context) (string, error) {
	return s.controllerPassword(ctx, s.db, false)
}
