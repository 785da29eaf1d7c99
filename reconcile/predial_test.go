package reconcile

import (
	"testing"

	"github.com/meshbus/meshctl/plan"
)

// A connection started before the description is read is the session's only when it reached
// the bus the session goes to, as the controller the store vouches for; otherwise it is
// closed and the session dials its own.
func TestAPredialIsUsedOnlyWhereItFits(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, quickMesh)
	// The bus another meshctl process would serve: this one, as watch does.
	served, err := Connect(ctx, f.mesh(), f.store, Options{Cost: 4, OwnEmbedded: true, Logf: f.logf})
	if err != nil {
		t.Fatal(err)
	}
	defer served.Close()
	f.ownSecrets()

	pre := StartPredial(ctx, f.stateDi)
	if pre == nil {
		t.Fatal("no predial to the embedded bus served from the state directory")
	}
	s, err := Connect(ctx, f.mesh(), f.store, Options{Cost: 4, ReadOnly: true, Predial: pre, Logf: f.logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Conn != pre.conn {
		t.Fatal("the session dialed again beside a predial that fits")
	}
	if _, err := s.Plan(ctx, f.mesh(), plan.Options{}); err != nil {
		t.Fatalf("planning over the predialed connection: %v", err)
	}

	// The controller minted anew meanwhile: the predial holds the old password, and is
	// closed, not used.
	stale := StartPredial(ctx, f.stateDi)
	if _, err := f.store.Revoke(ctx, "controller"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.ControllerPassword(ctx, 4); err != nil {
		t.Fatal(err)
	}
	f.ownSecrets()
	if conn := stale.take(served.Target.URL, "another password"); conn != nil {
		t.Fatal("a predial was taken with a password it did not log in with")
	}
	<-stale.done
	if stale.err == nil && !stale.conn.IsClosed() {
		t.Fatal("a predial not taken was left open")
	}
	// Taken once at most, and closing it after is harmless.
	stale.Close()

	// No bus served from a state directory: nothing to start.
	if p := StartPredial(ctx, t.TempDir()); p != nil {
		p.Close()
		t.Fatal("a predial was started where no bus is served")
	}
}
