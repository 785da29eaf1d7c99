package state

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// smallDisk mounts a tmpfs of size bytes for the test and unmounts it when the test ends: the
// only honest way to a full disk, where every layer (the kernel, SQLite's WAL and shared
// memory) fails the way it does in the field. Without the privilege to mount, the test skips.
func smallDisk(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("a full disk needs a tmpfs of its own, and mounting one was refused (%v): run as root to test it", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting the test's tmpfs %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes to dir until its filesystem is full.
func fill(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 4096)
	for {
		if _, err := f.Write(block); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the disk: %v", err)
			}
			return
		}
	}
}

// A state directory on a full disk says so, naming the directory, whether the store is being
// created or written. SQLite says "disk I/O error (4874)" when it cannot grow its shared-memory
// file, and "database or disk is full" when it cannot grow the WAL; neither names the place.
func TestFullDiskSaysNoSpaceLeftAtTheStateDirectory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	disk := smallDisk(t, "2m")
	written := filepath.Join(disk, "written")
	s := openStore(t, written)
	// A store closed cleanly has no -shm file; reopening it must create one.
	reopened := filepath.Join(disk, "reopened")
	r, err := Open(reopened)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	fill(t, disk)

	wantFull := func(what string, err error, dir string) {
		t.Helper()
		want := "no space left on device at " + dir
		if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s on a full disk: %v\nwant an error saying %q", what, err, want)
		}
	}
	created := filepath.Join(disk, "created")
	_, err = Open(created)
	wantFull("creating a store", err, created)
	_, err = Open(reopened)
	wantFull("reopening a store", err, reopened)

	// Each write is large enough not to fit in what the WAL has already allocated.
	big := ApplyRecord{Summary: strings.Repeat("x", 256<<10), Outcome: "applied"}
	_, err = s.RecordApply(ctx, big)
	wantFull("recording an apply", err, written)
	_, err = s.Mint(ctx, []string{"node.full"}, bcrypt.MinCost, "issue")
	wantFull("minting", err, written)
	err = s.RecordRefusal(ctx, Refusal{User: "u", Op: "publish", Subject: strings.Repeat("s", 256<<10), Advice: "a", Count: 1})
	wantFull("recording a refusal", err, written)
}
