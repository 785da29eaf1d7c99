//go:build unix

package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/meshbus/meshctl/internal/testnats"
)

func TestWriteSharedKeepsTheModeGroupAndOwnerOfTheFileItReplaces(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "accounts.conf")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	uid, gid := os.Geteuid(), testnats.OtherGroup(t)
	if uid == 0 {
		uid = 4242 // root may give a file away, and the new one must stay given
	}
	if err := os.Chown(path, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := WriteShared(path, []byte("new")); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := info.Sys().(*syscall.Stat_t)
	if info.Mode().Perm() != 0o640 || int(st.Gid) != gid || int(st.Uid) != uid {
		t.Fatalf("the new file is mode %04o, owner %d, group %d; want 0640, %d, %d as the one it replaced", info.Mode().Perm(), st.Uid, st.Gid, uid, gid)
	}
	if got, _ := os.ReadFile(path); string(got) != "new" {
		t.Fatalf("read %q", got)
	}
}

func TestWriteSharedRefusesAFileEveryUserMayRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "accounts.conf")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	err := WriteShared(path, []byte("new"))
	if !errors.Is(err, ErrOpenToAll) || !strings.Contains(err.Error(), "0644") {
		t.Fatalf("a file every user may read was not refused by its mode: %v", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Fatalf("the refused file was written: %q", got)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp-*")); len(left) != 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}
}

func TestWriteSharedMakesANewFile0600(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "accounts.conf")
	if err := WriteShared(path, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("a new file: %v, %v; want mode 0600", info.Mode(), err)
	}
}
