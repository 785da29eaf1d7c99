package state

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/bcrypt"
)

func TestGeneratePassword(t *testing.T) {
	t.Parallel()
	seen := make(map[string]bool)
	for range 1000 {
		pw, err := GeneratePassword()
		if err != nil {
			t.Fatal(err)
		}
		if seen[pw] {
			t.Fatalf("GeneratePassword repeated a password")
		}
		seen[pw] = true
		// 26 base32 characters carry 130 bits.
		if len(pw) < 26 {
			t.Errorf("password of %d characters, want at least 26 (128 bits in base32)", len(pw))
		}
		if url.QueryEscape(pw) != pw || url.PathEscape(pw) != pw {
			t.Errorf("password needs escaping in a URL")
		}
		if j, _ := json.Marshal(pw); string(j) != `"`+pw+`"` {
			t.Errorf("password needs escaping in JSON")
		}
		if pw[0] == '-' {
			t.Errorf("password starts with '-'")
		}
	}
}

func TestMintStoresVerifiableHashes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	var principals []string
	for i := range 21 {
		principals = append(principals, fmt.Sprintf("node.n%02d", i))
	}
	principals = append(principals, "controller", "enrol.one", "one.telegram", "node.n00") // one repeated
	before := time.Now()
	passwords, err := s.Mint(ctx, principals, bcrypt.MinCost, "issue")
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	if len(passwords) != 24 {
		t.Fatalf("Mint returned %d passwords, want 24 (one per distinct principal)", len(passwords))
	}
	hashes, err := s.Hashes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(hashes) != len(passwords) {
		t.Fatalf("Hashes has %d entries, want %d", len(hashes), len(passwords))
	}
	distinct := make(map[string]bool)
	for p, pw := range passwords {
		if distinct[pw] {
			t.Errorf("two principals got the same password")
		}
		distinct[pw] = true
		if err := bcrypt.CompareHashAndPassword([]byte(hashes[p]), []byte(pw)); err != nil {
			t.Errorf("the stored hash of %s does not accept its password: %v", p, err)
		}
		if cost, err := bcrypt.Cost([]byte(hashes[p])); err != nil || cost != bcrypt.MinCost {
			t.Errorf("cost of %s's hash = %d (%v), want %d", p, cost, err, bcrypt.MinCost)
		}
	}
	creds, err := s.Credentials(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(creds) != len(passwords) {
		t.Fatalf("Credentials has %d entries, want %d", len(creds), len(passwords))
	}
	for i, c := range creds {
		if i > 0 && creds[i-1].Principal >= c.Principal {
			t.Errorf("Credentials not sorted: %q before %q", creds[i-1].Principal, c.Principal)
		}
		if c.Operation != "issue" {
			t.Errorf("operation of %s = %q, want issue", c.Principal, c.Operation)
		}
		if c.MintedAt.Before(before.Truncate(time.Microsecond)) || c.MintedAt.After(after) {
			t.Errorf("MintedAt of %s = %v, want between %v and %v", c.Principal, c.MintedAt, before, after)
		}
	}
}

func TestMintAtDefaultCost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	passwords, err := s.Mint(ctx, []string{"node.one"}, DefaultCost, "issue")
	if err != nil {
		t.Fatal(err)
	}
	hashes, err := s.Hashes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cost, err := bcrypt.Cost([]byte(hashes["node.one"])); err != nil || cost != bcrypt.MinCost {
		t.Errorf("cost = %d (%v), want %d", cost, err, bcrypt.MinCost)
	}
	if err := bcrypt.CompareHashAndPassword([]byte(hashes["node.one"]), []byte(passwords["node.one"])); err != nil {
		t.Errorf("the hash does not accept the password: %v", err)
	}
}

func TestMintReplacesAndRevokeDeletes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	first, err := s.Mint(ctx, []string{"node.one", "node.two"}, bcrypt.MinCost, "issue")
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.Mint(ctx, []string{"node.one"}, bcrypt.MinCost, "rotate")
	if err != nil {
		t.Fatal(err)
	}
	hashes, err := s.Hashes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if bcrypt.CompareHashAndPassword([]byte(hashes["node.one"]), []byte(first["node.one"])) == nil {
		t.Error("the rotated credential still accepts the old password")
	}
	if err := bcrypt.CompareHashAndPassword([]byte(hashes["node.one"]), []byte(second["node.one"])); err != nil {
		t.Errorf("the rotated credential does not accept the new password: %v", err)
	}
	creds, err := s.Credentials(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ops := make(map[string]string)
	for _, c := range creds {
		ops[c.Principal] = c.Operation
	}
	if diff := cmp.Diff(map[string]string{"node.one": "rotate", "node.two": "issue"}, ops); diff != "" {
		t.Errorf("operations (-want +got):\n%s", diff)
	}

	if ok, err := s.Revoke(ctx, "node.two"); err != nil || !ok {
		t.Errorf("Revoke(node.two) = %v, %v; want true", ok, err)
	}
	if ok, err := s.Revoke(ctx, "node.two"); err != nil || ok {
		t.Errorf("second Revoke(node.two) = %v, %v; want false", ok, err)
	}
	if ok, err := s.Revoke(ctx, "never.issued"); err != nil || ok {
		t.Errorf("Revoke(never.issued) = %v, %v; want false", ok, err)
	}
	hashes, err = s.Hashes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := hashes["node.two"]; ok || len(hashes) != 1 {
		t.Errorf("Hashes after Revoke = %v, want node.one only", hashes)
	}
}

func TestMintRefusesBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	tests := map[string]struct {
		principals []string
		cost       int
	}{
		"cost below bcrypt's minimum": {[]string{"node.one"}, bcrypt.MinCost - 1},
		"cost above bcrypt's maximum": {[]string{"node.one"}, bcrypt.MaxCost + 1},
		"empty principal":             {[]string{"node.one", ""}, bcrypt.MinCost},
		"blank principal":             {[]string{" "}, bcrypt.MinCost},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if pws, err := s.Mint(ctx, tc.principals, tc.cost, "issue"); err == nil {
				t.Errorf("Mint = %d passwords, want an error", len(pws))
			}
		})
	}
	t.Cleanup(func() {
		if hashes, err := s.Hashes(ctx); err != nil || len(hashes) != 0 {
			t.Errorf("refused Mints stored %d hashes (%v)", len(hashes), err)
		}
	})
}

func TestMintCancelledKeepsPreviousCredentials(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	first, err := s.Mint(context.Background(), []string{"node.one"}, bcrypt.MinCost, "issue")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Mint(ctx, []string{"node.one", "node.two"}, bcrypt.MinCost, "rotate"); !errors.Is(err, context.Canceled) {
		t.Errorf("Mint with a cancelled context = %v, want context.Canceled", err)
	}
	hashes, err := s.Hashes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(hashes) != 1 || bcrypt.CompareHashAndPassword([]byte(hashes["node.one"]), []byte(first["node.one"])) != nil {
		t.Errorf("a cancelled Mint changed the stored credentials: %v", hashes)
	}
}

func TestNoPlaintextAtRest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state")
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	var principals []string
	for i := range 12 {
		principals = append(principals, fmt.Sprintf("node.n%02d", i), fmt.Sprintf("enrol.n%02d", i))
	}
	passwords, err := s.Mint(ctx, principals, bcrypt.MinCost, "issue")
	if err != nil {
		t.Fatal(err)
	}
	// Rotate half of them: the old plaintexts must not linger either.
	rotated, err := s.Mint(ctx, principals[:12], bcrypt.MinCost, "rotate")
	if err != nil {
		t.Fatal(err)
	}
	controller, err := s.ControllerPassword(ctx, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	l, err := AcquireLock(ctx, dir, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordApply(ctx, ApplyRecord{Summary: "minted"}); err != nil {
		t.Fatal(err)
	}

	secrets := []string{controller}
	for _, pw := range passwords {
		secrets = append(secrets, pw)
	}
	for _, pw := range rotated {
		secrets = append(secrets, pw)
	}
	grep := func(when string) {
		t.Helper()
		foundController := false
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, pw := range secrets {
				if !bytes.Contains(data, []byte(pw)) {
					continue
				}
				if pw == controller && d.Name() == controllerPasswordFileName {
					foundController = true
					continue
				}
				t.Errorf("%s: %s contains a plaintext password", when, d.Name())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !foundController {
			t.Errorf("%s: the controller's password is not in %s", when, controllerPasswordFileName)
		}
	}
	grep("while open") // the -wal and -shm files exist now
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	grep("after Close")
}

func TestControllerPassword(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, controllerPasswordFileName)
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}

	// verify checks that the file holds pw and the stored hash accepts it, and returns the
	// operation recorded for the controller.
	verify := func(step, pw string) string {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil || string(data) != pw+"\n" {
			t.Errorf("%s: %s holds a different password (%v)", step, controllerPasswordFileName, err)
		}
		hashes, err := s.Hashes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := bcrypt.CompareHashAndPassword([]byte(hashes["controller"]), []byte(pw)); err != nil {
			t.Errorf("%s: the stored hash does not accept the password: %v", step, err)
		}
		creds, err := s.Credentials(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range creds {
			if c.Principal == "controller" {
				return c.Operation
			}
		}
		return ""
	}
	// refused checks that ControllerPassword and StoredControllerPassword both refuse the pair
	// as it stands, and that neither wrote the file or the hash.
	refused := func(step string) {
		t.Helper()
		file, fileErr := os.ReadFile(path)
		hashes, err := s.Hashes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for name, get := range map[string]func() (string, error){
			"ControllerPassword":       func() (string, error) { return s.ControllerPassword(ctx, bcrypt.MinCost) },
			"StoredControllerPassword": func() (string, error) { return s.StoredControllerPassword(ctx) },
		} {
			var mismatch *ControllerMismatchError
			if pw, err := get(); !errors.As(err, &mismatch) || !errors.Is(err, ErrControllerMismatch) || pw != "" {
				t.Errorf("%s: %s = %v, want a ControllerMismatchError", step, name, err)
			} else if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "meshctl credentials rotate controller") {
				t.Errorf("%s: %s does not name the file and the way out: %v", step, name, err)
			}
		}
		again, againErr := os.ReadFile(path)
		if (fileErr == nil) != (againErr == nil) || string(again) != string(file) {
			t.Errorf("%s: the password file was written", step)
		}
		if now, _ := s.Hashes(ctx); now["controller"] != hashes["controller"] {
			t.Errorf("%s: the controller's hash was replaced", step)
		}
	}

	first, err := s.ControllerPassword(ctx, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	if op := verify("first use", first); op != "controller-first-use" {
		t.Errorf("first use recorded operation %q", op)
	}
	if again, err := s.ControllerPassword(ctx, bcrypt.MinCost); err != nil || again != first {
		t.Errorf("second call: a different password (%v)", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openStore(t, dir)
	if again, err := s.ControllerPassword(ctx, bcrypt.MinCost); err != nil || again != first {
		t.Errorf("after reopening: a different password (%v)", err)
	}

	// The file replaced, edited or lost: refused, never minted anew.
	if err := os.WriteFile(path, []byte("RESTOREDFROMELSEWHERE\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	refused("a replaced file")
	if err := os.WriteFile(path, []byte(first+"X\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	refused("an edited file")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	refused("a lost file")

	// Put back, it is the controller's again.
	if err := os.WriteFile(path, []byte(first+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if again, err := s.ControllerPassword(ctx, bcrypt.MinCost); err != nil || again != first {
		t.Errorf("with the file put back: a different password (%v)", err)
	}
	// Put back with a wider mode, it is tightened.
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != fileMode {
		t.Errorf("mode of %s = %v (%v), want %v", controllerPasswordFileName, fi.Mode().Perm(), err, fileMode)
	}

	// An operator revoked the controller, or issued "controller" by hand: refused too.
	if ok, err := s.Revoke(ctx, "controller"); err != nil || !ok {
		t.Fatalf("Revoke(controller) = %v, %v", ok, err)
	}
	refused("the controller revoked")
	rotated, err := s.RotateControllerPassword(ctx, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	if rotated.Previous != "" || rotated.Password == first {
		t.Error("rotating a revoked controller: the revoked password was kept or named as the previous")
	}
	if op := verify("rotated", rotated.Password); op != "controller-rotate" {
		t.Errorf("rotated: operation %q, want controller-rotate", op)
	}
	if _, err := s.Mint(ctx, []string{"controller"}, bcrypt.MinCost, "issue"); err != nil {
		t.Fatal(err)
	}
	refused("the controller issued by hand")
	if stale, _ := filepath.Glob(path + ".tmp-*"); len(stale) != 0 {
		t.Errorf("temporary files left behind: %v", stale)
	}
}

// Rotating the controller replaces its password and, where the store holds one, the system
// user's hash by the one derived from the new password, in one change; undone, both are as
// they were, file included.
func TestRotateControllerPassword(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.RotateControllerPassword(ctx, bcrypt.MinCost); !errors.Is(err, ErrNoController) {
		t.Fatalf("rotating a controller never minted: %v, want ErrNoController", err)
	}
	old, err := s.ControllerPassword(ctx, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SystemPassword(ctx, bcrypt.MinCost); err != nil {
		t.Fatal(err)
	}
	before, err := s.Credentials(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hashesBefore, err := s.Hashes(ctx)
	if err != nil {
		t.Fatal(err)
	}

	r, err := s.RotateControllerPassword(ctx, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	if r.Previous != old || r.Password == old {
		t.Fatal("the rotation does not name the old password as the previous, or kept it")
	}
	if got, err := s.StoredControllerPassword(ctx); err != nil || got != r.Password {
		t.Fatalf("after rotating, the store's controller password is another (%v)", err)
	}
	if got, err := s.SystemPassword(ctx, bcrypt.MinCost); err != nil || got != DerivedPassword(r.Password, systemPurpose) {
		t.Fatalf("after rotating, the system password is not derived from the new controller password (%v)", err)
	}
	if after, _ := s.Credentials(ctx); len(after) != len(before) {
		t.Fatalf("rotating changed which credentials exist: %v, was %v", after, before)
	}

	if err := s.UndoControllerRotation(ctx, r); err != nil {
		t.Fatal(err)
	}
	if got, err := s.StoredControllerPassword(ctx); err != nil || got != old {
		t.Fatalf("undone, the controller password is not the old one (%v)", err)
	}
	after, err := s.Credentials(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("undone, the credentials differ (-before +after):\n%s", diff)
	}
	if hashes, _ := s.Hashes(ctx); !maps.Equal(hashes, hashesBefore) {
		t.Error("undone, the hashes differ")
	}
}

func TestControllerPasswordConcurrentFirstUse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	// Two processes' worth of stores, four callers: they must all end up with the one password
	// that the file holds and the hash accepts.
	stores := []*Store{openStore(t, dir), openStore(t, dir)}
	got := make([]string, 4)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() { got[i], errs[i] = stores[i%2].ControllerPassword(ctx, bcrypt.MinCost) })
	}
	wg.Wait()
	for i := range got {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if got[i] != got[0] {
			t.Errorf("caller %d got a different password from caller 0", i)
		}
	}
	creds, err := stores[0].Credentials(ctx)
	if err != nil || len(creds) != 1 || creds[0].Operation != "controller-first-use" {
		t.Errorf("Credentials = %+v (%v), want one controller-first-use", creds, err)
	}
}

// meshctl's system user's password is derived from the controller's: the same for whoever
// holds that password, kept in no file, its hash stored once; a hash that refuses it (one an
// earlier meshctl minted at random) is replaced once; and there is none without a controller.
func TestSystemPassword(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.SystemPassword(ctx, bcrypt.MinCost); !errors.Is(err, ErrNoController) {
		t.Fatalf("a system password without a controller: %v", err)
	}
	controller, err := s.ControllerPassword(ctx, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.SystemPassword(ctx, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	if first != DerivedPassword(controller, systemPurpose) || first == controller {
		t.Fatal("the system password is not the one derived from the controller's")
	}
	again, err := s.SystemPassword(ctx, bcrypt.MinCost)
	if err != nil || again != first {
		t.Fatalf("the system password changed between calls (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), systemPasswordFileName)); !os.IsNotExist(err) {
		t.Fatalf("the system password was written to a file: %v", err)
	}
	op := func() string {
		creds, err := s.Credentials(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range creds {
			if c.Principal == systemPrincipal {
				return c.Operation
			}
		}
		return ""
	}
	if got := op(); got != "system-first-use" {
		t.Errorf("the system user's hash recorded as %q", got)
	}
	hashes, err := s.Hashes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if bcrypt.CompareHashAndPassword([]byte(hashes[systemPrincipal]), []byte(first)) != nil {
		t.Fatal("the stored hash does not accept the system password")
	}

	// A hash minted at random, as an earlier meshctl did: replaced by the derived one's.
	if _, err := s.Mint(ctx, []string{systemPrincipal}, bcrypt.MinCost, "system-first-use"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.SystemPassword(ctx, bcrypt.MinCost); err != nil || got != first {
		t.Fatalf("after a random hash: %v, or not the derived password", err)
	}
	if got := op(); got != "system-derived" {
		t.Errorf("the replaced hash recorded as %q, want system-derived", got)
	}
	if pw, err := s.ControllerPassword(ctx, bcrypt.MinCost); err != nil || pw != controller {
		t.Fatalf("the system user changed the controller's password (%v)", err)
	}
}

// The derivation is the same for the same password and binding, and another for any other.
func TestDerivedPassword(t *testing.T) {
	t.Parallel()
	a := DerivedPassword("one", "generation", "digest", "n1")
	if a != DerivedPassword("one", "generation", "digest", "n1") {
		t.Fatal("the same derivation gave two passwords")
	}
	if len(a) != 26 {
		t.Fatalf("a derived password is %d characters, want 26", len(a))
	}
	for _, other := range []string{
		DerivedPassword("two", "generation", "digest", "n1"),
		DerivedPassword("one", "system user"),
		DerivedPassword("one", "generation", "digest", "n2"),
		DerivedPassword("one", "generation", "digestn", "1"),
	} {
		if other == a {
			t.Fatal("two derivations gave the same password")
		}
	}
}

// Who issued each credential: an operator's command (whatever it recorded) is by hand, and what
// meshctl minted itself — for a declaration, an enrolment, its own identities — is not. Minted
// again, a credential is as its last minting says.
func TestIssuedByHandTellsTheOperatorsCredentialsFromMeshctls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.ControllerPassword(ctx, bcrypt.MinCost); err != nil {
		t.Fatal(err)
	}
	for principal, op := range map[string]string{"one.shop": "credentials issue", "one.audit": OpDeclare,
		"two.mail": "credentials rotate", "enrol.one": "credentials issue", "two.old": "issue"} {
		if _, err := s.Mint(ctx, []string{principal}, bcrypt.MinCost, op); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.EnrolNode(ctx, NodeEnrolment{Node: "one", EnrolPrincipal: "enrol.one", NodePrincipal: "node.one",
		PublicKey: make([]byte, 32)}, bcrypt.MinCost); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"one.shop": true, "two.mail": true, "two.old": true}
	got, err := s.IssuedByHand(ctx)
	if err != nil || !maps.Equal(got, want) {
		t.Errorf("IssuedByHand = %v (%v), want %v", got, err, want)
	}
	creds, err := s.Credentials(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range creds {
		if c.ByHand() != want[c.Principal] {
			t.Errorf("%s minted by %q: ByHand() = %v", c.Principal, c.Operation, c.ByHand())
		}
	}

	// The agent's credential, rotated by hand, is the operator's; one the controller mints
	// after a revocation is the agent's again.
	if _, err := s.Mint(ctx, []string{"one.audit"}, bcrypt.MinCost, "credentials rotate"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Mint(ctx, []string{"one.shop"}, bcrypt.MinCost, OpDeclare); err != nil {
		t.Fatal(err)
	}
	want = map[string]bool{"one.audit": true, "two.mail": true, "two.old": true}
	if got, err := s.IssuedByHand(ctx); err != nil || !maps.Equal(got, want) {
		t.Errorf("after minting again, IssuedByHand = %v (%v), want %v", got, err, want)
	}
}
