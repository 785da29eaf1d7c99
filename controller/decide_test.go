package controller

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/state"
	"github.com/meshbus/meshctl/wire"
)

func TestClassifyReadsOnlyTheSubjectsTheMeshDerives(t *testing.T) {
	for subject, want := range map[string]struct {
		kind Kind
		node string
	}{
		"mesh.control.one.report":     {KindReport, "one"},
		"mesh.control.one.enrol":      {KindEnrol, "one"},
		"mesh.control.two.heartbeat":  {KindHeartbeat, "two"},
		"mesh.control.one.other":      {KindUnknown, ""},
		"mesh.control.one.report.x":   {KindUnknown, ""},
		"mesh.node.one.declare":       {KindUnknown, ""},
		"mesh.control..report":        {KindUnknown, ""},
		"mesh.control.One.report":     {KindUnknown, ""},
		"mesh.control.o\x1bne.report": {KindUnknown, ""},
		"mesh.control." + strings.Repeat("n", model.MaxNameLen+1) + ".report": {KindUnknown, ""},
	} {
		if k, n := Classify(subject); k != want.kind || n != want.node {
			t.Errorf("Classify(%s) = %v, %q; want %v, %q", subject, k, n, want.kind, want.node)
		}
	}
}

// The store window: held within the bound, let go past it, closed by a success; a message
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
	if _, err := JudgeReport("one", []byte(`{"generation":2}`), 3); !errors.Is(err, ErrSuperseded) {
		t.Errorf("generation 2 after 3 was declared: %v, want ErrSuperseded", err)
	}
	if r, err := JudgeReport("one", []byte(`{"generation":3,"applied":["one.shop"],"failed":{"one.audit":"disk full","(removing)":"read-only"}}`), 3); err != nil || r.Generation != 3 {
		t.Errorf("the current generation: %+v, %v", r, err)
	}
}

// A report out of bounds is not a report: no store that returns could take it, so it is let
// go, never held as a store failure.
func TestAReportOutOfBoundsIsNotAReport(t *testing.T) {
	for name, payload := range map[string]string{
		"garbage":                     `not json`,
		"the largest generation":      `{"generation":18446744073709551615}`,
		"a generation above the last": `{"generation":4}`,
		"generation 0":                `{"generation":0}`,
		"another node's instance":     `{"generation":3,"applied":["two.shop"]}`,
		"not an instance":             `{"generation":3,"applied":["node.one"]}`,
		"an overlong module":          `{"generation":3,"applied":["one.` + strings.Repeat("m", 33) + `"]}`,
		"a failure of another node's": `{"generation":3,"failed":{"two.shop":"x"}}`,
		"an overlong reason":          `{"generation":3,"failed":{"one.shop":"` + strings.Repeat("x", MaxReasonLen+1) + `"}}`,
		"a payload above the bound":   `{"generation":3,"x":"` + strings.Repeat("x", MaxReportSize) + `"}`,
	} {
		if _, err := JudgeReport("one", []byte(payload), 3); !errors.Is(err, ErrNotReport) {
			t.Errorf("%s: %v, want ErrNotReport", name, err)
		}
	}
	if _, err := JudgeReport("one", []byte(`{"generation":1}`), 0); !errors.Is(err, ErrNotReport) {
		t.Errorf("a report from a node never declared to: %v, want ErrNotReport", err)
	}
}

func TestAHeartbeatIsBoundedNotJudgedByItsGeneration(t *testing.T) {
	if hb, err := JudgeHeartbeat([]byte(`{"generation":18446744073709551615}`)); err != nil || hb.Generation != math.MaxUint64 {
		t.Errorf("a heartbeat of any generation: %+v, %v", hb, err)
	}
	for name, payload := range map[string]string{
		"garbage":   `not json`,
		"oversized": `{"generation":1,"x":"` + strings.Repeat("x", MaxHeartbeatSize) + `"}`,
	} {
		if _, err := JudgeHeartbeat([]byte(payload)); !errors.Is(err, ErrNotHeartbeat) {
			t.Errorf("%s: %v, want ErrNotHeartbeat", name, err)
		}
	}
}

func load(t testing.TB, description string) *model.Mesh {
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
	key := make([]byte, wire.KeySize)
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
	// Not well formed: let go unanswered, whatever the node.
	for name, payload := range map[string]string{
		"a short key":                `{"reply":"_INBOX.enrol.one.abc","key":"AAAA"}`,
		"no key":                     `{"reply":"_INBOX.enrol.one.abc"}`,
		"a key that is not base64":   `{"reply":"_INBOX.enrol.one.abc","key":"!!"}`,
		"an overlong answer address": `{"reply":"_INBOX.enrol.one.` + strings.Repeat("a", wire.MaxEnrolReplyLen) + `","key":"` + b64(key) + `"}`,
		"an empty token":             `{"reply":"_INBOX.enrol.one.a..b","key":"` + b64(key) + `"}`,
		"a trailing dot":             `{"reply":"_INBOX.enrol.one.a.","key":"` + b64(key) + `"}`,
		"a wildcard token":           `{"reply":"_INBOX.enrol.one.*","key":"` + b64(key) + `"}`,
		"a wildcard inside a token":  `{"reply":"_INBOX.enrol.one.a>b","key":"` + b64(key) + `"}`,
		"a space":                    `{"reply":"_INBOX.enrol.one.a b","key":"` + b64(key) + `"}`,
		"a control byte":             `{"reply":"_INBOX.enrol.one.a\u001bb","key":"` + b64(key) + `"}`,
		"a tab":                      `{"reply":"_INBOX.enrol.one.a\tb","key":"` + b64(key) + `"}`,
		"a non-ASCII byte":           `{"reply":"_INBOX.enrol.one.a\u00e9","key":"` + b64(key) + `"}`,
		"a payload above the bound":  `{"reply":"_INBOX.enrol.one.abc","key":"` + b64(key) + `","x":"` + strings.Repeat("x", wire.MaxEnrolRequestSize) + `"}`,
	} {
		if _, err := JudgeEnrolment(m, "mesh.control.one.enrol", []byte(payload)); !errors.Is(err, wire.ErrNotEnrolment) {
			t.Errorf("%s: %v, want ErrNotEnrolment", name, err)
		}
	}
	if _, err := JudgeEnrolment(m, "mesh.control.three.enrol", []byte(`{"reply":"_INBOX.enrol.three.abc"}`)); !errors.Is(err, wire.ErrNotEnrolment) {
		t.Errorf("a request without a key from a node not in the description: %v, want ErrNotEnrolment", err)
	}
	// The longest address within the bound is an address.
	longest := "_INBOX.enrol.one." + strings.Repeat("a", wire.MaxEnrolReplyLen-len("_INBOX.enrol.one."))
	if ask, err := JudgeEnrolment(m, "mesh.control.one.enrol", []byte(`{"reply":"`+longest+`","key":"`+b64(key)+`"}`)); err != nil || ask.Reply != longest {
		t.Errorf("an address of %d bytes: %+v, %v", len(longest), ask, err)
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
		!slices.Equal(p.Consumers, []wire.Consumer{{Stream: "EVENTS", Name: "two_postman"}, {Stream: "SEAT_MAILER", Name: "SEAT_MAILER_worker"}}) {
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

// What declaring a node anew changes: a credential whose sealed copy still matches the store's
// hash is kept, every other one minted; a principal no longer on the node departs; and the node
// hears a new generation only when one of those, or what it runs, changed.
func TestWhatADeclarationChanges(t *testing.T) {
	d := wire.Declaration{Node: "one", Instances: []wire.Instance{{User: "one.a"}, {User: "one.b"}, {User: "one.c"}}}
	digest := d.Digest()
	sealed := func(hashes map[string]string) map[string]state.DeclaredCredential {
		creds := map[string]state.DeclaredCredential{}
		for u, h := range hashes {
			creds[u] = state.DeclaredCredential{Hash: h, Sealed: []byte("sealed for " + u)}
		}
		return creds
	}
	current := map[string]string{"one.a": "h1", "one.b": "h2", "one.c": "h3"}
	for name, tc := range map[string]struct {
		last                    state.Declared
		hashes                  map[string]string
		want                    DeclarationChange
		changed, mintsOrRevokes bool
	}{
		"the first declaration mints every credential": {
			last:    state.Declared{},
			hashes:  map[string]string{},
			want:    DeclarationChange{Mint: []string{"one.a", "one.b", "one.c"}, Digest: digest, DigestChanged: true},
			changed: true, mintsOrRevokes: true,
		},
		"a converged node keeps every credential and hears nothing": {
			last:   state.Declared{Generation: 4, Digest: digest, Credentials: sealed(current)},
			hashes: current,
			want:   DeclarationChange{Keep: []string{"one.a", "one.b", "one.c"}, Digest: digest},
		},
		"only a new or reminted credential is minted": {
			last:    state.Declared{Generation: 4, Digest: digest, Credentials: sealed(map[string]string{"one.a": "h1", "one.b": "h2"})},
			hashes:  map[string]string{"one.a": "h1", "one.b": "minted again elsewhere"},
			want:    DeclarationChange{Keep: []string{"one.a"}, Mint: []string{"one.b", "one.c"}, Digest: digest},
			changed: true, mintsOrRevokes: true,
		},
		"a credential revoked in the store is minted": {
			last:    state.Declared{Generation: 4, Digest: digest, Credentials: sealed(current)},
			hashes:  map[string]string{"one.a": "h1", "one.c": "h3"},
			want:    DeclarationChange{Keep: []string{"one.a", "one.c"}, Mint: []string{"one.b"}, Digest: digest},
			changed: true, mintsOrRevokes: true,
		},
		"a copy kept without its hash is minted, though the store has none either": {
			last:    state.Declared{Generation: 4, Digest: digest, Credentials: sealed(map[string]string{"one.a": "", "one.b": "h2", "one.c": "h3"})},
			hashes:  map[string]string{"one.b": "h2", "one.c": "h3"},
			want:    DeclarationChange{Keep: []string{"one.b", "one.c"}, Mint: []string{"one.a"}, Digest: digest},
			changed: true, mintsOrRevokes: true,
		},
		"instances that left the node depart, in order": {
			last: state.Declared{Generation: 4, Digest: "what it ran before",
				Credentials: sealed(map[string]string{"one.a": "h1", "one.b": "h2", "one.c": "h3", "one.old": "h4", "one.gone": "h5"})},
			hashes: map[string]string{"one.a": "h1", "one.b": "h2", "one.c": "h3", "one.old": "h4", "one.gone": "h5"},
			want: DeclarationChange{Keep: []string{"one.a", "one.b", "one.c"}, Departed: []string{"one.gone", "one.old"},
				Digest: digest, DigestChanged: true},
			changed: true, mintsOrRevokes: true,
		},
		"what the node runs changed, its credentials not": {
			last:    state.Declared{Generation: 4, Digest: "what it ran before", Credentials: sealed(current)},
			hashes:  current,
			want:    DeclarationChange{Keep: []string{"one.a", "one.b", "one.c"}, Digest: digest, DigestChanged: true},
			changed: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := ChangeOf(tc.last, tc.hashes, d)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ChangeOf (-want +got):\n%s", diff)
			}
			if got.Changed() != tc.changed || got.ChangesCredentials() != tc.mintsOrRevokes {
				t.Errorf("Changed() = %v, ChangesCredentials() = %v; want %v, %v", got.Changed(), got.ChangesCredentials(), tc.changed, tc.mintsOrRevokes)
			}
		})
	}
}

// An instance whose credential was issued by hand is neither kept nor minted: it is declared
// without a membership, never revoked, and the node hears of it only when that changes.
func TestADeclarationLeavesACredentialIssuedByHandAlone(t *testing.T) {
	plain := wire.Declaration{Node: "one", Instances: []wire.Instance{{User: "one.a"}, {User: "one.b"}}}
	d := wire.Declaration{Node: "one", Instances: []wire.Instance{{User: "one.a"}, {User: "one.b", ByHand: true}}}
	if d.Digest() == plain.Digest() {
		t.Fatal("an instance going from the agent to an operator's hand leaves the digest as it was: the node would not hear of it")
	}
	agents := map[string]state.DeclaredCredential{"one.a": {Hash: "h1", Sealed: []byte("sealed")}}
	for name, tc := range map[string]struct {
		last           state.Declared
		hashes         map[string]string
		want           DeclarationChange
		changed, mints bool
	}{
		"enrolling mints only what the agent is to hold": {
			last:    state.Declared{},
			hashes:  map[string]string{"one.b": "by hand"},
			want:    DeclarationChange{Mint: []string{"one.a"}, ByHand: []string{"one.b"}, Digest: d.Digest(), DigestChanged: true},
			changed: true, mints: true,
		},
		"rotated by hand, it is no change to the node": {
			last:   state.Declared{Generation: 2, Digest: d.Digest(), Credentials: agents},
			hashes: map[string]string{"one.a": "h1", "one.b": "rotated by hand"},
			want:   DeclarationChange{Keep: []string{"one.a"}, ByHand: []string{"one.b"}, Digest: d.Digest()},
		},
		"one the agent held, issued by hand since, is neither minted nor departed": {
			last: state.Declared{Generation: 2, Digest: plain.Digest(),
				Credentials: map[string]state.DeclaredCredential{"one.a": {Hash: "h1"}, "one.b": {Hash: "h2"}}},
			hashes:  map[string]string{"one.a": "h1", "one.b": "by hand"},
			want:    DeclarationChange{Keep: []string{"one.a"}, ByHand: []string{"one.b"}, Digest: d.Digest(), DigestChanged: true},
			changed: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := ChangeOf(tc.last, tc.hashes, d)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ChangeOf (-want +got):\n%s", diff)
			}
			if got.Changed() != tc.changed || got.ChangesCredentials() != tc.mints {
				t.Errorf("Changed() = %v, ChangesCredentials() = %v; want %v, %v", got.Changed(), got.ChangesCredentials(), tc.changed, tc.mints)
			}
		})
	}
}
