package state

import (
	"context"
	"errors"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// An enrolment credential enrols once: the second use finds it gone, whatever the key.
func TestAnEnrolmentCredentialEnrolsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.Mint(ctx, []string{"enrol.one"}, bcrypt.MinCost, "issue"); err != nil {
		t.Fatal(err)
	}
	e := NodeEnrolment{Node: "one", EnrolPrincipal: "enrol.one", NodePrincipal: "node.one", PublicKey: []byte("key-1")}
	pw, err := s.EnrolNode(ctx, e, bcrypt.MinCost)
	if err != nil || pw == "" {
		t.Fatalf("EnrolNode = %q, %v", pw, err)
	}
	hashes, _ := s.Hashes(ctx)
	if _, has := hashes["enrol.one"]; has {
		t.Error("the enrolment credential is still stored after it was used")
	}
	if bcrypt.CompareHashAndPassword([]byte(hashes["node.one"]), []byte(pw)) != nil {
		t.Error("the node's stored hash does not accept the password handed out")
	}
	e.PublicKey = []byte("key-2")
	if _, err := s.EnrolNode(ctx, e, bcrypt.MinCost); !errors.Is(err, ErrNoEnrolmentCredential) {
		t.Fatalf("a second enrolment with the same credential: %v, want ErrNoEnrolmentCredential", err)
	}
	got, err := s.Enrolments(ctx)
	if err != nil || len(got) != 1 || string(got[0].PublicKey) != "key-1" {
		t.Fatalf("Enrolments = %+v, %v; want node one with the first key", got, err)
	}
}

// A declaration and a report read back as recorded; enrolling again forgets what was sealed to
// the old key but keeps the generation counting.
func TestDeclarationsAndReportsReadBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.Mint(ctx, []string{"enrol.one"}, bcrypt.MinCost, "issue"); err != nil {
		t.Fatal(err)
	}
	e := NodeEnrolment{Node: "one", EnrolPrincipal: "enrol.one", NodePrincipal: "node.one", PublicKey: []byte("k")}
	if _, err := s.EnrolNode(ctx, e, bcrypt.MinCost); err != nil {
		t.Fatal(err)
	}
	d := Declared{Generation: 3, Digest: "abc", DeclaredAt: time.Now(),
		Credentials: map[string]DeclaredCredential{"one.shop": {Hash: "h", Sealed: []byte("sealed")}}}
	if err := s.RecordDeclaration(ctx, "one", d); err != nil {
		t.Fatal(err)
	}
	got, err := s.Declared(ctx, "one")
	if err != nil || got.Generation != 3 || got.Digest != "abc" || string(got.Credentials["one.shop"].Sealed) != "sealed" {
		t.Fatalf("Declared = %+v, %v", got, err)
	}
	if _, err := s.Mint(ctx, []string{"enrol.one"}, bcrypt.MinCost, "issue"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnrolNode(ctx, e, bcrypt.MinCost); err != nil {
		t.Fatal(err)
	}
	got, err = s.Declared(ctx, "one")
	if err != nil || got.Generation != 3 || got.Digest != "" || len(got.Credentials) != 0 {
		t.Fatalf("after enrolling again, Declared = %+v, %v; want generation 3, no digest, no credentials", got, err)
	}
	r := Report{Node: "one", Generation: 3, Applied: []string{"one.shop"}, Failed: map[string]string{"one.x": "no key"}, ReportedAt: time.Now()}
	if err := s.RecordReport(ctx, r); err != nil {
		t.Fatal(err)
	}
	reports, err := s.Reports(ctx)
	if err != nil || len(reports) != 1 || reports[0].Generation != 3 || reports[0].Failed["one.x"] != "no key" {
		t.Fatalf("Reports = %+v, %v", reports, err)
	}
}
