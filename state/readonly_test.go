package state

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestExistsCreatesNothing(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "state")
	if ok, err := Exists(missing); ok || err != nil {
		t.Fatalf("Exists(missing) = %v, %v", ok, err)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("Exists created %s", missing)
	}
	s := newStore(t)
	if ok, err := Exists(s.Dir()); !ok || err != nil {
		t.Fatalf("Exists(store) = %v, %v", ok, err)
	}
}

// StoredControllerPassword reads what ControllerPassword minted and never mints itself.
func TestStoredControllerPasswordNeverMints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.StoredControllerPassword(ctx); !errors.Is(err, ErrNoController) {
		t.Fatalf("before any mint: %v, want ErrNoController", err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), controllerPasswordFileName)); !os.IsNotExist(err) {
		t.Fatal("StoredControllerPassword wrote the password file")
	}
	pw, err := s.ControllerPassword(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.StoredControllerPassword(ctx); err != nil || got != pw {
		t.Fatalf("after minting: %q, %v", got, err)
	}
	if _, err := s.Revoke(ctx, controllerPrincipal); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StoredControllerPassword(ctx); !errors.Is(err, ErrControllerMismatch) {
		t.Fatalf("after revoking the controller: %v, want ErrControllerMismatch", err)
	}
}

// What status, diff and credentials list read, they read while another process holds the
// write lock: the database is in WAL mode, where a reader needs no lock a writer holds. Opening
// a current store must not take the write lock either (it once began the migration's write
// transaction, and waited 5s for the writer before failing with "database is locked").
func TestReadsWhileAnotherProcessWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state")
	openStore(t, dir).Close()
	startCrashHelper(t, dir) // holds an open write transaction until the test ends

	s, err := Open(dir)
	if err != nil {
		t.Fatalf("opening the store while another process writes: %v", err)
	}
	defer s.Close()
	reads := map[string]func() error{
		"Inventory":     func() error { _, err := s.Inventory(ctx); return err },
		"HolderChanges": func() error { _, err := s.HolderChanges(ctx, 10); return err },
		"History":       func() error { _, err := s.History(ctx, 10); return err },
		"Refusals":      func() error { _, err := s.Refusals(ctx, 10); return err },
		"Credentials":   func() error { _, err := s.Credentials(ctx); return err },
		"Hashes":        func() error { _, err := s.Hashes(ctx); return err },
		"Enrolments":    func() error { _, err := s.Enrolments(ctx); return err },
		"Reports":       func() error { _, err := s.Reports(ctx); return err },
		"StoredControllerPassword": func() error {
			if _, err := s.StoredControllerPassword(ctx); !errors.Is(err, ErrNoController) {
				return err
			}
			return nil
		},
	}
	for name, read := range reads {
		if err := read(); err != nil {
			t.Errorf("%s while another process writes: %v", name, err)
		}
	}
}
