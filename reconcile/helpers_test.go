package reconcile

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/internal/lockedbuf"
	"github.com/meshbus/meshctl/internal/testnats"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/state"
)

func TestMain(m *testing.M) {
	// A refused reload is waited out before the previous file goes back; the tests that
	// provoke one need not wait the product's ten seconds.
	accounts.ProofWait = 3 * time.Second
	code := m.Run()
	testnats.RemoveBuiltServer()
	os.Exit(code)
}

// quickMesh is the mesh most tests reconcile: an embedded bus on a random port.
const quickMesh = `
bus:
  listen: "127.0.0.1:-1"
nodes:
  - name: alpha
  - name: beta
seats:
  - name: mailer
    accepts: [send]
    emits: [sent]
modules:
  - name: shop
    on: [alpha]
    emits: [order.placed]
    sends: [mailer/send]
  - name: postman
    on: [beta]
    claims: [mailer]
    follows: [shop/order.placed]
controller:
  follows: [seat:mailer/sent]
`

// fixture is one test's mesh directory, state store and log, with every secret it saw so
// the test can prove none of them leaked.
type fixture struct {
	t       *testing.T
	dir     string
	stateDi string
	store   *state.Store
	log     *lockedbuf.Buffer
	secrets []string
}

func newFixture(t *testing.T, yaml string) *fixture {
	t.Helper()
	f := &fixture{t: t, dir: t.TempDir(), stateDi: filepath.Join(t.TempDir(), "state"), log: &lockedbuf.Buffer{}}
	f.write(yaml)
	st, err := state.Open(f.stateDi)
	if err != nil {
		t.Fatal(err)
	}
	f.store = st
	t.Cleanup(func() {
		st.Close()
		f.assertNoSecretLeaked()
	})
	return f
}

func (f *fixture) write(yaml string) {
	f.t.Helper()
	if err := os.WriteFile(filepath.Join(f.dir, "mesh.yaml"), []byte(yaml), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) mesh() *model.Mesh {
	f.t.Helper()
	m, err := model.Load(f.dir)
	if err != nil {
		f.t.Fatal(err)
	}
	return m
}

func (f *fixture) logf(format string, args ...any) { fmt.Fprintf(f.log, format+"\n", args...) }

// connect opens a session as the product does, at the cheapest bcrypt cost.
func (f *fixture) connect(ctx context.Context) *Session {
	f.t.Helper()
	s, err := Connect(ctx, f.mesh(), f.store, Options{Cost: bcrypt.MinCost, Logf: f.logf})
	if err != nil {
		f.t.Fatalf("connecting: %v", err)
	}
	f.t.Cleanup(s.Close)
	f.ownSecrets()
	return s
}

// ownSecrets adds meshctl's own passwords, as minted so far, to what no output may show.
func (f *fixture) ownSecrets() {
	for _, name := range []string{"controller.password", "system.password"} {
		if pw, err := os.ReadFile(filepath.Join(f.stateDi, name)); err == nil {
			f.secrets = append(f.secrets, strings.TrimSpace(string(pw)))
		}
	}
}

// apply reconciles and logs what happened, counting the calls.
func (f *fixture) apply(ctx context.Context, s *Session, o RunOptions) (Result, *Counting, error) {
	f.t.Helper()
	counting := &Counting{API: s.API}
	s.API = counting
	defer func() { s.API = counting.API }()
	res, err := s.Reconcile(ctx, f.mesh(), o)
	if res.Plan != nil {
		_ = res.Plan.Text(f.log, false)
		_ = res.Plan.JSON(f.log)
	}
	if err != nil {
		f.logf("apply: %v", err)
	}
	return res, counting, err
}

func (f *fixture) mustApply(ctx context.Context, s *Session) Result {
	f.t.Helper()
	res, _, err := f.apply(ctx, s, RunOptions{})
	if err != nil {
		f.t.Fatalf("apply: %v", err)
	}
	return res
}

// mustConverge asserts the bus plans nothing and an apply makes no mutating call.
func (f *fixture) mustConverge(ctx context.Context, s *Session) {
	f.t.Helper()
	p, err := s.Plan(ctx, f.mesh(), plan.Options{})
	if err != nil {
		f.t.Fatal(err)
	}
	if !p.Empty() || len(p.Holders) > 0 {
		var b strings.Builder
		_ = p.Text(&b, false)
		f.t.Fatalf("the bus is not converged:\n%s", b.String())
	}
	res, counting, err := f.apply(ctx, s, RunOptions{})
	if err != nil || counting.Mutations.Load() != 0 || res.Applied != 0 {
		f.t.Fatalf("a converged apply made %d mutating call(s), applied %d: %v", counting.Mutations.Load(), res.Applied, err)
	}
}

// mint issues passwords, remembering them as secrets.
func (f *fixture) mint(ctx context.Context, users ...string) map[string]string {
	f.t.Helper()
	pws, err := f.store.Mint(ctx, users, bcrypt.MinCost, "test")
	if err != nil {
		f.t.Fatal(err)
	}
	for _, pw := range pws {
		f.secrets = append(f.secrets, pw)
	}
	return pws
}

func (f *fixture) assertNoSecretLeaked() {
	out := f.log.String()
	for _, s := range f.secrets {
		if s != "" && strings.Contains(out, s) {
			f.t.Errorf("a password appears in the output, log or errors of this test")
		}
	}
}

func (f *fixture) js(s *Session) jetstream.JetStream {
	f.t.Helper()
	js, err := jetstream.New(s.Conn.Conn)
	if err != nil {
		f.t.Fatal(err)
	}
	return js
}

// testContext bounds a whole test, made once it runs (after its t.Parallel()): a bound on a
// hang, not a measurement. A cluster test takes half a minute on a quiet machine, and several
// times that on two cores running the whole suite under the race detector.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
