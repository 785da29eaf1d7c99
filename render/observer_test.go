package render

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshbus/meshctl/model"
)

const observedMesh = `
nodes: [{name: one}]
seats: [{name: mailer, accepts: [send]}]
modules: [{name: shop, on: [one], sends: [mailer/send]}]
observers: [{name: alice}, {name: grafana}]
`

func parseMesh(t *testing.T, yaml string) *model.Mesh {
	t.Helper()
	m, err := model.Parse([]model.File{{Name: "mesh.yaml", Data: []byte(yaml)}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func subjects(gs []Grant) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = g.String()
	}
	return out
}

// An observer is granted the JetStream API's read-only requests about the account and each
// stream the mesh derives, its own inbox and the nodes' heartbeats: exactly these, and it
// answers nothing (no allow_responses). Another observer has the same grants under its own
// inbox.
func TestAnObserverIsGrantedReadingTheMeshOnly(t *testing.T) {
	t.Parallel()
	d := Derive(parseMesh(t, observedMesh))
	p, ok := d.Principal("observer.alice")
	if !ok {
		t.Fatalf("observer.alice is not derived; the principals are %v", d.Users())
	}
	var wantPub []string
	for _, s := range []string{"CONTROL", "EVENTS", "NODES", "SEAT_MAILER"} {
		wantPub = append(wantPub, "$JS.API.CONSUMER.INFO."+s+".*", "$JS.API.CONSUMER.LIST."+s,
			"$JS.API.CONSUMER.NAMES."+s, "$JS.API.STREAM.INFO."+s)
	}
	wantPub = append(wantPub, "$JS.API.INFO", "$JS.API.STREAM.LIST", "$JS.API.STREAM.NAMES", "$SYS.REQ.USER.INFO")
	slices.Sort(wantPub)
	if diff := cmp.Diff(wantPub, subjects(p.Publish)); diff != "" {
		t.Errorf("observer.alice publishes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"_INBOX.observer.alice.>", "mesh.control.*.heartbeat"}, subjects(p.Subscribe)); diff != "" {
		t.Errorf("observer.alice subscribes (-want +got):\n%s", diff)
	}
	if p.Kind != KindObserver || p.AllowResponses || p.Nkey || p.Node != "" || p.Module != "" {
		t.Errorf("observer.alice is %+v", p)
	}
	for _, g := range append(slices.Clone(p.Publish), p.Subscribe...) {
		if g.Job == "" {
			t.Errorf("the grant %s names no job", g.Subject)
		}
	}
	other, ok := d.Principal("observer.grafana")
	if !ok || !slices.Equal(subjects(other.Publish), wantPub) || !slices.Contains(subjects(other.Subscribe), "_INBOX.observer.grafana.>") {
		t.Errorf("observer.grafana is not granted alike under its own inbox: %+v", other)
	}
	// The server reads the entry as written.
	u := parseUsers(t, string(AccountsConfig(d.Principals, nil)))["observer.alice"]
	if u == nil || !slices.Equal(u.Permissions.Publish.Allow, wantPub) {
		t.Fatalf("the server reads observer.alice's publish grants as %+v", u)
	}
}

// With bus.auth: nkey an observer is an nkey user like a host: it is issued a seed, and its
// entry holds a public key.
func TestAnObserverOfAnNkeyMeshIsAnNkeyUser(t *testing.T) {
	t.Parallel()
	d := Derive(parseMesh(t, "bus: {auth: nkey}\n"+observedMesh))
	if p, _ := d.Principal("observer.alice"); !p.Nkey {
		t.Errorf("observer.alice of an nkey mesh is not an nkey user: %+v", p)
	}
	if p, _ := d.Principal(ControllerUser); p.Nkey {
		t.Error("the controller of an nkey mesh is an nkey user")
	}
}

// Observers add their own entries and change nobody else's: the mesh's other principals,
// its streams and its consumers are what they are without them.
func TestObserversChangeNoOtherPrincipal(t *testing.T) {
	t.Parallel()
	with := parseMesh(t, observedMesh)
	without := *with
	without.Observers = nil
	a, b := Derive(with), Derive(&without)
	var others []Principal
	for _, p := range a.Principals {
		if p.Kind != KindObserver {
			others = append(others, p)
		}
	}
	if diff := cmp.Diff(b.Principals, others); diff != "" {
		t.Errorf("observers changed other principals (-without +with):\n%s", diff)
	}
	if diff := cmp.Diff(b.Streams, a.Streams); diff != "" {
		t.Errorf("observers changed the streams:\n%s", diff)
	}
	if diff := cmp.Diff(b.Consumers, a.Consumers); diff != "" {
		t.Errorf("observers changed the consumers:\n%s", diff)
	}
	if AccountsDigestOf(with, nil, nil) != AccountsDigest(a.Principals, nil) {
		t.Error("the digest rendered a user at a time differs from the whole config's with observers")
	}
}
