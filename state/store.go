package state

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// File names inside the state directory.
const (
	dbFileName                 = "meshctl.db"
	controllerPasswordFileName = "controller.password"
	systemPasswordFileName     = "system.password"
	lockFileName               = "apply.lock"
)

// Modes of everything the store creates: the hashes and the controller's plaintext are readable
// by the control host's owner only.
const (
	dirMode  fs.FileMode = 0o700
	fileMode fs.FileMode = 0o600
)

// sqliteHeader starts every SQLite 3 database file.
const sqliteHeader = "SQLite format 3\x00"

// ErrNewerSchema is returned (wrapped) by Open when the database was migrated by a newer meshctl:
// an older binary would misread tables it does not know, or write rows the newer one rejects.
var ErrNewerSchema = errors.New("the state store's schema is newer than this meshctl")

// ErrCorrupt is returned (wrapped) by Open when the database file is not a SQLite database or
// fails its integrity check. The file is left exactly as it was found.
var ErrCorrupt = errors.New("the state store is corrupt or not a SQLite database")

// Store is an open state store. Its methods are safe for concurrent use, and several Stores (in
// one process or several) may share one directory: SQLite serialises their writes.
type Store struct {
	dir string
	db  *sql.DB

	// replicaMu orders the changes handed to replica (change); replicaBehind says a Write
	// failed and the next must send the whole store.
	replicaMu     sync.Mutex
	replica       Replica
	replicaBehind bool
}

// Open opens the store in dir, creating dir (0700) and dir/meshctl.db (0600) if absent. The
// database runs in WAL mode with a 5s busy timeout and foreign keys on; an older schema is
// migrated inside one transaction. A file written by a newer meshctl is refused with
// ErrNewerSchema, and a corrupt or non-SQLite file with ErrCorrupt: neither is ever modified.
// A store of the current schema is opened without taking SQLite's write lock, so a reader
// (status, diff) opens it while another process writes. Processes opening one directory at
// once create and migrate it one after the other. An error caused by a full disk wraps
// ErrNoSpace and names dir.
func Open(dir string) (*Store, error) {
	path := filepath.Join(dir, dbFileName)
	db, err := openDB(dir, path)
	if err != nil {
		return nil, DiskError(fmt.Errorf("opening the state store at %s: %w", path, err), dir)
	}
	return &Store{dir: dir, db: db}, nil
}

// Close closes the database. The Store must not be used afterwards.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("closing the state store in %s: %w", s.dir, err)
	}
	return nil
}

// Dir returns the state directory the store was opened in.
func (s *Store) Dir() string { return s.dir }

// openDB performs Open's steps in an order where nothing is written to the file before it has
// been shown to be a SQLite database of a schema version this binary knows and intact.
func openDB(dir, path string) (*sql.DB, error) {
	if err := makePrivateDir(dir); err != nil {
		return nil, err
	}
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	var db *sql.DB
	err = withDirLock(d, func() error {
		if err := preparePrivateDBFile(path); err != nil {
			return err
		}
		abs, err := filepath.Abs(path)
		if err != nil {
			return err
		}
		if db, err = sql.Open("sqlite", dsn(abs)); err != nil {
			return err
		}
		if err := checkAndMigrate(context.Background(), db, path); err != nil {
			db.Close()
			return err
		}
		return nil
	})
	return db, err
}

// dsn is the connection string for the database at the absolute path abs. Per-connection
// settings go in the DSN so that every connection of the pool gets them, not only the first:
//   - busy_timeout: a second meshctl (or a second Store) waits for a write lock instead of
//     failing at once with SQLITE_BUSY;
//   - foreign_keys: off by default in SQLite, and without it the inventory's references are decor;
//   - synchronous(FULL): a minted hash is durable before its plaintext is handed out, otherwise
//     a power loss could leave an operator holding a password the bus will never accept;
//   - _txlock=immediate: write transactions take the write lock at BEGIN; a deferred transaction
//     that reads and then writes can fail with SQLITE_BUSY without the busy handler ever running.
func dsn(abs string) string {
	u := url.URL{Scheme: "file", Path: abs}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Set("_txlock", "immediate")
	return u.String() + "?" + q.Encode()
}

// makePrivateDir creates dir with mode 0700 if it does not exist. The mode is set explicitly
// because the process's umask would otherwise decide it. An existing directory is left as it is:
// it may be one the operator chose and manages.
func makePrivateDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case err == nil && !fi.IsDir():
		return fmt.Errorf("%s exists and is not a directory", dir)
	case err == nil:
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return err
	}
	return os.Chmod(dir, dirMode)
}

// preparePrivateDBFile creates the database file with mode 0600 before SQLite sees it, so that
// SQLite (which gives new files 0644 less the umask, and gives its -wal and -shm files the mode of
// the database) never creates a file others can read. An existing file is checked for the SQLite
// header first: a garbage file is refused before SQLite could touch it, and an existing valid file
// has its mode tightened, since it holds password hashes.
func preparePrivateDBFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, fileMode)
	if err == nil {
		if err := f.Close(); err != nil {
			return err
		}
		return os.Chmod(path, fileMode)
	}
	if !errors.Is(err, fs.ErrExist) {
		return err
	}
	f, err = os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	header := make([]byte, len(sqliteHeader))
	n, err := io.ReadFull(f, header)
	switch {
	case n == 0 && errors.Is(err, io.EOF):
		// An empty file is an empty database to SQLite; it becomes ours.
	case err != nil && !errors.Is(err, io.ErrUnexpectedEOF):
		return err
	case n < len(sqliteHeader) || !bytes.Equal(header, []byte(sqliteHeader)):
		return corrupt(errors.New("the file does not start with the SQLite header"))
	}
	return os.Chmod(path, fileMode)
}

// checkAndMigrate refuses a database this binary must not write to, switches it to WAL and applies
// the pending migrations. The checks are reads; only then do the writes begin.
func checkAndMigrate(ctx context.Context, db *sql.DB, path string) error {
	var version int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return classify(err)
	}
	if err := checkVersion(version); err != nil {
		return err
	}
	if err := quickCheck(ctx, db); err != nil {
		return err
	}
	// WAL lets readers (meshctl diff, status) run while an apply writes.
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode=WAL").Scan(&mode); err != nil {
		return classify(err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("setting WAL mode: the database stayed in %q mode", mode)
	}
	// SQLite gives -wal and -shm the database's mode; setting it again keeps that promise should
	// a future SQLite change its mind.
	for _, suffix := range []string{"-wal", "-shm"} {
		if err := os.Chmod(path+suffix, fileMode); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if version == schemaVersion {
		// Nothing to migrate: beginning migrate's write transaction would wait for any
		// process writing the store, and fail after the busy timeout if it writes on.
		return nil
	}
	return migrate(ctx, db)
}

// quickCheck runs PRAGMA quick_check, which catches a damaged file before meshctl trusts the
// hashes in it (a lost credentials row means a node that cannot log in).
func quickCheck(ctx context.Context, db *sql.DB) error {
	rows, err := db.QueryContext(ctx, "PRAGMA quick_check")
	if err != nil {
		return classify(err)
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return classify(err)
		}
		if line != "ok" && len(problems) < 5 {
			problems = append(problems, line)
		}
	}
	if err := rows.Err(); err != nil {
		return classify(err)
	}
	if len(problems) > 0 {
		return corrupt(fmt.Errorf("quick_check: %s", strings.Join(problems, "; ")))
	}
	return nil
}

// classify marks SQLite's "this is not a (sound) database" errors as ErrCorrupt; other errors
// (I/O, permissions, a lock held too long) pass through as they are.
func classify(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff { // the low byte is the primary code of an extended code
		case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
			return corrupt(err)
		}
	}
	return err
}

// corrupt wraps cause in ErrCorrupt with what the operator can do about it.
func corrupt(cause error) error {
	return fmt.Errorf("%w (left untouched: restore it from a backup, or move it aside to start a new store and re-issue every credential): %w", ErrCorrupt, cause)
}

// inWriteTx runs fn in a write transaction and commits it, or rolls back if fn fails. A
// failure caused by a full disk wraps ErrNoSpace and names the state directory.
func (s *Store) inWriteTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return DiskError(err, s.dir)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return DiskError(err, s.dir)
	}
	return DiskError(tx.Commit(), s.dir)
}

// Times are stored as fixed-width UTC text: readable with the sqlite3 shell, and ordered the
// same as text and as time.
const timeLayout = "2006-01-02T15:04:05.000000000Z"

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(timeLayout, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("reading a stored time: %w", err)
	}
	return t, nil
}
