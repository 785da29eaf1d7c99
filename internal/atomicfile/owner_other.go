//go:build !unix

package atomicfile

import (
	"io/fs"
	"os"
)

// keepOwner keeps nothing where files have no Unix owner and group: the mode alone is kept.
func keepOwner(*os.File, fs.FileInfo) error { return nil }

// openToAll is false where a file's mode bits do not say who may read it.
func openToAll(fs.FileMode) bool { return false }
