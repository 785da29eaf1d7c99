package controller

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/meshbus/meshctl/model"
)

func TestClassifyReadsOnlyTheSubjectsTheMeshDerives(t *testing.T) {
	for subject, want := range map[string]struct {
		kind Kind
		node string
	}{
		"mesh.control.one.report":    {KindReport, "one"},
		"mesh.control.one.enrol":     {KindEnrol, "one"},
		"mesh.control.two.heartbeat": {KindHeartbeat, "two"},
		"mesh.control.one.other":     {KindUnknown, ""},
		"mesh.control.one.report.x":  {KindUnknown, ""},
		"mesh.node.one.declare":      {KindUnknown, ""},
	} {
		if k, n := Classify(subject); k != want.kind || n != want.node {
			t.Errorf("Classify(%s) = %v, %q; want %v, %q", subject, k, n, want.kind, want.node)
		}
	}
}

// The window of seed 002: held within the bound, let go past it, closed by a success; a message
// published during a long outage gets its own bound.
func TestTheStoreWindow(t *testing.T) {
	w := Window{Bound: time.Minute, Retry: 5 * time.Second}
	t0 := time.Unix(1000, 0)
	fail := errors.New("database is locked")
	if s := w.After(fail, t0, t0); s.Verb != Nak || s.Delay != 5*time.Second {
		t.Fatalf("first failure: %+v, want a nak of 5s", s)
	}
	if !w.Opened().Equal(t0) {
		t.Fatalf("the window opened at %v, want %v", w.Opened(), t0)
	}
	if s := w.After(fail, t0, t0.Add(59*time.Second)); s.Verb != Nak {
		t.Fatalf("within the bound: %+v, want a nak", s)
	}
	if s := w.After(fail, t0, t0.Add(time.Minute)); s.Verb != Term {
		t.Fatalf("at the bound: %+v, want a term", s)
	}
	// Published 10s ago, while the store has been failing for an hour: held, not let go.
	if s := w.After(fail, t0.Add(time.Hour-10*time.Second), t0.Add(time.Hour)); s.Verb != Nak {
		t.Fatalf("a fresh message in a long outage: %+v, want a nak", s)
	}
	if s := w.After(nil, t0, t0.Add(2*time.Hour)); s.Verb != Ack || !w.Opened().IsZero() {
		t.Fatalf("the store took it: %+v, window %v; want an ack and the window closed", s, w.Opened())
	}
}

func TestAReportOfAnOlderGenerationIsSuperseded(t *testing.T) {
	if _, err := JudgeReport([]byte(`{"generation":2}`), 3); !errors.Is(err, ErrSuperseded) {
		t.Errorf("generation 2 after 3 was declared: %v, want ErrSuperseded", err)
	}
	if r, err := JudgeReport([]byte(`{"generation":3,"applied":["one.shop"]}`), 3); err != nil || r.Generation != 3 {
		t.Errorf("the current generation: %+v, %v", r, err)
	}
	if _, err := JudgeReport([]byte(`not json`), 0); !errors.Is(err, ErrNotReport) {
		t.Errorf("garbage: %v, want ErrNotReport", err)
	}
}

func load(t *testing.T, description string) *model.Mesh {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mesh.yaml"), []byte(description), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestAnEnrolmentIsJudgedByItsNodeAndKey(t *testing.T) {
	m := load(t, twoNodes)
	key := make([]byte, KeySize)
	ok := []byte(`{"reply":"_INBOX.enrol.one.abc","key":"` + b64(key) + `"}`)
	if ask, err := JudgeEnrolment(m, "mesh.control.one.enrol", ok); err != nil || ask.Reply != "_INBOX.enrol.one.abc" {
		t.Fatalf("a good request: %+v, %v", ask, err)
	}
	if _, err := JudgeEnrolment(m, "mesh.control.three.enrol", []byte(`{"reply":"_INBOX.enrol.three.abc","key":"`+b64(key)+`"}`)); !errors.Is(err, ErrRefused) {
		t.Errorf("a node not in the description: %v, want ErrRefused", err)
	}
	if _, err := JudgeEnrolment(m, "mesh.control.one.enrol", []byte(`{"reply":"_INBOX.enrol.two.abc","key":"`+b64(key)+`"}`)); err == nil {
		t.Errorf("an answer steered to another node's inbox was accepted")
	}
	if _, err := JudgeEnrolment(m, "mesh.control.one.enrol", []byte(`{"reply":"_INBOX.enrol.one.abc","key":"AAAA"}`)); !errors.Is(err, ErrRefused) {
		t.Errorf("a short key: %v, want ErrRefused", err)
	}
}

// What a node is declared: its instances with their subjects, seats and consumers; the digest
// changes with what it runs and not with the sealed memberships.
func TestTheDeclarationOfANode(t *testing.T) {
	m := load(t, twoNodes)
	two := DeclarationFor(m, "two")
	if len(two.Instances) != 1 {
		t.Fatalf("node two runs %+v, want postman alone", two.Instances)
	}
	p := two.Instances[0]
	if p.User != "two.postman" || !slices.Equal(p.Holds, []string{"mailer"}) ||
		!slices.Equal(p.Follows, []string{"mesh.mod.shop.event.order.placed"}) ||
		!slices.Contains(p.Emits, "mesh.seat.mailer.event.sent") ||
		!slices.Equal(p.Consumers, []Consumer{{"EVENTS", "two_postman"}, {"SEAT_MAILER", "SEAT_MAILER_worker"}}) {
		t.Errorf("two.postman is declared %+v", p)
	}
	digest := two.Digest()
	two.Instances[0].Membership = []byte("sealed afresh")
	if two.Digest() != digest {
		t.Error("the digest changed with the sealed membership")
	}
	moved := load(t, twoNodes+`  - name: audit
    on: [two]
    follows: [shop/order.placed]
`)
	if DeclarationFor(moved, "two").Digest() == digest {
		t.Error("the digest did not change when a module joined the node")
	}
	if DeclarationFor(moved, "one").Digest() != DeclarationFor(m, "one").Digest() {
		t.Error("node one's digest changed though nothing on it did")
	}
}

func TestOnlyANewOrRemintedCredentialIsMinted(t *testing.T) {
	d := Declaration{Instances: []Instance{{User: "one.a"}, {User: "one.b"}, {User: "one.c"}}}
	keep, mint := Credentials(d, map[string]string{"one.a": "h1", "one.b": "h2"}, map[string]string{"one.a": "h1", "one.b": "other"})
	if !slices.Equal(keep, []string{"one.a"}) || !slices.Equal(mint, []string{"one.b", "one.c"}) {
		t.Errorf("keep %v, mint %v; want one.a kept, one.b (minted again elsewhere) and one.c (new) minted", keep, mint)
	}
}

func TestASealedMembershipOpensOnlyWithItsNodesKey(t *testing.T) {
	pub, priv, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := Seal(pub, []byte("secret"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Open(pub, priv, sealed); err != nil || string(got) != "secret" {
		t.Fatalf("Open = %q, %v", got, err)
	}
	otherPub, otherPriv, _ := GenerateKey()
	if _, err := Open(otherPub, otherPriv, sealed); !errors.Is(err, ErrUnseal) {
		t.Errorf("another node's key opened it: %v", err)
	}
}
