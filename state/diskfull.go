package state

import (
	"errors"
	"fmt"
	"syscall"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// ErrNoSpace marks an error caused by a full disk (or an exhausted quota). Each layer says it
// its own way — "write …: no space left on device" from a file, "database or disk is full" or
// "disk I/O error" from SQLite, "error creating store for consumer" from the server — and only
// the first names the cause an operator can act on; DiskError says it once, with the place.
var ErrNoSpace = errors.New("no space left on device")

// lowSpace is the free space below which an I/O failure is put down to a full disk: less
// than a small file's worth of blocks, where any write meshctl or the server makes can fail.
const lowSpace = 1 << 20

// DiskError returns err, said as "no space left on device" naming path, when err comes from a
// full disk: an ENOSPC or EDQUOT anywhere in its chain, SQLite's SQLITE_FULL, or an I/O
// failure (SQLite's SQLITE_IOERR, or an error the caller knows to be the server's store
// failing, marked by ioFailure) on a filesystem that has less than 1 MiB free at path. Any
// other error is returned as it is.
func DiskError(err error, path string) error {
	return diskError(err, path, false)
}

// StoreFailure is DiskError for an error the caller knows to be a failed write of some store
// under path — the server's "error creating store" for a stream or consumer — whose text
// does not carry the cause: it is put down to a full disk when path's filesystem is nearly
// full.
func StoreFailure(err error, path string) error {
	return diskError(err, path, true)
}

func diskError(err error, path string, ioFailure bool) error {
	if err == nil || errors.Is(err, ErrNoSpace) {
		return err
	}
	full := errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_FULL:
			full = true
		case sqlite3.SQLITE_IOERR:
			ioFailure = true
		}
	}
	free, known := freeSpace(path)
	if !full && !(ioFailure && known && free < lowSpace) {
		return err
	}
	if known {
		return fmt.Errorf("%w at %s (%s free): %w", ErrNoSpace, path, humanBytes(free), err)
	}
	return fmt.Errorf("%w at %s: %w", ErrNoSpace, path, err)
}

// freeSpace is how many bytes an unprivileged writer can still use on path's filesystem.
func freeSpace(path string) (uint64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, false
	}
	return st.Bavail * uint64(st.Bsize), true
}

func humanBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
