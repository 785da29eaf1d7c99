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
