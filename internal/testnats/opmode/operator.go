package opmode

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/meshbus/meshctl/internal/testnats"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// OtherAccount is the account beside the mesh's that every test operator has, with one user:
// what meshctl must leave alone on a shared cluster.
const OtherAccount = "OTHER"

// Operator is an operator store as the nats CLI leaves it (nsc's layout): the operator's JWT
// and its accounts' JWTs under StoreDir, every seed under KeysDir.
type Operator struct {
	Name      string
	PublicKey string
	// StoreDir is stores/<Name>; JWTFile is the operator's JWT in it, which servers trust.
	StoreDir string
	JWTFile  string
	KeysDir  string
	// SystemAccount and Other are the public keys of the SYSTEM account and of OTHER.
	SystemAccount string
	Other         string
	// SystemUserCreds and OtherUserCreds are creds files of a user of each.
	SystemUserCreds string
	OtherUserCreds  string

	home string
}

// NewOperator makes an operator named name in a directory of the test's own, the way an admin
// would: `nats auth operator add` (the operator, its signing key and a SYSTEM account), then
// the account OTHER with a user, and a user of the system account.
func NewOperator(tb testnats.TB, name string) *Operator {
	tb.Helper()
	home := tb.TempDir()
	o := &Operator{
		Name:            name,
		home:            home,
		StoreDir:        filepath.Join(StoreRoot(home), "stores", name),
		KeysDir:         filepath.Join(StoreRoot(home), "keys"),
		SystemUserCreds: filepath.Join(home, "sys.creds"),
		OtherUserCreds:  filepath.Join(home, "other.creds"),
	}
	o.JWTFile = filepath.Join(o.StoreDir, name+".jwt")
	o.Run(tb, "auth", "operator", "add", name)
	o.Run(tb, "auth", "account", "add", OtherAccount, "--operator", name, "--defaults")
	o.Run(tb, "auth", "user", "add", "other", OtherAccount, "--operator", name, "--defaults", "--credential", o.OtherUserCreds)
	o.Run(tb, "auth", "user", "add", "sys", "SYSTEM", "--operator", name, "--defaults", "--credential", o.SystemUserCreds)

	claims, err := jwt.DecodeOperatorClaims(o.readFile(tb, o.JWTFile))
	if err != nil {
		tb.Fatalf("reading operator %s: %v", name, err)
	}
	o.PublicKey, o.SystemAccount = claims.Subject, claims.SystemAccount
	other, err := jwt.DecodeAccountClaims(o.AccountJWT(tb, OtherAccount))
	if err != nil {
		tb.Fatalf("reading account %s: %v", OtherAccount, err)
	}
	o.Other = other.Subject
	return o
}

// Run runs the nats CLI on the operator's store and returns its output.
func (o *Operator) Run(tb testnats.TB, args ...string) []byte {
	tb.Helper()
	return RunCLI(tb, o.home, args...)
}

// StoreRoot is where the nats CLI run by RunCLI on home keeps its nsc store: the directory
// holding stores/ and keys/.
func StoreRoot(home string) string { return filepath.Join(home, "data", "nats", "nsc") }

// RunCLI runs the nats CLI with home as its home, so that it reads and writes the nsc store at
// StoreRoot(home), and returns its output; it fails the test when the CLI fails.
func RunCLI(tb testnats.TB, home string, args ...string) []byte {
	tb.Helper()
	cmd := exec.Command(NatsCLIBinary(tb), args...)
	// The nats CLI keeps its store under $XDG_DATA_HOME/nats/nsc and its selected operator
	// under $XDG_CONFIG_HOME/nats/cli: both point into the test's directory, never the
	// user's.
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_DATA_HOME="+filepath.Join(home, "data"),
		"XDG_CONFIG_HOME="+filepath.Join(home, "config"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("nats %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// AccountJWT is the JWT the store holds for the account named name.
func (o *Operator) AccountJWT(tb testnats.TB, name string) string {
	tb.Helper()
	return o.readFile(tb, filepath.Join(o.StoreDir, "accounts", name, name+".jwt"))
}

// SigningKey is the operator's signing key: what signs account JWTs in its name.
func (o *Operator) SigningKey(tb testnats.TB) nkeys.KeyPair {
	tb.Helper()
	claims, err := jwt.DecodeOperatorClaims(o.readFile(tb, o.JWTFile))
	if err != nil {
		tb.Fatalf("reading operator %s: %v", o.Name, err)
	}
	if len(claims.SigningKeys) == 0 {
		tb.Fatalf("operator %s has no signing key", o.Name)
	}
	return o.keyPair(tb, claims.SigningKeys[0])
}

// keyPair reads the seed of pub from the store's keys, filed as nsc files them:
// keys/<kind>/<2nd and 3rd character>/<pub>.nk.
func (o *Operator) keyPair(tb testnats.TB, pub string) nkeys.KeyPair {
	tb.Helper()
	seed := o.readFile(tb, filepath.Join(o.KeysDir, "keys", pub[:1], pub[1:3], pub+".nk"))
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(seed)))
	if err != nil {
		tb.Fatalf("reading the seed of %s: %v", pub, err)
	}
	return kp
}

func (o *Operator) readFile(tb testnats.TB, path string) string {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("reading operator %s's store: %v", o.Name, err)
	}
	return strings.TrimSpace(string(b))
}

// preload is the resolver_preload block: the system account and OTHER, as an admin
// would generate it, so a server knows both before any push.
func (o *Operator) preload(tb testnats.TB) string {
	tb.Helper()
	return fmt.Sprintf("resolver_preload {\n  %s: %q\n  %s: %q\n}\n",
		o.SystemAccount, o.AccountJWT(tb, "SYSTEM"), o.Other, o.AccountJWT(tb, OtherAccount))
}
