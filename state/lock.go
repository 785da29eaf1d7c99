package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrLocked is returned (wrapped) by AcquireLock when another meshctl holds the apply lock.
var ErrLocked = errors.New("another meshctl holds the apply lock")

// lockRetry is how often a waiting AcquireLock tries again.
const lockRetry = 100 * time.Millisecond

// Lock is a held apply lock. Two applies at once would interleave their changes to streams,
// consumers and the accounts file, and each would verify a bus the other is still changing.
type Lock struct {
	mu   sync.Mutex
	f    *os.File // nil once unlocked
	dir  *os.File // the state directory, locked by withDirLock while the record is emptied
	path string
}

// lockRecord is what apply.lock holds while a process has the lock: enough for the operator to
// find the holder, and for the next holder to tell that this one died holding it.
type lockRecord struct {
	PID   int       `json:"pid"`
	Host  string    `json:"host"`
	Since time.Time `json:"since"`
}

func (r lockRecord) String() string {
	return fmt.Sprintf("pid %d on %s since %s", r.PID, r.Host, r.Since.Format(time.RFC3339))
}

// AcquireLock takes the apply lock dir/apply.lock: flock(LOCK_EX|LOCK_NB), which the kernel
// releases when the holder exits however it exits, so a crash never leaves the mesh locked.
//
// If another process holds it, AcquireLock returns an error wrapping ErrLocked that names the
// holder's pid and since when, or, with wait, calls notice once that it is waiting and tries
// again every 100ms until it gets the lock or ctx ends (the error then wraps ErrLocked and
// ctx's error). If the lock is free but its file still names a holder (that process died
// without unlocking, possibly mid-apply), AcquireLock takes it over and tells notice so, since
// the bus may be half applied. notice may be nil. The flock and the record are taken together,
// under a flock on the directory itself, so a process that finds the lock held always finds
// whom it is held by.
func AcquireLock(ctx context.Context, dir string, wait bool, notice func(string)) (*Lock, error) {
	path := filepath.Join(dir, lockFileName)
	l, err := acquireLock(ctx, dir, path, wait, notice)
	if err != nil {
		return nil, fmt.Errorf("acquiring the apply lock %s: %w", path, err)
	}
	return l, nil
}

func acquireLock(ctx context.Context, dir, path string, wait bool, notice func(string)) (*Lock, error) {
	if notice == nil {
		notice = func(string) {}
	}
	if err := makePrivateDir(dir); err != nil {
		return nil, err
	}
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, fileMode)
	if err != nil {
		d.Close()
		return nil, err
	}
	if err := f.Chmod(fileMode); err != nil {
		f.Close()
		d.Close()
		return nil, err
	}
	if err := flockWaiting(ctx, d, f, wait, notice); err != nil {
		f.Close()
		d.Close()
		return nil, err
	}
	return &Lock{f: f, dir: d, path: path}, nil
}

// flockWaiting takes an exclusive flock on f and writes this process's record in it, waiting
// for the lock if wait is set. Each try holds the directory lock d, and the record is written
// before it is let go: a process that finds f locked always finds its holder's record.
func flockWaiting(ctx context.Context, d, f *os.File, wait bool, notice func(string)) error {
	var ticker *time.Ticker
	for {
		var holder string
		err := withDirLock(d, func() error {
			err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
			if errors.Is(err, syscall.EWOULDBLOCK) {
				holder = describeHolder(f)
				return nil
			}
			if err != nil {
				return fmt.Errorf("flock: %w", err)
			}
			return takeOver(f, notice)
		})
		if err != nil || holder == "" {
			return err
		}
		if !wait {
			return fmt.Errorf("%w: held by %s", ErrLocked, holder)
		}
		if ticker == nil {
			ticker = time.NewTicker(lockRetry)
			defer ticker.Stop()
			notice("waiting for the apply lock held by " + holder)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: still held by %s: %w", ErrLocked, holder, ctx.Err())
		case <-ticker.C:
		}
	}
}

// takeOver writes this process's record in f, whose flock it has just taken, saying so when a
// record left in it belongs to a holder that never unlocked.
func takeOver(f *os.File, notice func(string)) error {
	if prev, err := readLockRecord(f); err != nil {
		notice("took over the apply lock, whose previous holder left an unreadable record; a previous apply may have stopped half way")
	} else if prev != nil {
		notice(fmt.Sprintf("took over the apply lock left by pid %d on %s (%s) since %s; that apply may have stopped half way",
			prev.PID, prev.Host, holderFate(*prev), prev.Since.Format(time.RFC3339)))
	}
	if err := writeLockRecord(f); err != nil {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return err
	}
	return nil
}

// withDirLock runs fn holding an exclusive flock on the state directory d itself, for the short
// steps that two meshctl processes must not interleave: creating and migrating the store (two
// connections switching a new file to WAL at once deadlock, and SQLite fails one at once with
// SQLITE_BUSY rather than wait), and taking or releasing the apply lock together with its
// record (between the two, the lock would be held by a holder no one can name). fn must not
// wait for anything another process holds other than through SQLite's busy timeout.
func withDirLock(d *os.File, fn func() error) error {
	if err := syscall.Flock(int(d.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("flock %s: %w", d.Name(), err)
	}
	defer syscall.Flock(int(d.Fd()), syscall.LOCK_UN)
	return fn()
}

// describeHolder says who holds the lock, from the record in f.
func describeHolder(f *os.File) string {
	r, err := readLockRecord(f)
	if err != nil || r == nil {
		// The holder wrote its record badly, or is an older meshctl, which took the flock
		// and wrote its record in two steps.
		return "another process (it has not recorded its pid)"
	}
	return r.String()
}

// readLockRecord reads the record in f; nil if the file is empty.
func readLockRecord(f *os.File) (*lockRecord, error) {
	data, err := io.ReadAll(io.NewSectionReader(f, 0, 64<<10))
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(string(data)) == "" {
		return nil, nil
	}
	var r lockRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// writeLockRecord replaces the content of f with this process's record.
func writeLockRecord(f *os.File) error {
	host, _ := os.Hostname()
	data, err := json.Marshal(lockRecord{PID: os.Getpid(), Host: host, Since: time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt(append(data, '\n'), 0); err != nil {
		return err
	}
	return f.Sync()
}

// holderFate says what became of the holder of a stale record, as far as this host can tell.
func holderFate(r lockRecord) string {
	if host, _ := os.Hostname(); r.Host != host {
		return "on another host; it no longer holds the lock"
	}
	if err := syscall.Kill(r.PID, 0); errors.Is(err, syscall.ESRCH) {
		return "no longer running"
	}
	// The pid is alive: reused by another process, or the holder closed the lock without
	// Unlock.
	return "it no longer holds the lock"
}

// Unlock empties the lock file and releases the lock. The empty file tells the next holder that
// this apply ended cleanly. Calling Unlock again does nothing.
func (l *Lock) Unlock() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	f, d := l.f, l.dir
	l.f, l.dir = nil, nil
	defer d.Close()
	// Truncate before releasing, and both under the directory lock: once released, another
	// process may already have written its record, which this truncate would then erase; and a
	// process looking in between would find the lock held by no one it can name.
	err := withDirLock(d, func() error {
		return errors.Join(f.Truncate(0), syscall.Flock(int(f.Fd()), syscall.LOCK_UN))
	})
	if err = errors.Join(err, f.Close()); err != nil {
		return fmt.Errorf("releasing the apply lock %s: %w", l.path, err)
	}
	return nil
}
