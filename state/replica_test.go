package state

import (
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/bcrypt"
)

// memReplica is a Replica in memory: the content a KV bucket would hold, and every Write.
type memReplica struct {
	mu      sync.Mutex
	content map[string][]byte
	writes  [][]Record
	// fail, when set, makes the next Write take the first half of its records and then fail,
	// as a replica that lost its connection midway.
	fail bool
}

func newMemReplica() *memReplica { return &memReplica{content: map[string][]byte{}} }

func (m *memReplica) Write(_ context.Context, records []Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	taken := records
	if m.fail {
		taken = records[:len(records)/2]
	}
	for _, r := range taken {
		if r.Value == nil {
			delete(m.content, r.Key)
		} else {
			m.content[r.Key] = r.Value
		}
	}
	if m.fail {
		m.fail = false
		return errors.New("nats: timeout")
	}
	m.writes = append(m.writes, records)
	return nil
}

// records is the replica's whole content, as a Restore is given it.
func (m *memReplica) records() []Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Record
	for k, v := range m.content {
		out = append(out, Record{Key: k, Value: v})
	}
	sortRecords(out)
	return out
}

// takeWrites returns the writes since the last call.
func (m *memReplica) takeWrites() [][]Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := m.writes
	m.writes = nil
	return w
}

// Fixtures shared by the tests below.
var (
	testKey      = []byte("node-public-key-32-bytes-long!!!")
	testDeclared = Declared{Generation: 3, Digest: "d1", DeclaredAt: time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC),
		Credentials: map[string]DeclaredCredential{"one.shop": {Hash: "$2a$04$x", Sealed: []byte{1, 2, 3}}}}
	testInventory = Inventory{
		Nodes:     []string{"one"},
		Instances: []Instance{{Node: "one", Module: "shop"}},
		Seats:     []string{"shop.primary"},
		Holders:   []Holder{{Seat: "shop.primary", Node: "one", Module: "shop"}},
	}
)

func enrolOne(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.Mint(ctx, []string{"_enrol.one"}, bcrypt.MinCost, "issue"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnrolNode(ctx, NodeEnrolment{Node: "one", EnrolPrincipal: "_enrol.one", NodePrincipal: "node.one", PublicKey: testKey}, bcrypt.MinCost); err != nil {
		t.Fatal(err)
	}
}

// populate gives s a row of every kind.
func populate(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.ControllerPassword(ctx, bcrypt.MinCost); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SystemPassword(ctx, bcrypt.MinCost); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Mint(ctx, []string{"one.shop", "two.shop"}, bcrypt.MinCost, "issue"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Revoke(ctx, "two.shop"); err != nil {
		t.Fatal(err)
	}
	enrolOne(t, s)
	if err := s.RecordDeclaration(ctx, "one", testDeclared); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordReport(ctx, Report{Node: "one", Generation: 3, Applied: []string{"one.shop"},
		Failed: map[string]string{"x": "why"}, ReportedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	id, err := s.RecordApply(ctx, ApplyRecord{Started: time.Now(), Finished: time.Now(), User: "ops", Summary: "1 created", Outcome: "applied"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SaveInventory(ctx, testInventory, id); err != nil {
		t.Fatal(err)
	}
}

// storeView is everything a store answers, for comparing two stores.
type storeView struct {
	ID            string
	Hashes        map[string]string
	Known         map[string]bool
	Credentials   []Credential
	Enrolments    []Enrolment
	Declared      Declared
	Generations   map[string]uint64
	Reports       []Report
	History       []ApplyRecord
	Inventory     Inventory
	HolderChanges []HolderChange
}

func viewOf(t *testing.T, s *Store) storeView {
	t.Helper()
	ctx := context.Background()
	var v storeView
	var errs []error
	var err error
	v.ID, err = s.ID(ctx)
	errs = append(errs, err)
	v.Hashes, err = s.Hashes(ctx)
	errs = append(errs, err)
	v.Known, err = s.Known(ctx)
	errs = append(errs, err)
	v.Credentials, err = s.Credentials(ctx)
	errs = append(errs, err)
	v.Enrolments, err = s.Enrolments(ctx)
	errs = append(errs, err)
	v.Declared, err = s.Declared(ctx, "one")
	errs = append(errs, err)
	v.Generations, err = s.Generations(ctx)
	errs = append(errs, err)
	v.Reports, err = s.Reports(ctx)
	errs = append(errs, err)
	v.History, err = s.History(ctx, 0)
	errs = append(errs, err)
	v.Inventory, err = s.Inventory(ctx)
	errs = append(errs, err)
	v.HolderChanges, err = s.HolderChanges(ctx, 0)
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return v
}

func snapshotOf(t *testing.T, s *Store) []Record {
	t.Helper()
	records, err := s.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return records
}

// restored restores records into a fresh directory.
func restored(t *testing.T, records []Record) *Store {
	t.Helper()
	s, err := Restore(context.Background(), filepath.Join(t.TempDir(), "restored"), records)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// written is one Write as key → whether it holds the row (false: a deletion).
func written(records []Record) map[string]bool {
	out := map[string]bool{}
	for _, r := range records {
		out[r.Key] = r.Value != nil
	}
	return out
}

func TestEveryChangeReachesTheReplica(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	enrolled := func(t *testing.T, s *Store) { enrolOne(t, s) }
	tests := []struct {
		name   string
		before func(*testing.T, *Store)
		change func(*Store) error
		want   []map[string]bool // one map per Write
	}{
		{"mint", nil, func(s *Store) error {
			_, err := s.Mint(ctx, []string{"a.shop", "b.shop"}, bcrypt.MinCost, "issue")
			return err
		}, []map[string]bool{{"credential.a.shop": true, "credential.b.shop": true}}},
		{"mint a revoked principal", func(t *testing.T, s *Store) {
			if _, err := s.Revoke(ctx, "a.shop"); err != nil {
				t.Fatal(err)
			}
		}, func(s *Store) error {
			_, err := s.Mint(ctx, []string{"a.shop"}, bcrypt.MinCost, "issue")
			return err
		}, []map[string]bool{{"credential.a.shop": true, "revocation.a.shop": false}}},
		{"revoke", func(t *testing.T, s *Store) {
			if _, err := s.Mint(ctx, []string{"a.shop"}, bcrypt.MinCost, "issue"); err != nil {
				t.Fatal(err)
			}
		}, func(s *Store) error {
			_, err := s.Revoke(ctx, "a.shop")
			return err
		}, []map[string]bool{{"credential.a.shop": false, "revocation.a.shop": true}}},
		{"revoke a credential never held", nil, func(s *Store) error {
			_, err := s.Revoke(ctx, "a.shop")
			return err
		}, []map[string]bool{{"revocation.a.shop": true}}},
		{"enrol", func(t *testing.T, s *Store) {
			if _, err := s.Mint(ctx, []string{"_enrol.one"}, bcrypt.MinCost, "issue"); err != nil {
				t.Fatal(err)
			}
		}, func(s *Store) error {
			_, err := s.EnrolNode(ctx, NodeEnrolment{Node: "one", EnrolPrincipal: "_enrol.one", NodePrincipal: "node.one", PublicKey: testKey}, bcrypt.MinCost)
			return err
		}, []map[string]bool{{"credential._enrol.one": false, "revocation._enrol.one": true, "credential.node.one": true, "enrolment.one": true}}},
		{"enrol again, declared", func(t *testing.T, s *Store) {
			enrolOne(t, s)
			if err := s.RecordDeclaration(ctx, "one", testDeclared); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Mint(ctx, []string{"_enrol.one"}, bcrypt.MinCost, "issue"); err != nil {
				t.Fatal(err)
			}
		}, func(s *Store) error {
			_, err := s.EnrolNode(ctx, NodeEnrolment{Node: "one", EnrolPrincipal: "_enrol.one", NodePrincipal: "node.one", PublicKey: testKey}, bcrypt.MinCost)
			return err
		}, []map[string]bool{{"credential._enrol.one": false, "revocation._enrol.one": true, "credential.node.one": true,
			"enrolment.one": true, "declaration.one": true}}},
		{"declaration", enrolled, func(s *Store) error {
			return s.RecordDeclaration(ctx, "one", testDeclared)
		}, []map[string]bool{{"declaration.one": true}}},
		{"report", nil, func(s *Store) error {
			return s.RecordReport(ctx, Report{Node: "one", Generation: 1, ReportedAt: time.Now()})
		}, []map[string]bool{{"report.one": true}}},
		{"apply", nil, func(s *Store) error {
			_, err := s.RecordApply(ctx, ApplyRecord{Outcome: "applied"})
			return err
		}, []map[string]bool{{"apply.0000000000000000001": true}}},
		{"inventory", nil, func(s *Store) error {
			return s.SaveInventory(ctx, testInventory, 0)
		}, []map[string]bool{{"inventory": true, "holder.0000000000000000001": true}}},
		{"inventory unchanged", func(t *testing.T, s *Store) {
			if err := s.SaveInventory(ctx, testInventory, 0); err != nil {
				t.Fatal(err)
			}
		}, func(s *Store) error {
			return s.SaveInventory(ctx, testInventory, 0)
		}, nil},
		{"controller password", nil, func(s *Store) error {
			_, err := s.ControllerPassword(ctx, bcrypt.MinCost)
			return err
		}, []map[string]bool{{"credential.controller": true}}},
		{"controller password converged", func(t *testing.T, s *Store) {
			if _, err := s.ControllerPassword(ctx, bcrypt.MinCost); err != nil {
				t.Fatal(err)
			}
		}, func(s *Store) error {
			_, err := s.ControllerPassword(ctx, bcrypt.MinCost)
			return err
		}, nil},
		{"system password", func(t *testing.T, s *Store) {
			if _, err := s.ControllerPassword(ctx, bcrypt.MinCost); err != nil {
				t.Fatal(err)
			}
		}, func(s *Store) error {
			_, err := s.SystemPassword(ctx, bcrypt.MinCost)
			return err
		}, []map[string]bool{{"credential._meshctl.system": true}}},
		{"refusal", nil, func(s *Store) error {
			return s.RecordRefusal(ctx, Refusal{User: "a", Op: "pub", Subject: "x", Count: 1, FirstAt: time.Now(), LastAt: time.Now()})
		}, nil},
		{"reads", func(t *testing.T, s *Store) { populate(t, s) }, func(s *Store) error {
			viewOf(t, s)
			_, err := s.Snapshot(ctx)
			return err
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			r := newMemReplica()
			s.SetReplica(r)
			if tt.before != nil {
				tt.before(t, s)
			}
			r.takeWrites()
			if err := tt.change(s); err != nil {
				t.Fatal(err)
			}
			writes := r.takeWrites()
			var got []map[string]bool
			for _, w := range writes {
				got = append(got, written(w))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("records written (-want +got):\n%s", diff)
			}
			// What was written is what was committed.
			now := map[string][]byte{}
			for _, rec := range snapshotOf(t, s) {
				now[rec.Key] = rec.Value
			}
			for _, w := range writes {
				if !slices.IsSortedFunc(w, func(a, b Record) int { return strings.Compare(a.Key, b.Key) }) {
					t.Errorf("a write is not sorted by key: %v", w)
				}
				for _, rec := range w {
					if string(rec.Value) != string(now[rec.Key]) {
						t.Errorf("%s written as %s, stored as %s", rec.Key, rec.Value, now[rec.Key])
					}
				}
			}
		})
	}
}

func TestSnapshotRestoresTheSameStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	orig := newStore(t)
	populate(t, orig)
	records := snapshotOf(t, orig)
	validKey := regexp.MustCompile(`^[-/_=a-zA-Z0-9]+(\.[-/_=a-zA-Z0-9]+)*$`)
	for _, r := range records {
		if !validKey.MatchString(r.Key) {
			t.Errorf("key %q is not a JetStream KV key", r.Key)
		}
		if strings.Contains(string(r.Value), "password") {
			t.Errorf("record %s mentions a password: %s", r.Key, r.Value)
		}
	}
	s := restored(t, records)
	if diff := cmp.Diff(viewOf(t, orig), viewOf(t, s)); diff != "" {
		t.Errorf("restored store (-original +restored):\n%s", diff)
	}
	if diff := cmp.Diff(records, snapshotOf(t, s)); diff != "" {
		t.Errorf("restored snapshot (-original +restored):\n%s", diff)
	}
	// Ids go on above the restored ones: holder changes must not point at a reused apply.
	id, err := s.RecordApply(ctx, ApplyRecord{Outcome: "applied"})
	if err != nil {
		t.Fatal(err)
	}
	if id != 2 {
		t.Errorf("the first apply after a restore has id %d, want 2", id)
	}
	// No password file is restored: the operator brings the controller's.
	if _, err := s.StoredControllerPassword(ctx); !errors.Is(err, ErrControllerMismatch) {
		t.Errorf("StoredControllerPassword after a restore: %v, want ErrControllerMismatch", err)
	}
}

func TestRestoreRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	orig := newStore(t)
	populate(t, orig)
	good := snapshotOf(t, orig)
	replaced := func(key string, value []byte) []Record {
		out := slices.Clone(good)
		for i := range out {
			if out[i].Key == key {
				out[i].Value = value
			}
		}
		return out
	}
	existing := newStore(t)
	tests := []struct {
		name    string
		dir     string
		records []Record
		want    string
	}{
		{"a directory holding a store", existing.Dir(), good, "already holds a state store"},
		{"no identity", "", slices.DeleteFunc(slices.Clone(good), func(r Record) bool { return r.Key == "identity" }), `no "identity" record`},
		{"an unknown kind", "", append(slices.Clone(good), Record{Key: "lease.x", Value: []byte("{}")}), "lease.x"},
		{"a record under another's key", "", replaced("credential.one.shop", []byte(`{"principal":"two.shop","hash":"h","minted_at":"2025-01-01T00:00:00.000000000Z","operation":"issue"}`)), "holds the row of credential.two.shop"},
		{"a record that is not JSON", "", replaced("report.one", []byte("{")), "report.one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := tt.dir
			if dir == "" {
				dir = filepath.Join(t.TempDir(), "restored")
			}
			s, err := Restore(ctx, dir, tt.records)
			if err == nil {
				s.Close()
				t.Fatal("Restore succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Restore: %v, want it to say %q", err, tt.want)
			}
			if tt.dir == "" {
				// A failed restore leaves no store: an empty one would lock every host out.
				if ok, err := Exists(dir); ok || err != nil {
					t.Errorf("Exists after a failed restore = %v, %v", ok, err)
				}
			}
		})
	}
	if diff := cmp.Diff(viewOf(t, orig).ID, viewOf(t, existing).ID); diff == "" {
		t.Error("the existing store took the restored identity")
	}
}

func TestAFailedReplicaWriteIsCaughtUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	populate(t, s)
	r := newMemReplica()
	s.SetReplica(r)
	if err := r.Write(ctx, snapshotOf(t, s)); err != nil {
		t.Fatal(err)
	}

	// A mint of a revoked principal that the replica takes half of: the credential and not
	// the revocation's deletion, which it keeps. Its password is handed out all the same:
	// the hash is stored.
	r.fail = true
	pw, err := s.Mint(ctx, []string{"two.shop"}, bcrypt.MinCost, "rotate")
	if !errors.Is(err, ErrReplicaBehind) || !strings.Contains(err.Error(), "committed to the store in "+s.Dir()+" but not yet to the bus") {
		t.Fatalf("Mint with the replica failing: %v, want ErrReplicaBehind", err)
	}
	if pw["two.shop"] == "" {
		t.Error("Mint returned no password with ErrReplicaBehind")
	}
	if !slices.ContainsFunc(r.records(), func(x Record) bool { return x.Key == "revocation.two.shop" }) {
		t.Fatal("the replica did not keep the stale revocation")
	}
	// A revocation while behind, failing too: it stands in the store.
	r.fail = true
	held, err := s.Revoke(ctx, "one.shop")
	if !errors.Is(err, ErrReplicaBehind) || !held {
		t.Fatalf("Revoke with the replica failing: %v, %v", held, err)
	}
	if _, ok := viewOf(t, s).Hashes["one.shop"]; ok {
		t.Error("the revocation did not stand in the store")
	}

	// The next change sends the whole store, deleting what the replica kept of the past.
	if err := s.RecordReport(ctx, Report{Node: "two", ReportedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(snapshotOf(t, s), r.records()); diff != "" {
		t.Errorf("replica after catching up (-store +replica):\n%s", diff)
	}
	if diff := cmp.Diff(viewOf(t, s), viewOf(t, restored(t, r.records()))); diff != "" {
		t.Errorf("store restored from the replica (-store +restored):\n%s", diff)
	}
	// And the one after that is a change again.
	r.takeWrites()
	if err := s.RecordReport(ctx, Report{Node: "two", ReportedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if w := r.takeWrites(); len(w) != 1 || len(w[0]) != 1 {
		t.Errorf("the write after catching up: %v, want report.two alone", w)
	}
}

// A restored store takes the operator's controller password back only where the restored hash
// accepts it, and then derives the same system password as the store it was restored from,
// minting nothing.
func TestAdoptControllerPassword(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	orig := newStore(t)
	controller, err := orig.ControllerPassword(ctx, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	system, err := orig.SystemPassword(ctx, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	s := restored(t, snapshotOf(t, orig))

	if err := s.AdoptControllerPassword(ctx, system); !errors.Is(err, ErrWrongControllerPassword) {
		t.Errorf("adopting the wrong password: %v, want ErrWrongControllerPassword", err)
	}
	if _, err := ReadControllerPassword(s.Dir()); err == nil {
		t.Error("a wrong password was written")
	}
	if err := s.AdoptControllerPassword(ctx, ""); !errors.Is(err, ErrWrongControllerPassword) {
		t.Errorf("adopting an empty password: %v, want ErrWrongControllerPassword", err)
	}

	if err := s.AdoptControllerPassword(ctx, controller+"\n"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.StoredControllerPassword(ctx); err != nil || got != controller {
		t.Errorf("StoredControllerPassword after adopting = %q, %v; want the original", got, err)
	}
	// ControllerPassword finds the pair matching and mints nothing; the system password is the
	// one the original store derived.
	before := viewOf(t, s).Credentials
	if _, err := s.ControllerPassword(ctx, bcrypt.MinCost); err != nil {
		t.Fatal(err)
	}
	if got, err := s.SystemPassword(ctx, bcrypt.MinCost); err != nil || got != system {
		t.Errorf("the restored store's system password is another (%v)", err)
	}
	if diff := cmp.Diff(before, viewOf(t, s).Credentials); diff != "" {
		t.Errorf("credentials minted after adopting (-before +after):\n%s", diff)
	}
}

func TestKeyName(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, want string }{
		{"node.one", "node.one"},
		{"_meshctl.system", "_meshctl.system"},
		{"a-b_c", "a-b_c"},
		{"", "="},
		{"=", "=3D"},
		{".a", "=2Ea"},
		{"a.", "a=2E"},
		{"a..b", "a.=2Eb"},
		{"a b/c*", "a=20b=2Fc=2A"},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		got := keyName(tt.name)
		if got != tt.want {
			t.Errorf("keyName(%q) = %q, want %q", tt.name, got, tt.want)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("%q and %q share the key %q", tt.name, other, got)
		}
		seen[got] = tt.name
	}
}

// Whether the replica may be behind outlives the process: a store that never had one, and one
// whose process died between a commit and its replica's answer, send the whole store when a
// replica is next kept; a store whose replica took every change sends nothing, and neither does
// a converged apply's record.
func TestTheReplicaCatchesUpAcrossProcesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state")
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	populate(t, s)
	r := newMemReplica()
	s.SetReplica(r)
	if err := s.CatchUp(ctx, false); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(snapshotOf(t, s), r.records()); diff != "" {
		t.Fatalf("a store never replicated did not send itself whole (-store +replica):\n%s", diff)
	}
	r.takeWrites()
	if err := s.CatchUp(ctx, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordApply(ctx, ApplyRecord{Started: time.Now(), Finished: time.Now(), Outcome: "in sync", Converged: true}); err != nil {
		t.Fatal(err)
	}
	if w := r.takeWrites(); len(w) != 0 {
		t.Fatalf("a replica caught up, and a converged apply, wrote %v", w)
	}
	// A change the replica takes, and the replica let go in step: the next process owes it
	// nothing.
	if _, err := s.Mint(ctx, []string{"four.shop"}, bcrypt.MinCost, "issue"); err != nil {
		t.Fatal(err)
	}
	s.DropReplica(r)
	s.Close()
	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	r.takeWrites()
	s.SetReplica(r)
	if err := s.CatchUp(ctx, false); err != nil {
		t.Fatal(err)
	}
	if w := r.takeWrites(); len(w) != 0 {
		t.Fatalf("a replica let go in step was sent %v", w)
	}

	// The process dies after a commit, before its replica took it: the replica misses it.
	r.fail = true
	if _, err := s.Mint(ctx, []string{"three.shop"}, bcrypt.MinCost, "issue"); !errors.Is(err, ErrReplicaBehind) {
		t.Fatalf("Mint with the replica failing: %v", err)
	}
	s.Close()
	again, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	again.SetReplica(r)
	if err := again.CatchUp(ctx, false); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(snapshotOf(t, again), r.records()); diff != "" {
		t.Fatalf("the next process did not catch the replica up (-store +replica):\n%s", diff)
	}
	// A bucket found empty is sent the store whatever the store remembers.
	empty := newMemReplica()
	again.SetReplica(empty)
	if err := again.CatchUp(ctx, true); err != nil || len(empty.records()) == 0 {
		t.Fatalf("an empty replica was not sent the store: %v", err)
	}
}
