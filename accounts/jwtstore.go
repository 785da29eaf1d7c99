package accounts

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/meshbus/meshctl/model"
)

// ErrOperatorStore is an operator store, or a key or creds file beside it, that does not give
// meshctl what it needs to manage the mesh's account: the message names the file and the key.
var ErrOperatorStore = errors.New("the operator's store does not give what the mesh's account needs")

// DefaultJetStream is the mesh account's JetStream limits where the account JWT an admin made
// sets none: unlimited storage, the mesh's streams being bounded by their own limits. A JWT
// without storage would switch the account's JetStream off.
var DefaultJetStream = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}

// KeptOperatorDir is the directory of a state directory where meshctl keeps the operator it
// makes where bus.operator names none (MakeOperator): an nsc store, which nsc and the nats CLI
// read too.
const KeptOperatorDir = "nsc"

// OperatorOf reads the operator whose account m's mesh is: bus.operator's store, or, where
// the description names none, the one meshctl keeps in stateDir (KeptOperatorDir). It makes
// none.
func OperatorOf(m *model.Mesh, stateDir string) (Operator, error) {
	if m.Bus.Operator != nil {
		return LoadOperator(*m.Bus.Operator)
	}
	return LoadOperator(model.Operator{Store: filepath.Join(stateDir, KeptOperatorDir)})
}

// LoadOperator reads what meshctl holds of the operator from an nsc or `nats auth` store (the
// directory holding stores/ and keys/), as bus.operator names it: the operator's JWT, the
// mesh's account JWT, an operator key that signs the account JWT, a key of the account that
// signs its users, and a system user's creds. A key bus.operator gives as a seed file wins
// over the store's. It refuses, naming the file and the key, a seed it cannot find, a signing
// key that is not the operator's, an account key that is neither the account's nor one of its
// unscoped signing keys, and creds that are not the system account's.
func LoadOperator(o model.Operator) (Operator, error) {
	stores := filepath.Join(o.Store, "stores")
	name := o.Name
	if name == "" {
		var err error
		if name, err = onlyOperator(stores); err != nil {
			return Operator{}, err
		}
	}
	opFile := filepath.Join(stores, name, name+".jwt")
	opJWT, err := readToken(opFile)
	if err != nil {
		return Operator{}, err
	}
	opClaims, err := jwt.DecodeOperatorClaims(opJWT)
	if err != nil {
		return Operator{}, fmt.Errorf("%w: %s is not an operator JWT: %v", ErrOperatorStore, opFile, err)
	}
	op := Operator{Name: name, PublicKey: opClaims.Subject, JWT: opJWT, SystemAccount: opClaims.SystemAccount}
	keys := keyFinder{dir: filepath.Join(o.Store, "keys", "keys")}

	operatorKeys := append([]string{opClaims.Subject}, opClaims.SigningKeys...)
	if o.SigningKey != "" {
		if op.Signer, err = readSeedFile(o.SigningKey, "bus.operator.signing_key"); err != nil {
			return Operator{}, err
		}
		if pub, _ := op.Signer.PublicKey(); !slices.Contains(operatorKeys, pub) {
			return Operator{}, fmt.Errorf("%w: bus.operator.signing_key %s holds key %s, which is neither operator %s's key nor one of its signing keys (%s)",
				ErrOperatorStore, o.SigningKey, pub, name, strings.Join(operatorKeys, ", "))
		}
	} else {
		// A signing key first: an operator with strict signing key usage refuses account JWTs
		// its own key signed.
		if op.Signer, err = keys.first(append(slices.Clone(opClaims.SigningKeys), opClaims.Subject)); err != nil {
			return Operator{}, fmt.Errorf("%w: no seed of operator %s's signing keys or of its own key (%s) under %s: give one as bus.operator.signing_key",
				ErrOperatorStore, name, strings.Join(operatorKeys, ", "), keys.dir)
		}
	}

	account := o.Account
	if account == "" {
		account = model.DefaultOperatorAccount
	}
	accFile := filepath.Join(stores, name, "accounts", account, account+".jwt")
	if op.AccountJWT, err = readToken(accFile); err != nil {
		return Operator{}, fmt.Errorf("%w (an admin makes the account, e.g. `nats auth account add %s --operator %s`)", err, account, name)
	}
	acc, err := jwt.DecodeAccountClaims(op.AccountJWT)
	if err != nil {
		return Operator{}, fmt.Errorf("%w: %s is not an account JWT: %v", ErrOperatorStore, accFile, err)
	}
	if !slices.Contains(operatorKeys, acc.Issuer) {
		return Operator{}, fmt.Errorf("%w: %s is signed by %s, which is not a key of operator %s (%s)", ErrOperatorStore, accFile, acc.Issuer, name, strings.Join(operatorKeys, ", "))
	}
	if acc.Subject == op.SystemAccount {
		return Operator{}, fmt.Errorf("%w: account %s (%s) is operator %s's system account: the mesh needs an account of its own", ErrOperatorStore, account, acc.Subject, name)
	}
	op.Account = AccountOf(acc)
	if op.UserSigner, err = loadUserSigner(o, keys, acc); err != nil {
		return Operator{}, err
	}
	if op.SystemCreds, err = loadSystemCreds(o, stores, name, op.SystemAccount); err != nil {
		return Operator{}, err
	}
	// Only a server started from this store needs it (resolver_preload): an admin's
	// servers hold it already, so a store without it is no error.
	_, op.SystemAccountJWT, _ = systemAccountIn(stores, name, op.SystemAccount)
	return op, nil
}

// AccountOf is the mesh's account as a JWT of it states it, with DefaultJetStream where the
// JWT sets no JetStream storage.
func AccountOf(c *jwt.AccountClaims) Account {
	a := Account{Name: c.Name, PublicKey: c.Subject, JetStream: c.Limits.JetStreamLimits, JetStreamTiers: c.Limits.JetStreamTieredLimits}
	if !c.Limits.IsJSEnabled() {
		a.JetStream, a.JetStreamTiers = DefaultJetStream, nil
	}
	a.SigningKeys = c.SigningKeys.Keys()
	slices.Sort(a.SigningKeys)
	return a
}

// loadUserSigner is the key that signs the account's users: bus.operator.account_key, or the
// first unscoped signing key of the account whose seed the store holds, or the account's own
// key. A scoped signing key never signs them: the server gives its users the scope's
// template instead of the permissions their JWTs carry.
func loadUserSigner(o model.Operator, keys keyFinder, acc *jwt.AccountClaims) (nkeys.KeyPair, error) {
	var unscoped []string
	for _, k := range acc.SigningKeys.Keys() {
		if scope, _ := acc.SigningKeys.GetScope(k); scope == nil {
			unscoped = append(unscoped, k)
		}
	}
	slices.Sort(unscoped)
	if o.AccountKey != "" {
		kp, err := readSeedFile(o.AccountKey, "bus.operator.account_key")
		if err != nil {
			return nil, err
		}
		pub, _ := kp.PublicKey()
		switch {
		case pub == acc.Subject || slices.Contains(unscoped, pub):
			return kp, nil
		case acc.SigningKeys.Contains(pub):
			return nil, fmt.Errorf("%w: bus.operator.account_key %s holds %s, a scoped signing key of account %s: its users would get the scope's permissions, not their own; give the account's key or an unscoped signing key",
				ErrOperatorStore, o.AccountKey, pub, acc.Name)
		}
		return nil, fmt.Errorf("%w: bus.operator.account_key %s holds key %s, which is neither account %s's key (%s) nor one of its signing keys",
			ErrOperatorStore, o.AccountKey, pub, acc.Name, acc.Subject)
	}
	kp, err := keys.first(append(unscoped, acc.Subject))
	if err != nil {
		return nil, fmt.Errorf("%w: no seed of account %s's key (%s) or of its unscoped signing keys under %s: give one as bus.operator.account_key",
			ErrOperatorStore, acc.Name, acc.Subject, keys.dir)
	}
	return kp, nil
}

// loadSystemCreds reads bus.operator.system_creds or, without it, the first creds file the
// store keeps for the system account (keys/creds/<operator>/<account>/), and refuses creds
// of another account's user.
func loadSystemCreds(o model.Operator, stores, operator, system string) ([]byte, error) {
	path, what := o.SystemCreds, "bus.operator.system_creds"
	if path == "" {
		var err error
		if path, err = storedSystemCreds(o.Store, stores, operator, system); err != nil {
			return nil, err
		}
		what = "the store's system creds"
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: reading %s: %v", ErrOperatorStore, what, err)
	}
	token, err := jwt.ParseDecoratedJWT(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s holds no user JWT: %v", ErrOperatorStore, what, path, err)
	}
	if _, err := jwt.ParseDecoratedUserNKey(data); err != nil {
		return nil, fmt.Errorf("%w: %s %s holds no user seed: %v", ErrOperatorStore, what, path, err)
	}
	u, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s holds no user JWT: %v", ErrOperatorStore, what, path, err)
	}
	if acct := userAccount(u); acct != system {
		return nil, fmt.Errorf("%w: %s %s is a user of account %s, not of operator %s's system account %s", ErrOperatorStore, what, path, acct, operator, system)
	}
	return data, nil
}

// storedSystemCreds is the first creds file, by name, that the store keeps for the system
// account.
func storedSystemCreds(root, stores, operator, system string) (string, error) {
	name, _, ok := systemAccountIn(stores, operator, system)
	if !ok {
		return "", fmt.Errorf("%w: operator %s's system account %s is not in %s: give a system user's creds as bus.operator.system_creds", ErrOperatorStore, operator, system, filepath.Join(stores, operator, "accounts"))
	}
	dir := filepath.Join(root, "keys", "creds", operator, name)
	creds, _ := filepath.Glob(filepath.Join(dir, "*.creds"))
	if len(creds) == 0 {
		return "", fmt.Errorf("%w: no creds of a user of the system account %s under %s: give a system user's creds as bus.operator.system_creds", ErrOperatorStore, name, dir)
	}
	slices.Sort(creds)
	return creds[0], nil
}

// systemAccountIn is the name and JWT of the operator's system account, system, among the
// accounts the store keeps; ok is false where it keeps none of that key.
func systemAccountIn(stores, operator, system string) (name, token string, ok bool) {
	accounts, _ := os.ReadDir(filepath.Join(stores, operator, "accounts"))
	for _, a := range accounts {
		token, err := readToken(filepath.Join(stores, operator, "accounts", a.Name(), a.Name()+".jwt"))
		if err != nil {
			continue
		}
		if c, err := jwt.DecodeAccountClaims(token); err == nil && c.Subject == system {
			return a.Name(), token, true
		}
	}
	return "", "", false
}

func userAccount(u *jwt.UserClaims) string {
	if u.IssuerAccount != "" {
		return u.IssuerAccount
	}
	return u.Issuer
}

// onlyOperator is the one operator of a store that holds exactly one.
func onlyOperator(stores string) (string, error) {
	entries, err := os.ReadDir(stores)
	if err != nil {
		return "", fmt.Errorf("%w: %v (bus.operator.store is the directory holding stores/ and keys/)", ErrOperatorStore, err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	switch len(names) {
	case 1:
		return names[0], nil
	case 0:
		return "", fmt.Errorf("%w: %s holds no operator", ErrOperatorStore, stores)
	}
	return "", fmt.Errorf("%w: %s holds operators %s: name one as bus.operator.name", ErrOperatorStore, stores, strings.Join(names, ", "))
}

func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrOperatorStore, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// readSeedFile reads an nkey seed from a file bus.operator names (what).
func readSeedFile(path, what string) (nkeys.KeyPair, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: reading %s: %v", ErrOperatorStore, what, err)
	}
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		// The parser's error never quotes the seed.
		return nil, fmt.Errorf("%w: %s %s holds no nkey seed: %v", ErrOperatorStore, what, path, err)
	}
	if _, err := kp.Seed(); err != nil {
		return nil, fmt.Errorf("%w: %s %s holds a public key, not a seed", ErrOperatorStore, what, path)
	}
	return kp, nil
}

// keyFinder finds seeds where nsc files them: <dir>/<kind>/<2nd and 3rd character>/<pub>.nk.
type keyFinder struct{ dir string }

// first is the key pair of the first of pubs whose seed is filed and holds that key.
func (k keyFinder) first(pubs []string) (nkeys.KeyPair, error) {
	for _, pub := range pubs {
		if len(pub) < 3 {
			continue
		}
		b, err := os.ReadFile(filepath.Join(k.dir, pub[:1], pub[1:3], pub+".nk"))
		if err != nil {
			continue
		}
		kp, err := nkeys.ParseDecoratedNKey(b)
		if err != nil {
			continue
		}
		if got, _ := kp.PublicKey(); got == pub {
			if _, err := kp.Seed(); err == nil {
				return kp, nil
			}
		}
	}
	return nil, errors.New("no seed")
}
