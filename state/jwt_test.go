package state

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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

// jwtView is what a store answers of its jwt users, for comparing two stores.
type jwtView struct {
	Users   map[string]JWTUser
	Revoked []JWTRevoked
}

func jwtViewOf(t *testing.T, s *Store) jwtView {
	t.Helper()
	ctx := context.Background()
	users, err := s.JWTUsers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	revoked, err := s.JWTRevokedKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return jwtView{Users: users, Revoked: revoked}
}

// issueJWT records a fresh key for principal, failing t on an error.
func issueJWT(t *testing.T, s *Store, principal, key string) {
	t.Helper()
	u := JWTUser{Principal: principal, UserKey: key, JWT: "jwt-" + key, IssuedAt: time.Unix(1800000000, 0).UTC(), Operation: "issue"}
	if err := s.IssueJWTUser(context.Background(), u); err != nil {
		t.Fatal(err)
	}
}

// The jwt users and the keys to revoke are records of the store's copy: every change of them
// reaches the replica, and a store restored from the replica holds the same users and keys to
// revoke, so that it neither loses a key it must revoke nor takes back a user it dropped.
func TestJWTUsersReachTheReplicaAndRestore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	r := newMemReplica()
	s.SetReplica(r)
	if err := r.Write(ctx, snapshotOf(t, s)); err != nil {
		t.Fatal(err)
	}
	same := func(when string) {
		t.Helper()
		if diff := cmp.Diff(snapshotOf(t, s), r.records()); diff != "" {
			t.Errorf("%s, the replica is not the store (-store +replica):\n%s", when, diff)
		}
		if diff := cmp.Diff(jwtViewOf(t, s), jwtViewOf(t, restored(t, r.records()))); diff != "" {
			t.Errorf("%s, the store restored from the replica differs (-store +restored):\n%s", when, diff)
		}
	}
	issueJWT(t, s, "one.shop", "UKEY1")
	issueJWT(t, s, "two.shop", "UKEY2")
	issueJWT(t, s, "three.shop", "UKEY3")
	same("after issuing")
	// A reissue for the same key, pending and then proven; a fresh key for another, its old
	// one kept to revoke; a principal removed.
	if err := s.SetJWTPending(ctx, "one.shop", "jwt-UKEY1-b"); err != nil {
		t.Fatal(err)
	}
	same("with a JWT pending")
	if err := s.SettleJWT(ctx, []string{"one.shop"}, nil, nil); err != nil {
		t.Fatal(err)
	}
	issueJWT(t, s, "two.shop", "UKEY2b")
	if _, err := s.RevokeJWTUsers(ctx, []string{"three.shop"}, 1800000100); err != nil {
		t.Fatal(err)
	}
	same("after a reissue, a fresh key and a revocation")
	if v := jwtViewOf(t, s); len(v.Revoked) != 2 {
		t.Fatalf("keys to revoke %+v; want UKEY2 and UKEY3", v.Revoked)
	}
	// The revocations proven: restored, the store has nothing left to revoke.
	if err := s.SettleJWT(ctx, nil, nil, []string{"UKEY2", "UKEY3"}); err != nil {
		t.Fatal(err)
	}
	same("after the revocations were proven")
	if v := jwtViewOf(t, restored(t, r.records())); len(v.Revoked) != 0 || len(v.Users) != 2 {
		t.Errorf("restored: %+v; want one.shop and two.shop, nothing to revoke", v)
	}
	// A change that settles nothing sends nothing.
	r.takeWrites()
	if err := s.SettleJWT(ctx, []string{"one.shop"}, []string{"two.shop"}, nil); err != nil {
		t.Fatal(err)
	}
	if w := r.takeWrites(); len(w) != 0 {
		t.Errorf("a settle that changed nothing wrote %v", w)
	}
}

// A replica that missed the deletion of a user, and then the proof of its key's revocation, is
// made equal by the next change: restored from it, the store neither takes the dropped user
// back (whose key a later reissue would bring back to life) nor revokes the key once more.
func TestJWTDeletionsMissedByTheReplicaAreCaughtUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	r := newMemReplica()
	s.SetReplica(r)
	issueJWT(t, s, "one.shop", "UKEY1")
	issueJWT(t, s, "two.shop", "UKEY2")
	if err := r.Write(ctx, snapshotOf(t, s)); err != nil {
		t.Fatal(err)
	}
	// Taken half: the key to revoke and not the user's deletion.
	r.fail = true
	if _, err := s.RevokeJWTUsers(ctx, []string{"two.shop"}, 1800000100); !errors.Is(err, ErrReplicaBehind) {
		t.Fatalf("RevokeJWTUsers with the replica failing: %v, want ErrReplicaBehind", err)
	}
	if !slices.ContainsFunc(r.records(), func(x Record) bool { return strings.HasPrefix(x.Key, "jwt-user.two.shop") }) {
		t.Fatal("the replica did not keep the dropped user")
	}
	// Proven while behind, failing too.
	r.fail = true
	if err := s.SettleJWT(ctx, nil, nil, []string{"UKEY2"}); !errors.Is(err, ErrReplicaBehind) {
		t.Fatalf("SettleJWT with the replica failing: %v, want ErrReplicaBehind", err)
	}
	// The next change sends the whole store, deleting what the replica kept of the past.
	issueJWT(t, s, "three.shop", "UKEY3")
	if diff := cmp.Diff(snapshotOf(t, s), r.records()); diff != "" {
		t.Errorf("replica after catching up (-store +replica):\n%s", diff)
	}
	v := jwtViewOf(t, restored(t, r.records()))
	if _, ok := v.Users["two.shop"]; ok || len(v.Revoked) != 0 {
		t.Errorf("restored after catching up: %+v; want no two.shop and nothing to revoke", v)
	}
}

// A standby's store refreshed from the copy on the bus holds the primary's jwt users and keys
// to revoke, those it held before replaced.
func TestRefreshTakesTheJWTUsers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary := newStore(t)
	issueJWT(t, primary, "one.shop", "UKEY1")
	issueJWT(t, primary, "two.shop", "UKEY2")
	standby := restored(t, snapshotOf(t, primary))
	issueJWT(t, primary, "one.shop", "UKEY1b")
	if _, err := primary.RevokeJWTUsers(ctx, []string{"two.shop"}, 1800000100); err != nil {
		t.Fatal(err)
	}
	changed, err := standby.Refresh(ctx, snapshotOf(t, primary))
	if err != nil || !changed {
		t.Fatalf("Refresh = %v, %v; want true, nil", changed, err)
	}
	if diff := cmp.Diff(jwtViewOf(t, primary), jwtViewOf(t, standby)); diff != "" {
		t.Errorf("the standby's jwt users (-primary +standby):\n%s", diff)
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
