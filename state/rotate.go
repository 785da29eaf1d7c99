package state

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/meshbus/meshctl/internal/atomicfile"
)

// ControllerRotation is the controller's password replaced by RotateControllerPassword, until
// the servers are seen serving a config that carries it: UndoControllerRotation puts back what
// it replaced.
type ControllerRotation struct {
	// Password is the new password. Previous is the one it replaced, "" where the file held
	// none the stored hash accepted: the servers may still know meshctl by it, and only by it,
	// until they load the new config.
	Password, Previous string

	rows     []previousRow // the controller's and the system user's rows before
	rotated  []previousRow // and after
	file     []byte        // controller.password before, nil where there was none
	hadFile  bool
	rotateAt time.Time
}

// previousRow is a credential row as it was before a rotation; held false where there was none.
type previousRow struct {
	principal, hash, mintedAt, operation string
	held                                 bool
}

// RotateControllerPassword replaces the controller's password, at the operator's word: a new
// one is minted, its hash stored, and dir/controller.password written, in one transaction;
// where the store holds a hash of meshctl's system user, that is replaced too by the hash of
// the system password derived from the new one (SystemPassword), since the two must change
// together. It works whether or not the file held the controller's password: it is the way out
// of a ControllerMismatchError that does not put the old file back. The caller makes the
// accounts config carrying the new hashes live, and undoes the rotation
// (UndoControllerRotation) when it cannot. On ErrReplicaBehind the rotation stands and the
// result is valid. It refuses a state directory whose controller was never minted
// (ErrNoController): the first apply mints it.
func (s *Store) RotateControllerPassword(ctx context.Context, cost int) (*ControllerRotation, error) {
	what := fmt.Sprintf("rotating the controller's password in %s", s.dir)
	previous, err := s.controllerPassword(ctx, s.db, false)
	if errors.Is(err, ErrNoController) {
		return nil, fmt.Errorf("%s: %w: the first apply mints it", what, err)
	}
	if err != nil && !errors.Is(err, ErrControllerMismatch) {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	fresh, err := mint(ctx, []string{controllerPrincipal}, cost, false)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	system := []minted{{principal: systemPrincipal, password: SystemPasswordFor(fresh[0].password)}}
	if err := hashAll(ctx, system, cost); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	r := &ControllerRotation{Password: fresh[0].password, Previous: previous, rotateAt: time.Now()}
	path := filepath.Join(s.dir, controllerPasswordFileName)
	err = s.change(ctx, what, func(tx *sql.Tx, c *changes) error {
		r.file, err = os.ReadFile(path)
		r.hadFile = err == nil
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		r.rows = nil
		for _, p := range []string{controllerPrincipal, systemPrincipal} {
			row, err := readPreviousRow(ctx, tx, p)
			if err != nil {
				return err
			}
			r.rows = append(r.rows, row)
		}
		rotated := fresh
		if r.rows[1].held {
			rotated = append(rotated, system...)
		}
		if err := storeHashes(ctx, tx, c, rotated, r.rotateAt, opControllerRotate); err != nil {
			return err
		}
		r.rotated = nil
		for _, m := range rotated {
			r.rotated = append(r.rotated, previousRow{principal: m.principal, hash: m.hash, mintedAt: formatTime(r.rotateAt),
				operation: opControllerRotate, held: true})
		}
		if r.rows[1].held {
			s.rememberMatch(systemOwn, system[0].hash, system[0].password)
		}
		// Written before the commit: if the commit fails, the file and the hash disagree and
		// the next command says so, naming this very way out.
		return s.writeOwnPassword(controllerOwn, fresh[0].hash, fresh[0].password)
	})
	if err != nil && !errors.Is(err, ErrReplicaBehind) {
		return nil, err
	}
	return r, err
}

func readPreviousRow(ctx context.Context, tx *sql.Tx, principal string) (previousRow, error) {
	row := previousRow{principal: principal}
	err := tx.QueryRowContext(ctx, "SELECT hash, minted_at, operation FROM credentials WHERE principal = ?", principal).
		Scan(&row.hash, &row.mintedAt, &row.operation)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return row, nil
	case err != nil:
		return row, fmt.Errorf("reading the credential of %s: %w", principal, err)
	}
	row.held = true
	return row, nil
}

// KeepControllerRotation stores r's rows again where the store no longer holds them: a store
// made equal to its copy on the bus (Refresh) after a rotation that could not reach the bus,
// where another copy wrote since, took the previous hashes back from it. With a replica set the
// rows reach the bus; a store that holds them already changes nothing.
func (s *Store) KeepControllerRotation(ctx context.Context, r *ControllerRotation) error {
	what := fmt.Sprintf("keeping the controller's rotated password in %s", s.dir)
	return s.change(ctx, what, func(tx *sql.Tx, c *changes) error {
		return putRows(ctx, tx, c, r.rotated, time.Now())
	})
}

// putRows makes the credential rows of rows what they say, revoking those not held, and notes
// in c the rows it changed.
func putRows(ctx context.Context, tx *sql.Tx, c *changes, rows []previousRow, now time.Time) error {
	for _, row := range rows {
		current, err := readPreviousRow(ctx, tx, row.principal)
		if err != nil {
			return err
		}
		switch {
		case current == row:
		case !row.held:
			if _, err := revoke(ctx, tx, c, row.principal, now); err != nil {
				return err
			}
		default:
			if _, err := tx.ExecContext(ctx, `INSERT INTO credentials (principal, hash, minted_at, operation) VALUES (?, ?, ?, ?)
				ON CONFLICT (principal) DO UPDATE SET hash = excluded.hash, minted_at = excluded.minted_at, operation = excluded.operation`,
				row.principal, row.hash, row.mintedAt, row.operation); err != nil {
				return fmt.Errorf("storing the credential of %s: %w", row.principal, err)
			}
			c.add(&credentials, row.principal)
			res, err := tx.ExecContext(ctx, "DELETE FROM revocations WHERE principal = ?", row.principal)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n > 0 {
				c.add(&revocations, row.principal)
			}
		}
	}
	return nil
}

// UndoControllerRotation puts back what r replaced: the controller's and the system user's rows
// (revoked again where there was none) and dir/controller.password as it was. On
// ErrReplicaBehind the undo stands.
func (s *Store) UndoControllerRotation(ctx context.Context, r *ControllerRotation) error {
	what := fmt.Sprintf("putting back the controller's password in %s", s.dir)
	path := filepath.Join(s.dir, controllerPasswordFileName)
	return s.change(ctx, what, func(tx *sql.Tx, c *changes) error {
		if err := putRows(ctx, tx, c, r.rows, time.Now()); err != nil {
			return err
		}
		if !r.hadFile {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			return nil
		}
		removeStaleTemps(filepath.Split(path))
		return atomicfile.Write(path, r.file)
	})
}
