//go:build unix

package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// keepOwner gives f the owner and group of info. Only root may give a file away: any other
// process keeps the file its own and sets the group alone, which it may where it is a member
// of that group. A group it may not set is an error, for a server reading the file through
// its group would be locked out of it.
func keepOwner(f *os.File, info fs.FileInfo) error {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	uid, gid := int(st.Uid), int(st.Gid)
	err := f.Chown(uid, gid)
	if err == nil || uid == os.Geteuid() || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	return f.Chown(-1, gid)
}

// openToAll reports whether mode gives every user of the host some permission.
func openToAll(mode fs.FileMode) bool { return mode.Perm()&0o007 != 0 }
