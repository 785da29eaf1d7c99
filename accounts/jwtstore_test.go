package accounts

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/meshbus/meshctl/internal/testnats/opmode"
	"github.com/meshbus/meshctl/model"
)

// adminStore is an operator store as an admin leaves it: the operator, SYSTEM and OTHER made
// by `nats auth` (opmode.NewOperator), and the mesh's account MESH made by `nats auth account
// add`.
type adminStore struct {
	op   *opmode.Operator
	root string
}

func newAdminStore(t *testing.T, name string) adminStore {
	t.Helper()
	op := opmode.NewOperator(t, name)
	op.Run(t, "auth", "account", "add", "MESH", "--operator", name, "--defaults")
	return adminStore{op: op, root: filepath.Dir(filepath.Dir(op.StoreDir))}
}

func (s adminStore) source() model.Operator {
	return model.Operator{Store: s.root, Account: "MESH", SystemCreds: s.op.SystemUserCreds}
}

func writeSeed(t *testing.T, kp nkeys.KeyPair) string {
	t.Helper()
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "key.nk")
	if err := os.WriteFile(path, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLoadOperatorReadsAnAdminsStore holds LoadOperator on a store the nats CLI made: the
// operator found by itself when the store holds one, the account JWT signed by one of its
// keys with a signing key preferred, the mesh's account as its JWT states it with JetStream
// on (the CLI's account has none), the account's own key signing users, and the system
// user's creds.
func TestLoadOperatorReadsAnAdminsStore(t *testing.T) {
	t.Parallel()
	s := newAdminStore(t, "ADMIN")
	o, err := LoadOperator(s.source())
	if err != nil {
		t.Fatal(err)
	}
	if o.Name != "ADMIN" || o.PublicKey != s.op.PublicKey || o.SystemAccount != s.op.SystemAccount {
		t.Errorf("operator %s %s system %s; want ADMIN %s system %s", o.Name, o.PublicKey, o.SystemAccount, s.op.PublicKey, s.op.SystemAccount)
	}
	signer, _ := o.Signer.PublicKey()
	wantSigner, _ := s.op.SigningKey(t).PublicKey()
	if signer != wantSigner {
		t.Errorf("the account JWT is signed by %s; want the operator's signing key %s", signer, wantSigner)
	}
	mesh, err := jwt.DecodeAccountClaims(s.op.AccountJWT(t, "MESH"))
	if err != nil {
		t.Fatal(err)
	}
	if o.Account.PublicKey != mesh.Subject || o.Account.Name != "MESH" || o.AccountJWT != s.op.AccountJWT(t, "MESH") {
		t.Errorf("account %+v; want MESH %s", o.Account, mesh.Subject)
	}
	if o.Account.JetStream != DefaultJetStream {
		t.Errorf("JetStream %+v for an account JWT without any; want %+v", o.Account.JetStream, DefaultJetStream)
	}
	if user, _ := o.UserSigner.PublicKey(); user != mesh.Subject {
		t.Errorf("users are signed by %s; want the account's key %s", user, mesh.Subject)
	}
	sys, err := os.ReadFile(s.op.SystemUserCreds)
	if err != nil {
		t.Fatal(err)
	}
	if string(o.SystemCreds) != string(sys) {
		t.Error("the system creds are not the file named")
	}
	for _, kp := range []nkeys.KeyPair{o.Signer, o.UserSigner} {
		seed, _ := kp.Seed()
		if strings.Contains(o.String(), string(seed)) || strings.Contains(o.GoString(), string(seed)) {
			t.Errorf("the operator prints a seed: %s", o)
		}
	}
	// The account minted from the store can sign its users and push its JWT.
	if _, err := o.Account.MintUser(o.UserSigner, "probe", Grants{}); err != nil {
		t.Errorf("minting a user with the store's key: %v", err)
	}
	if _, err := o.Account.Encode(o.Signer, o.AccountJWT, time.Now()); err != nil {
		t.Errorf("encoding the account's successor: %v", err)
	}

	// nsc keeps creds under keys/creds/<operator>/<account>/: without system_creds, that is
	// where the system user's are read.
	dir := filepath.Join(s.root, "keys", "creds", "ADMIN", "SYSTEM")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sys.creds"), sys, 0o600); err != nil {
		t.Fatal(err)
	}
	src := s.source()
	src.SystemCreds = ""
	if o, err := LoadOperator(src); err != nil || string(o.SystemCreds) != string(sys) {
		t.Errorf("the store's own system creds: %v", err)
	}
}

// TestLoadOperatorRefuses holds each refusal: the message names the file or key at fault, and
// never a seed.
func TestLoadOperatorRefuses(t *testing.T) {
	t.Parallel()
	s := newAdminStore(t, "REFUSALS")
	s.op.Run(t, "auth", "account", "keys", "add", "MESH", "scoped", "--operator", "REFUSALS", "--pub-allow", "x.>", "--description", "a scoped key")
	mesh, err := jwt.DecodeAccountClaims(s.op.AccountJWT(t, "MESH"))
	if err != nil {
		t.Fatal(err)
	}
	var scoped string
	for _, k := range mesh.SigningKeys.Keys() {
		scoped = k
	}
	if scoped == "" {
		t.Fatal("the CLI added no signing key to MESH")
	}
	keysDir := filepath.Join(s.root, "keys", "keys")
	scopedSeed := filepath.Join(keysDir, "A", scoped[1:3], scoped+".nk")
	stranger, strangerPub := newKey(t, nkeys.CreateOperator)
	strangerAcc, strangerAccPub := newKey(t, nkeys.CreateAccount)
	for _, tc := range []struct {
		name   string
		change func(*model.Operator)
		want   []string
	}{
		{"an operator not in the store", func(o *model.Operator) { o.Name = "NOPE" }, []string{"NOPE.jwt"}},
		{"an account not in the store", func(o *model.Operator) { o.Account = "MISSING" }, []string{"MISSING.jwt", "nats auth account add MISSING"}},
		{"the system account as the mesh's", func(o *model.Operator) { o.Account = "SYSTEM" }, []string{"system account"}},
		{"a signing key of another operator", func(o *model.Operator) { o.SigningKey = writeSeed(t, stranger) }, []string{"bus.operator.signing_key", strangerPub}},
		{"an account key of another account", func(o *model.Operator) { o.AccountKey = writeSeed(t, strangerAcc) }, []string{"bus.operator.account_key", strangerAccPub, mesh.Subject}},
		{"a scoped signing key as the account key", func(o *model.Operator) { o.AccountKey = scopedSeed }, []string{"scoped", scoped}},
		{"a seed file that holds none", func(o *model.Operator) { o.SigningKey = s.op.JWTFile }, []string{"bus.operator.signing_key", s.op.JWTFile}},
		{"OTHER's user as the system user", func(o *model.Operator) { o.SystemCreds = s.op.OtherUserCreds }, []string{s.op.OtherUserCreds, s.op.Other, s.op.SystemAccount}},
		{"no system creds anywhere", func(o *model.Operator) { o.SystemCreds = "" }, []string{"bus.operator.system_creds"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := s.source()
			tc.change(&src)
			_, err := LoadOperator(src)
			if !errors.Is(err, ErrOperatorStore) {
				t.Fatalf("got %v; want ErrOperatorStore", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v\ndoes not name %s", err, w)
				}
			}
			for _, kp := range []nkeys.KeyPair{stranger, strangerAcc} {
				if seed, _ := kp.Seed(); strings.Contains(err.Error(), string(seed)) {
					t.Errorf("the error quotes a seed: %v", err)
				}
			}
		})
	}

	// Without the seeds of the operator's keys, nothing signs the account's JWT; without the
	// account's, nothing signs its users.
	for _, kind := range []struct{ dir, want string }{{"O", "bus.operator.signing_key"}, {"A", "bus.operator.account_key"}} {
		s := newAdminStore(t, "NOSEED"+kind.dir)
		if err := os.RemoveAll(filepath.Join(s.root, "keys", "keys", kind.dir)); err != nil {
			t.Fatal(err)
		}
		_, err := LoadOperator(s.source())
		if !errors.Is(err, ErrOperatorStore) || !strings.Contains(err.Error(), kind.want) {
			t.Errorf("without the %s seeds: %v; want ErrOperatorStore naming %s", kind.dir, err, kind.want)
		}
	}
}
