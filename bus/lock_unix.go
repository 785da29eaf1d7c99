//go:build unix

package bus

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockDir takes an exclusive flock on path for as long as the bus runs. The kernel releases it
// when the process dies, so unlike bus.json it can never go stale; and since flock belongs to the
// open file, a second StartEmbedded in the same process is refused too.
func lockDir(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrAlreadyRunning
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
