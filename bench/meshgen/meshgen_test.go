package meshgen

import (
	"bytes"
	"strings"
	"testing"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

func TestAGeneratedMeshLoadsWithTheSizeAsked(t *testing.T) {
	t.Parallel()
	for _, g := range []Mesh{Scaled(500), Scaled(5000), {Nodes: 3, Instances: 4, Seats: 1}, {Nodes: 10, Instances: 7, Seats: 0}} {
		m, err := model.Parse(g.Files())
		if err != nil {
			t.Fatalf("%+v does not load: %v", g, err)
		}
		if got := len(m.Instances()); got != g.Instances {
			t.Errorf("%+v: %d instances", g, got)
		}
		if len(m.Nodes) != g.Nodes || len(m.Seats) != g.Seats {
			t.Errorf("%+v: %d nodes, %d seats", g, len(m.Nodes), len(m.Seats))
		}
		if g.Seats >= 20 && (len(m.Holders) == 0 || len(m.Holding) == 0 || len(m.Holding) == g.Seats) {
			t.Errorf("%+v: %d explicit holders, %d of %d seats held: want some of each", g, len(m.Holders), len(m.Holding), g.Seats)
		}
	}
}

// The issue's reference mesh: about 6,000 consumers, 200 streams.
func TestTheReferenceMeshHasTheIssuesProportions(t *testing.T) {
	t.Parallel()
	m, err := model.Parse(Scaled(5000).Files())
	if err != nil {
		t.Fatal(err)
	}
	d := render.Derive(m)
	if n := len(d.Consumers); n < 5800 || n > 6300 {
		t.Errorf("%d consumers", n)
	}
	if n := len(d.Streams); n != 203 {
		t.Errorf("%d streams", n)
	}
	if n := len(d.Principals); n != 1+2*1000+5000 {
		t.Errorf("%d principals", n)
	}
}

func TestGenerationIsDeterministic(t *testing.T) {
	t.Parallel()
	a, b := Scaled(1000).Files(), Scaled(1000).Files()
	if len(a) != len(b) {
		t.Fatal("different file counts")
	}
	for i := range a {
		if a[i].Name != b[i].Name || !bytes.Equal(a[i].Data, b[i].Data) {
			t.Fatalf("%s differs between two runs", a[i].Name)
		}
	}
}

// A touched module changes one consumer's filters and one user's grants, nothing else.
func TestTouchingChangesOneConsumerPerModule(t *testing.T) {
	t.Parallel()
	base := Scaled(1000)
	touched := base
	touched.Touched = 10
	d0, d1 := derive(t, base), derive(t, touched)
	if len(d0.Consumers) != len(d1.Consumers) || len(d0.Principals) != len(d1.Principals) {
		t.Fatal("touching added or removed objects")
	}
	changed := 0
	for i := range d0.Consumers {
		a, b := d0.Consumers[i].Config, d1.Consumers[i].Config
		if len(a.FilterSubjects)+btoi(a.FilterSubject != "") != len(b.FilterSubjects)+btoi(b.FilterSubject != "") {
			changed++
		}
	}
	if changed != 10 {
		t.Errorf("%d consumers changed, want 10", changed)
	}
}

func derive(t *testing.T, g Mesh) *render.Desired {
	t.Helper()
	m, err := model.Parse(g.Files())
	if err != nil {
		t.Fatal(err)
	}
	return render.Derive(m)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A mesh naming an external server loads with that server as its bus, and differs from the
// same mesh on the embedded bus in its bus section alone.
func TestAServerIsNamedInTheBusSectionAlone(t *testing.T) {
	t.Parallel()
	base := Scaled(500)
	external := base
	external.Server = Server{URL: "tls://127.0.0.1:4222", Fingerprint: strings.Repeat("ab", 32),
		AccountsFile: "/srv/nats/mesh-accounts.conf", PIDFile: "/srv/nats/nats.pid"}
	m, err := model.Parse(external.Files())
	if err != nil {
		t.Fatal(err)
	}
	b := m.Bus
	if b.URL != external.Server.URL || b.Fingerprint != external.Server.Fingerprint ||
		b.AccountsFile != external.Server.AccountsFile || b.Reload.PIDFile != external.Server.PIDFile {
		t.Errorf("the bus loaded is %+v; want the server %+v", b, external.Server)
	}
	a, x := base.Files(), external.Files()
	for i := range a {
		if a[i].Name != "mesh.yaml" && !bytes.Equal(a[i].Data, x[i].Data) {
			t.Errorf("%s differs with a server named", a[i].Name)
		}
	}
}

// An operator-mode cluster is named in the bus section alone: auth jwt, its servers and the
// operator's store, account and system user, the paths absolute as the bench writes them.
func TestAnOperatorModeClusterIsNamedInTheBusSection(t *testing.T) {
	t.Parallel()
	g := Scaled(500)
	g.Auth = model.AuthJWT
	g.Operator = Operator{Servers: []string{"nats://127.0.0.1:4222", "nats://127.0.0.1:4223", "nats://127.0.0.1:4224"},
		Store: "/srv/nsc", Account: "MESH", SystemCreds: "/srv/sys.creds"}
	m, err := model.Parse(g.Files())
	if err != nil {
		t.Fatal(err)
	}
	b := m.Bus
	if !b.JWT() || b.Embedded() || len(b.Servers) != 3 || b.Servers[2].URL != g.Operator.Servers[2] {
		t.Errorf("the bus loaded is %+v; want jwt on the three servers %v", b, g.Operator.Servers)
	}
	if o := b.Operator; o == nil || o.Store != g.Operator.Store || o.Account != g.Operator.Account || o.SystemCreds != g.Operator.SystemCreds {
		t.Errorf("bus.operator is %+v; want %+v", o, g.Operator)
	}
}
