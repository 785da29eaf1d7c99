package reconcile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshbus/meshctl/model"
)

// A kept session serves a description only on the same operator: switching bus.auth to jwt,
// or pointing bus.operator at another store, connects anew, while the same block written
// elsewhere does not.
func TestSameBusComparesTheOperator(t *testing.T) {
	t.Parallel()
	op := &model.Operator{Store: "/srv/nsc", Account: "MESH", SystemCreds: "/srv/sys.creds", Pos: model.Pos{File: "a.yaml", Line: 3}}
	moved := *op
	moved.Pos = model.Pos{File: "b.yaml", Line: 9}
	other := *op
	other.Store = "/srv/other"
	jwtBus := model.Bus{URL: "nats://n1:4222", Auth: model.AuthJWT, Operator: op}
	for _, tc := range []struct {
		name string
		b    model.Bus
		same bool
	}{
		{"the same", model.Bus{URL: "nats://n1:4222", Auth: model.AuthJWT, Operator: &moved}, true},
		{"another store", model.Bus{URL: "nats://n1:4222", Auth: model.AuthJWT, Operator: &other}, false},
		{"nkey on the same servers", model.Bus{URL: "nats://n1:4222", Auth: model.AuthNkey}, false},
	} {
		if got := sameBus(jwtBus, tc.b); got != tc.same {
			t.Errorf("%s: sameBus %v; want %v", tc.name, got, tc.same)
		}
	}
}

// TestEmbeddedBusInOperatorModeConverges holds bus.auth: jwt on the embedded bus: before any
// apply a read-only session needs one (it makes no operator); the first connection makes the
// operator in <state>/nsc and serves the bus in operator mode; an apply creates the mesh, and
// a second apply plans nothing and makes no mutating call and no push. A session connected
// again afterwards, the bus restarted, reads the same operator back and is converged.
func TestEmbeddedBusInOperatorModeConverges(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, "bus:\n  auth: jwt\n  listen: 127.0.0.1:0\nnodes: [{name: one}]\nmodules:\n  - {name: shop, on: [one], emits: [order.placed]}\n")
	if _, err := Connect(ctx, f.mesh(), f.store, Options{ReadOnly: true, Logf: f.logf}); !errors.Is(err, ErrNeedsApply) {
		t.Fatalf("a read-only session before any apply: %v; want ErrNeedsApply", err)
	}
	if _, err := os.Stat(filepath.Join(f.stateDi, OperatorStoreDir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the read-only session made an operator store (%v)", err)
	}
	s := f.connect(ctx)
	if s.Embedded == nil || s.jwt == nil {
		t.Fatal("the session neither serves the embedded bus nor holds the mesh's account")
	}
	first := s.jwt.Operator
	f.mustApply(ctx, s)
	f.mustConverge(ctx, s)
	s.Close()

	s = f.connect(ctx)
	if s.jwt.Operator.PublicKey != first.PublicKey || s.jwt.Operator.Account.PublicKey != first.Account.PublicKey {
		t.Fatalf("connected again, the session trusts %s; the first trusted %s", s.jwt.Operator, first)
	}
	f.mustConverge(ctx, s)
}

// An embedded bus that ran with an accounts file keeps its streams in the account named MESH,
// which a server in operator mode never sees: switching its bus.auth to jwt is refused before
// anything is made or started, and the description's earlier bus.auth still serves it. The
// other way round is refused too.
func TestEmbeddedBusRefusesOperatorModeOverAnAccountsFile(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	const modules = "nodes: [{name: one}]\nmodules:\n  - {name: shop, on: [one], emits: [order.placed]}\n"
	f := newFixture(t, "bus:\n  listen: 127.0.0.1:0\n"+modules)
	s := f.connect(ctx)
	f.mustApply(ctx, s)
	s.Close()

	f.write("bus:\n  auth: jwt\n  listen: 127.0.0.1:0\n" + modules)
	if s, err := Connect(ctx, f.mesh(), f.store, Options{Logf: f.logf}); !errors.Is(err, ErrEmbeddedAuthChange) {
		if err == nil {
			s.Close()
		}
		t.Fatalf("connecting in operator mode to an embedded bus that has an accounts file: %v; want ErrEmbeddedAuthChange", err)
	}
	if _, err := os.Stat(filepath.Join(f.stateDi, OperatorStoreDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused connection made an operator (%v)", err)
	}
	f.write("bus:\n  listen: 127.0.0.1:0\n" + modules)
	f.mustConverge(ctx, f.connect(ctx))

	// And the other way round: a bus that ran in operator mode is not given an accounts file.
	g := newFixture(t, "bus:\n  auth: jwt\n  listen: 127.0.0.1:0\n"+modules)
	s = g.connect(ctx)
	g.mustApply(ctx, s)
	s.Close()
	g.write("bus:\n  listen: 127.0.0.1:0\n" + modules)
	if s, err := Connect(ctx, g.mesh(), g.store, Options{Logf: g.logf}); !errors.Is(err, ErrEmbeddedAuthChange) {
		if err == nil {
			s.Close()
		}
		t.Fatalf("connecting with an accounts file to an embedded bus that ran in operator mode: %v; want ErrEmbeddedAuthChange", err)
	}
	if _, err := os.Stat(filepath.Join(g.stateDi, "bus", "accounts.conf")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused connection wrote an accounts file (%v)", err)
	}
}
