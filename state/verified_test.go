package state

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// TestControllerPairRemembered: a minted controller password is recorded as matching its hash,
// so later commands need no bcrypt; a changed password file or hash is checked again and
// refused, a lost record is rebuilt by one bcrypt check, and a read-only read records nothing.
func TestControllerPairRemembered(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	record := filepath.Join(s.dir, controllerVerifiedFileName)
	pw, err := s.ControllerPassword(ctx, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	hashes, err := s.Hashes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !s.knownToMatch(controllerOwn, hashes[controllerPrincipal], pw) {
		t.Fatal("a freshly minted controller password is not recorded as matching its hash")
	}
	if info, err := os.Stat(record); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v, mode %v", record, err, info)
	}
	if again, err := s.ControllerPassword(ctx, bcrypt.MinCost); err != nil || again != pw {
		t.Fatalf("the remembered controller password reads back as another (%v)", err)
	}

	// Lost: one bcrypt check, and the record is back; a read-only read does not write it.
	os.Remove(record)
	if got, err := s.StoredControllerPassword(ctx); err != nil || got != pw {
		t.Fatalf("read-only: %v", err)
	}
	if _, err := os.Stat(record); !os.IsNotExist(err) {
		t.Fatalf("a read-only read wrote %s", record)
	}
	if again, err := s.ControllerPassword(ctx, bcrypt.MinCost); err != nil || again != pw {
		t.Fatalf("without its record the controller password reads back as another (%v)", err)
	}
	if !s.knownToMatch(controllerOwn, hashes[controllerPrincipal], pw) {
		t.Fatal("the record is not rebuilt after a bcrypt check")
	}

	// The password file replaced: the record no longer describes the pair, bcrypt refuses it,
	// and the file is refused rather than taken as the controller's.
	if err := os.WriteFile(filepath.Join(s.dir, controllerPasswordFileName), []byte("RESTOREDFROMELSEWHERE\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ControllerPassword(ctx, bcrypt.MinCost); !errors.Is(err, ErrControllerMismatch) {
		t.Fatalf("a replaced password file: %q, %v; want it refused", got, err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, controllerPasswordFileName), []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// The hash replaced (the controller issued by hand): the file's password no longer opens
	// it, whatever the record said.
	if _, err := s.Mint(ctx, []string{controllerPrincipal}, bcrypt.MinCost, "test"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ControllerPassword(ctx, bcrypt.MinCost); !errors.Is(err, ErrControllerMismatch) {
		t.Fatalf("a password the stored hash no longer accepts: %q, %v; want it refused", got, err)
	}
}

// BenchmarkControllerPassword is every command's read of the controller's password at the
// product's cost 11: "remembered" with controller.verified, "bcrypt" without it.
func BenchmarkControllerPassword(b *testing.B) {
	ctx := context.Background()
	s := newStore(b)
	if _, err := s.ControllerPassword(ctx, 11); err != nil {
		b.Fatal(err)
	}
	b.Run("remembered", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.ControllerPassword(ctx, 11); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("bcrypt", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			os.Remove(filepath.Join(s.dir, controllerVerifiedFileName))
			if _, err := s.ControllerPassword(ctx, 11); err != nil {
				b.Fatal(err)
			}
		}
	})
}
