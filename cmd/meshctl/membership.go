package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/meshbus/meshctl/internal/atomicfile"
)

// membershipFile is where `credentials issue -o FILE` writes the membership: a password in
// clear, so 0600 like every secret meshctl writes, and never in place of a file that is
// already there unless asked (--force). A shell redirect would leave it 0644 to every user.
//
// It is claimed before the password is minted: minting replaces the principal's previous
// password, so a membership that could not then be written would be lost with it.
type membershipFile struct {
	path  string
	force bool
	f     *os.File // the claimed file without --force; with it, the file is replaced whole
}

func claimMembershipFile(path string, force bool) (*membershipFile, error) {
	if force {
		fi, err := os.Stat(path)
		switch {
		case err == nil && !fi.Mode().IsRegular():
			return nil, fmt.Errorf("%s is not a regular file: the membership is written to a file of its own", path)
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return nil, err
		}
		if fi, err := os.Stat(filepath.Dir(path)); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("writing the membership to %s: no directory %s", path, filepath.Dir(path))
		}
		return &membershipFile{path: path, force: true}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("%s exists; pass --force to replace it (issuing mints a new password: the membership in it stops working)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("writing the membership: %w", err)
	}
	return &membershipFile{path: path, f: f}, nil
}

// write stores the membership line and closes the file.
func (m *membershipFile) write(line []byte) error {
	if m.force {
		return atomicfile.Write(m.path, line)
	}
	_, err := m.f.Write(line)
	if err == nil {
		err = m.f.Sync()
	}
	if cerr := m.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// abandon removes a claimed file that never received a membership.
func (m *membershipFile) abandon() {
	if m.f != nil {
		m.f.Close()
		os.Remove(m.path)
	}
}
