package reconcile

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/bus/bustest"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/replica"
	"github.com/meshbus/meshctl/state"
)

// replicaSeq is the last sequence of the bucket the store is kept in on the bus: what a write
// there moves.
func replicaSeq(ctx context.Context, t *testing.T, s *Session) uint64 {
	t.Helper()
	st, err := jsOf(t, s).Stream(ctx, "KV_"+render.StateBucket)
	if err != nil {
		t.Fatalf("the store's bucket on the bus: %v", err)
	}
	return st.CachedInfo().State.LastSeq
}

// jsOf is JetStream on the session's connection.
func jsOf(t *testing.T, s *Session) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(s.Conn.Conn)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// A control host lost with its disk is rebuilt from the bus by whoever knows the controller's
// password: the same store — its identity, every hash — so every host goes on logging in, the
// next plan is converged, and a revocation through the restored store takes effect. A
// converged apply writes nothing to the bus's copy.
func TestAStoreRestoredFromTheBusIsTheSameStore(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	x := startExternal(t)
	f := newFixture(t, x.mesh(x.fingerprint))
	s := f.connect(ctx)
	pw := f.mint(ctx, "alpha.shop")
	f.mustApply(ctx, s)
	before := replicaSeq(ctx, t, s)
	f.mustConverge(ctx, s)
	if _, _, err := f.apply(ctx, s, RunOptions{RecordNoop: false}); err != nil {
		t.Fatal(err)
	}
	if after := replicaSeq(ctx, t, s); after != before {
		t.Fatalf("a converged apply wrote %d record(s) to the bus's copy of the store", after-before)
	}
	s.Close()
	controllerPW, err := os.ReadFile(filepath.Join(f.stateDi, "controller.password"))
	if err != nil {
		t.Fatal(err)
	}
	password := strings.TrimSpace(string(controllerPW))

	// A wrong password restores nothing.
	if _, _, err := Restore(ctx, f.mesh(), filepath.Join(t.TempDir(), "wrong"), "not-the-password", true); err == nil {
		t.Fatal("a wrong controller password restored the store")
	}

	dir := filepath.Join(t.TempDir(), "restored")
	st, what, err := Restore(ctx, f.mesh(), dir, password, true)
	if err != nil {
		t.Fatalf("restoring: %v", err)
	}
	defer st.Close()
	f.logf("%s", what)
	wantID, _ := f.store.ID(ctx)
	if id, err := st.ID(ctx); err != nil || id != wantID {
		t.Fatalf("the restored store is %s (%v), not the store %s that manages the bus", id, err, wantID)
	}
	wantHashes, _ := f.store.Hashes(ctx)
	if got, err := st.Hashes(ctx); err != nil || !maps.Equal(got, wantHashes) {
		t.Fatalf("the restored hashes differ (%v):\n got %v\nwant %v", err, got, wantHashes)
	}
	awaitLogin(ctx, t, x, "alpha.shop", pw["alpha.shop"], true)

	restored := &fixture{t: t, dir: f.dir, stateDi: dir, store: st, log: f.log}
	rs := restored.connect(ctx)
	defer rs.Close()
	restored.mustConverge(ctx, rs)
	// The restored store is its copy's content: keeping the copy sends nothing back but the
	// fence that makes this copy the store's writer, once; a converged apply again, nothing.
	after := replicaSeq(ctx, t, rs)
	if after != before+1 {
		t.Fatalf("the restored store wrote %d message(s) to the copy it was restored from, want the fence alone", after-before)
	}
	stream, err := jsOf(t, rs).Stream(ctx, "KV_"+render.StateBucket)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := stream.GetMsg(ctx, after); err != nil ||
		m.Subject != "$KV."+render.StateBucket+"."+replica.FenceKey {
		t.Fatalf("the one message the restored store wrote is not the fence: %v (%v)", m, err)
	}
	restored.mustConverge(ctx, rs)
	if again := replicaSeq(ctx, t, rs); again != after {
		t.Fatalf("a converged apply of the restored store wrote %d message(s) to the bus", again-after)
	}

	if _, err := st.Revoke(ctx, "alpha.shop"); err != nil {
		t.Fatal(err)
	}
	if _, err := SyncAccounts(ctx, f.mesh(), st); err != nil {
		t.Fatalf("revoking through the restored store: %v", err)
	}
	awaitLogin(ctx, t, x, "alpha.shop", pw["alpha.shop"], false)
	f.secrets = append(f.secrets, password)
}

// The embedded bus keeps its store beside it: nothing is on the bus to restore.
func TestTheEmbeddedBusHasNothingToRestore(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "nodes:\n  - name: alpha\n")
	_, _, err := Restore(testContext(t), f.mesh(), filepath.Join(t.TempDir(), "restored"), "x", true)
	if !errors.Is(err, ErrNothingToRestore) {
		t.Fatalf("restoring an embedded bus's store: %v", err)
	}
}

// On a three-server cluster, the store kept on the bus (R3) restores as it does on one server:
// a fresh store without the password is refused as not the manager and changes nothing, and
// the restored store plans nothing, while the host issued by the lost one logs in on every
// server.
func TestAStoreOnAClusterRestoresAndAFreshOneIsRefused(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	c := bustest.StartTestCluster(t, 3)
	f := newFixture(t, clusterMesh(c))
	s := f.connect(ctx)
	f.mustApply(ctx, s)
	shop := f.mint(ctx, "alpha.shop")["alpha.shop"]
	f.mustApply(ctx, s)
	eachServer(t, ctx, c.Servers, "alpha.shop", shop, true)
	s.Close()

	fresh, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if sess, err := Connect(ctx, f.mesh(), fresh, Options{Cost: bcrypt.MinCost}); !errors.Is(err, accounts.ErrNotManager) {
		if sess != nil {
			sess.Close()
		}
		t.Fatalf("a fresh store in front of the cluster: %v, want refused as not the manager", err)
	}

	password, err := os.ReadFile(filepath.Join(f.stateDi, "controller.password"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "restored")
	st, _, err := Restore(ctx, f.mesh(), dir, strings.TrimSpace(string(password)), true)
	if err != nil {
		t.Fatalf("restoring from the cluster: %v", err)
	}
	defer st.Close()
	restored := &fixture{t: t, dir: f.dir, stateDi: dir, store: st, log: f.log}
	rs := restored.connect(ctx)
	defer rs.Close()
	restored.mustConverge(ctx, rs)
	eachServer(t, ctx, c.Servers, "alpha.shop", shop, true)
}
