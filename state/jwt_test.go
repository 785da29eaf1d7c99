package state

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// The store's record of jwt users follows what pushes proved: a new key replaces the old and
// keeps it to revoke, a pending JWT is in force only once settled, a revoked key stays to
// revoke until settled, and a store reopened (a crash) keeps each of those states.
func TestJWTUsersFollowWhatWasProven(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir() + "/state"
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1800000000, 0)
	if err := s.IssueJWTUser(ctx, JWTUser{Principal: "one.shop", UserKey: "UKEY1", JWT: "jwt1", IssuedAt: at, Operation: "issue"}); err != nil {
		t.Fatal(err)
	}
	if err := s.IssueJWTUser(ctx, JWTUser{Principal: "one.shop", UserKey: "UKEY2", JWT: "jwt2", IssuedAt: at, Operation: OpDeclare}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetJWTPending(ctx, "one.shop", "jwt3"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetJWTPending(ctx, "nobody", "jwt"); err == nil {
		t.Error("a pending JWT recorded for a principal without a user")
	}
	// A crash here: the reopened store still holds the pending JWT, not in force.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir)
	users, err := s.JWTUsers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	u := users["one.shop"]
	if u.UserKey != "UKEY2" || u.JWT != "jwt2" || u.Pending != "jwt3" || u.ByHand() {
		t.Errorf("user %+v; want UKEY2 with jwt2 in force, jwt3 pending, not by hand", u)
	}
	revoked, err := s.JWTRevokedKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(revoked) != 1 || revoked[0].UserKey != "UKEY1" || revoked[0].Principal != "one.shop" {
		t.Errorf("keys to revoke %+v; want the replaced UKEY1", revoked)
	}

	if err := s.SettleJWT(ctx, []string{"one.shop"}, nil, []string{"UKEY1"}); err != nil {
		t.Fatal(err)
	}
	users, _ = s.JWTUsers(ctx)
	if u := users["one.shop"]; u.JWT != "jwt3" || u.Pending != "" {
		t.Errorf("after settling, %+v; want jwt3 in force, none pending", u)
	}
	if revoked, _ := s.JWTRevokedKeys(ctx); len(revoked) != 0 {
		t.Errorf("keys to revoke after a proven push: %+v", revoked)
	}

	if err := s.SetJWTPending(ctx, "one.shop", "jwt4"); err != nil {
		t.Fatal(err)
	}
	if err := s.SettleJWT(ctx, nil, []string{"one.shop"}, nil); err != nil {
		t.Fatal(err)
	}
	users, _ = s.JWTUsers(ctx)
	if u := users["one.shop"]; u.JWT != "jwt3" || u.Pending != "" {
		t.Errorf("after dropping, %+v; want jwt3 still in force", u)
	}

	had, err := s.RevokeJWTUsers(ctx, []string{"one.shop", "two.shop"}, 1800000100)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(had, []string{"one.shop"}) {
		t.Errorf("revoked %v; want one.shop alone", had)
	}
	users, _ = s.JWTUsers(ctx)
	revoked, _ = s.JWTRevokedKeys(ctx)
	if len(users) != 0 || len(revoked) != 1 || revoked[0].UserKey != "UKEY2" || revoked[0].At != 1800000100 {
		t.Errorf("after revoking: users %+v, to revoke %+v; want none, and UKEY2 at 1800000100", users, revoked)
	}
}

// In a jwt mesh enrolment spends the enrolment identity's user: the node's user the caller
// minted is recorded, the enrolment key is kept to revoke, and the same enrolment again is
// refused, as is one whose identity was never issued.
func TestJWTEnrolmentSpendsTheEnrolmentUser(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	e := NodeEnrolment{Node: "one", EnrolPrincipal: "enrol.one", NodePrincipal: "node.one", PublicKey: []byte("key"),
		JWT: &JWTUser{UserKey: "UNODE", JWT: "nodejwt", IssuedAt: time.Now()}}
	if _, err := s.EnrolNode(ctx, e, 0); !errors.Is(err, ErrNoEnrolmentCredential) {
		t.Fatalf("enrolling with no enrolment user: %v, want ErrNoEnrolmentCredential", err)
	}
	if err := s.IssueJWTUser(ctx, JWTUser{Principal: "enrol.one", UserKey: "UENROL", JWT: "enroljwt", IssuedAt: time.Now(), Operation: "credentials issue"}); err != nil {
		t.Fatal(err)
	}
	if secret, err := s.EnrolNode(ctx, e, 0); err != nil || secret != "" {
		t.Fatalf("enrolling: %q, %v; want no secret and no error", secret, err)
	}
	users, err := s.JWTUsers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if u, ok := users["node.one"]; !ok || u.UserKey != "UNODE" || u.JWT != "nodejwt" || u.ByHand() {
		t.Errorf("the node's user is %+v; want UNODE, recorded as the controller's", u)
	}
	if _, ok := users["enrol.one"]; ok {
		t.Error("the enrolment identity keeps its user after enrolling")
	}
	revoked, err := s.JWTRevokedKeys(ctx)
	if err != nil || !slices.ContainsFunc(revoked, func(r JWTRevoked) bool { return r.UserKey == "UENROL" }) {
		t.Errorf("the enrolment key is not kept to revoke: %v, %v", revoked, err)
	}
	if enrolled, err := s.Enrolments(ctx); err != nil || len(enrolled) != 1 || enrolled[0].Node != "one" {
		t.Errorf("enrolments: %v, %v", enrolled, err)
	}
	if _, err := s.EnrolNode(ctx, e, 0); !errors.Is(err, ErrNoEnrolmentCredential) {
		t.Errorf("enrolling again with the spent identity: %v, want ErrNoEnrolmentCredential", err)
	}
}
