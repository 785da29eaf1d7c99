package reconcile

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/plan"
)

// awaitLogin waits until the external server lets user in with password (admits), or refuses
// it as unauthorized: a reload in flight takes a moment.
func awaitLogin(ctx context.Context, t *testing.T, x externalServer, user, password string, admits bool) {
	t.Helper()
	testwait.Until(t, admitting(x.url, user, admits), func() error {
		c, err := busclient.DialAlone(ctx, busclient.Target{URL: x.url, Fingerprint: x.fingerprint}, busclient.Credential{User: user, Password: password})
		if err == nil {
			c.Close()
		}
		return admitted(err, admits, func(err error) bool { return errors.Is(err, nats.ErrAuthorization) })
	})
}

// A second state store in front of a bus another manages — a rebuilt control host, a CI
// runner's fresh directory — changes nothing on it: no apply, no credential issued, no diff
// bootstraps its own accounts config over the one every host logs in with, and each says
// which store manages the bus. The first store goes on managing it.
func TestAFreshStoreInFrontOfAManagedBusChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	x := startExternal(t)
	first := newFixture(t, x.mesh(x.fingerprint))
	s := first.connect(ctx)
	pw := first.mint(ctx, "alpha.shop")
	first.mustApply(ctx, s)
	s.Close()
	awaitLogin(ctx, t, x, "alpha.shop", pw["alpha.shop"], true)
	served, err := os.ReadFile(x.accounts)
	if err != nil {
		t.Fatal(err)
	}
	firstID, err := first.store.ID(ctx)
	if err != nil {
		t.Fatal(err)
	}

	fresh := newFixture(t, x.mesh(x.fingerprint))
	// apply (and watch, which connects the same way)
	_, err = Connect(ctx, fresh.mesh(), fresh.store, Options{Cost: bcrypt.MinCost, Logf: fresh.logf})
	if !errors.Is(err, accounts.ErrNotManager) || !strings.Contains(err.Error(), firstID) {
		t.Fatalf("a fresh store's apply was not refused naming the manager %s: %v", firstID, err)
	}
	// diff
	_, err = Connect(ctx, fresh.mesh(), fresh.store, Options{ReadOnly: true, Logf: fresh.logf})
	if !errors.Is(err, accounts.ErrNotManager) {
		t.Fatalf("a fresh store's diff was not refused as another's bus: %v", err)
	}
	// credentials issue: refused before anything is minted, and the write itself refused too
	if err := CheckManager(ctx, fresh.mesh(), fresh.store); !errors.Is(err, accounts.ErrNotManager) {
		t.Fatalf("a fresh store may issue credentials on a bus another manages: %v", err)
	}
	fresh.mint(ctx, "alpha.shop")
	if _, err := SyncAccounts(ctx, fresh.mesh(), fresh.store); !errors.Is(err, accounts.ErrNotManager) {
		t.Fatalf("a fresh store's credentials issue was not refused: %v", err)
	}
	fresh.logf("%v", err)
	if pwFile, err := os.ReadFile(fresh.stateDi + "/controller.password"); err == nil {
		fresh.secrets = append(fresh.secrets, strings.TrimSpace(string(pwFile)))
	}

	if after, err := os.ReadFile(x.accounts); err != nil || !bytes.Equal(after, served) {
		t.Fatalf("the served accounts config was changed by a store that does not manage the bus (%v)", err)
	}
	awaitLogin(ctx, t, x, "alpha.shop", pw["alpha.shop"], true)

	// The managing store goes on: its next apply is converged, and the file still names it.
	s = first.connect(ctx)
	defer s.Close()
	first.mustConverge(ctx, s)
	if m, _, ok := accounts.CutManagerLine(served); !ok || m.Store != firstID {
		t.Fatalf("the accounts config does not name its manager: %+v %v", m, ok)
	}
}

// The plan never replaces a working hash on the server that the planning store neither minted
// nor revoked: a host issued by another store would be locked out unseen. A credential this
// store revoked by name is its to lock.
func TestAPlanDoesNotLockOutAHostTheStoreNeverIssued(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	x := startExternal(t)
	f := newFixture(t, x.mesh(x.fingerprint))
	s := f.connect(ctx)
	defer s.Close()
	pw := f.mint(ctx, "alpha.shop")
	f.mustApply(ctx, s)

	// The store forgets the credential it issued, as a store restored from an old backup
	// would: the host still logs in with the hash on the server.
	db, err := sql.Open("sqlite", filepath.Join(f.stateDi, "meshctl.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "DELETE FROM credentials WHERE principal = 'alpha.shop'"); err != nil {
		t.Fatal(err)
	}
	p, err := s.Plan(ctx, f.mesh(), plan.Options{AllowMassDelete: true})
	if err != nil {
		t.Fatal(err)
	}
	if !p.MassDeleteRefused() || p.MassDelete.LockedOut != 1 || !strings.Contains(p.MassDelete.Refused, "alpha.shop") {
		t.Fatalf("a plan locking out a host the store never issued was not refused: %+v", p.MassDelete)
	}
	if _, _, err := f.apply(ctx, s, RunOptions{AllowMassDelete: true}); err == nil {
		t.Fatal("the apply locked out a host the store never issued")
	}
	awaitLogin(ctx, t, x, "alpha.shop", pw["alpha.shop"], true)

	// Revoked by name, it is the store's to lock.
	if _, err := f.store.Revoke(ctx, "alpha.shop"); err != nil {
		t.Fatal(err)
	}
	f.mustApply(ctx, s)
	awaitLogin(ctx, t, x, "alpha.shop", pw["alpha.shop"], false)
}
