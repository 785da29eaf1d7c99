package state

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/crypto/bcrypt"
)

// Rebuilding a store from its replica, on a control host that lost its disk. The replica holds
// no plaintext: the controller's password comes from the operator, and is accepted only where
// the restored hash says it is the one (AdoptControllerPassword).

// ErrWrongControllerPassword is returned (wrapped) by AdoptControllerPassword when the stored
// controller hash refuses the password: it is not the one of this store's controller, and
// writing it would leave meshctl unable to log in.
var ErrWrongControllerPassword = errors.New("the password is not the controller's")

// Restore makes a new store in dir (which must hold none: refuse otherwise with a clear error)
// from records, a replica's whole content as Snapshot gave it and the later Writes changed it.
//
// records may repeat a key, the later one winning, and a nil Value deletes the key, so a
// replica's log replayed in order restores as well as its content. Every record is checked
// before anything is created; a key of a kind this meshctl does not know (a newer one's) is
// refused rather than dropped. The store restored is the same store (its ID) with no replica
// set, though counted in step with the one records came from (CatchUp then sends nothing), and
// without password files: the caller adopts the controller's password.
func Restore(ctx context.Context, dir string, records []Record) (*Store, error) {
	byFamily, err := restoredRecords(records)
	if err != nil {
		return nil, fmt.Errorf("restoring the store into %s: %w", dir, err)
	}
	path := filepath.Join(dir, dbFileName)
	if err := claimNewDBFile(dir, path); err != nil {
		return nil, fmt.Errorf("restoring the store into %s: %w", dir, err)
	}
	s, err := Open(dir)
	if err != nil {
		removeDBFiles(path)
		return nil, fmt.Errorf("restoring the store into %s: %w", dir, err)
	}
	err = s.inWriteTx(ctx, func(tx *sql.Tx) error { return restoreContent(ctx, tx, byFamily) })
	if err != nil {
		// The file is this call's own, never a store anyone used: left behind, it would be an
		// empty store with an identity of its own, the one that locks every host out.
		s.Close()
		removeDBFiles(path)
		return nil, fmt.Errorf("restoring the store into %s: %w", dir, err)
	}
	return s, nil
}

// restoredRecords is the content records leave, the later of a repeated key winning and a nil
// Value deleting, grouped by family and sorted by key; an error for a key of no family or a
// content without the store's identity.
func restoredRecords(records []Record) (map[*family][]Record, error) {
	content := map[string][]byte{}
	for _, r := range records {
		if r.Value == nil {
			delete(content, r.Key)
		} else {
			content[r.Key] = r.Value
		}
	}
	byFamily := map[*family][]Record{}
	var unknown []string
	for key, value := range content {
		f := familyOf(key)
		if f == nil {
			unknown = append(unknown, key)
			continue
		}
		byFamily[f] = append(byFamily[f], Record{Key: key, Value: value})
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return nil, fmt.Errorf("records of a kind this meshctl does not know (written by a newer one?): %s", strings.Join(unknown, ", "))
	}
	if len(byFamily[&identityRecord]) == 0 {
		return nil, fmt.Errorf("the records hold no %q record: they are not a copy of a meshctl store", identityRecord.prefix)
	}
	for _, rs := range byFamily {
		sortRecords(rs)
	}
	return byFamily, nil
}

// restoreContent inserts the rows of byFamily (as restoredRecords groups them) in tx, each
// family after those its foreign keys refer to, checking that every value is the row of the key
// it came under, and marks the store in step with its replica.
func restoreContent(ctx context.Context, tx *sql.Tx, byFamily map[*family][]Record) error {
	for _, f := range families {
		for _, r := range byFamily[f] {
			key, err := f.restore(ctx, f, tx, r.Value)
			if err != nil {
				return fmt.Errorf("record %s: %w", r.Key, err)
			}
			if key != r.Key {
				return fmt.Errorf("record %s holds the row of %s: the copy is damaged", r.Key, key)
			}
		}
	}
	// The store is its replica's content: not behind it, so keeping that replica next
	// sends nothing until the store changes.
	_, err := tx.ExecContext(ctx, "UPDATE replica SET behind = 0")
	return err
}

// familyOf is the family whose keys key is one of, or nil.
func familyOf(key string) *family {
	for _, f := range families {
		if f.singleton && key == f.prefix || !f.singleton && strings.HasPrefix(key, f.prefix+".") {
			return f
		}
	}
	return nil
}

// claimNewDBFile creates dir if absent and the database file in it, refusing a file that is
// already there: created exclusively, no other process can be opening a store there as well.
func claimNewDBFile(dir, path string) error {
	if err := makePrivateDir(dir); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, fileMode)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s already holds a state store: restore into a directory without one (move this one aside only if it is beyond use: its hashes are what lets the mesh log in)", dir)
	}
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Chmod(path, fileMode)
}

// removeDBFiles removes a database this package created and its WAL files.
func removeDBFiles(path string) {
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(path + suffix)
	}
}

// AdoptControllerPassword makes password (surrounding space trimmed, as a password file is
// read) the controller's password of this store, as ControllerPassword would have left it:
// dir/controller.password and the record that it matches the stored hash. It refuses, with
// ErrWrongControllerPassword, a password the stored controller hash does not accept, and
// changes nothing then. It writes nothing to the database, nor to the replica: for a restored
// store, whose replica holds the hash and never the plaintext.
func (s *Store) AdoptControllerPassword(ctx context.Context, password string) error {
	pw := strings.TrimSpace(password)
	// Under the write lock, as a mint: a ControllerPassword minting at the same time must not
	// have its file overwritten by a password its new hash refuses.
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		hash, hashed, err := storedHash(ctx, tx, controllerPrincipal)
		if err != nil {
			return err
		}
		if !hashed {
			return fmt.Errorf("the store holds no hash of %s to check the password against", controllerPrincipal)
		}
		if pw == "" || bcrypt.CompareHashAndPassword([]byte(hash), []byte(pw)) != nil {
			return fmt.Errorf("%w: the hash of %s in the store refuses it", ErrWrongControllerPassword, controllerPrincipal)
		}
		return s.writeOwnPassword(controllerOwn, hash, pw)
	})
	if err != nil {
		return fmt.Errorf("adopting the controller's password in %s: %w", s.dir, err)
	}
	return nil
}
