package accounts

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/render"
)

// ErrOperatorExists is a store root that already holds an operator: MakeOperator makes one only
// where there is none, so that it never replaces the keys a deployment's servers trust.
var ErrOperatorExists = errors.New("the operator store already holds an operator")

// The names a fresh operator's store gives what MakeOperator makes besides the operator and
// the mesh's account: its system account (as `nats auth operator add` and nsc name it) and the
// system account's user.
const (
	SystemAccountName = "SYSTEM"
	SystemUserName    = "sys"
)

// MakeOperator makes a fresh operator for a deployment that has none, and writes it under root
// in the layout nsc and the nats CLI's `nats auth` keep (root is the directory that holds
// stores/ and keys/), so both tools, and meshctl, read it:
//
//   - the operator, named name: an identity key and one signing key, its JWT naming the system
//     account (stores/<name>/<name>.jwt);
//   - the system account SYSTEM and its user sys, whose creds are
//     keys/creds/<name>/SYSTEM/sys.creds;
//   - the mesh's account (render.Account when account is empty), with one signing key for its
//     users and JetStream unlimited but by the servers' own limits
//     (stores/<name>/accounts/<account>/<account>.jwt);
//   - every seed as keys/keys/<O|A|U>/<2nd and 3rd characters>/<public key>.nk.
//
// The account JWTs are signed by the operator's signing key. Seeds and creds are 0600, and
// every directory made 0700: the seeds are the operator's keys. A root whose stores/ holds any
// operator already is refused with ErrOperatorExists and left as it is. The store appears whole
// or not at all: it is made beside stores/ and moved into it last.
func MakeOperator(root, name, account string) (Operator, error) {
	if account == "" {
		account = render.Account
	}
	for _, n := range []string{name, account} {
		if err := checkStoreName(n); err != nil {
			return Operator{}, fmt.Errorf("making operator %q: %w", name, err)
		}
	}
	if account == SystemAccountName {
		return Operator{}, fmt.Errorf("making operator %q: the mesh's account cannot be named %s, the system account's name", name, SystemAccountName)
	}
	stores := filepath.Join(root, "stores")
	if held, err := operatorsIn(stores); err != nil {
		return Operator{}, fmt.Errorf("making operator %q in %s: %w", name, root, err)
	} else if len(held) > 0 {
		return Operator{}, fmt.Errorf("making operator %q in %s: %w: %s", name, root, ErrOperatorExists, strings.Join(held, ", "))
	}

	o, made, err := newOperator(name, account, time.Now())
	if err != nil {
		return Operator{}, fmt.Errorf("making operator %q: %w", name, err)
	}
	if err := writeStore(root, o, made); err != nil {
		return Operator{}, fmt.Errorf("making operator %q in %s: %w", name, root, err)
	}
	return o, nil
}

// checkStoreName refuses a name that is not one directory of the store: the store files an
// operator and its accounts by name.
func checkStoreName(n string) error {
	switch {
	case n == "":
		return errors.New("a name is empty")
	case n == "." || n == ".." || strings.HasPrefix(n, "."):
		return fmt.Errorf("%q starts with a dot", n)
	case strings.ContainsAny(n, `/\`):
		return fmt.Errorf("%q holds a path separator", n)
	case strings.ContainsFunc(n, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }):
		return fmt.Errorf("%q holds a space or a character that does not print", n)
	}
	return nil
}

// operatorsIn names the operators a store directory holds: every directory in it, as nsc and
// the nats CLI read each one as an operator.
func operatorsIn(stores string) ([]string, error) {
	entries, err := os.ReadDir(stores)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var held []string
	for _, e := range entries {
		if e.IsDir() {
			held = append(held, e.Name())
		}
	}
	return held, nil
}

// newOperator makes the keys and JWTs of a fresh operator.
func newOperator(name, account string, now time.Time) (Operator, madeKeys, error) {
	var seeds []nkeys.KeyPair
	key := func(create func() (nkeys.KeyPair, error)) (nkeys.KeyPair, string, error) {
		kp, err := create()
		if err != nil {
			return nil, "", err
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, "", err
		}
		seeds = append(seeds, kp)
		return kp, pub, nil
	}
	opKey, opPub, err := key(nkeys.CreateOperator)
	if err != nil {
		return Operator{}, madeKeys{}, err
	}
	signer, signerPub, err := key(nkeys.CreateOperator)
	if err != nil {
		return Operator{}, madeKeys{}, err
	}
	sysKey, sysPub, err := key(nkeys.CreateAccount)
	if err != nil {
		return Operator{}, madeKeys{}, err
	}
	sysUser, sysUserPub, err := key(nkeys.CreateUser)
	if err != nil {
		return Operator{}, madeKeys{}, err
	}
	_, meshPub, err := key(nkeys.CreateAccount)
	if err != nil {
		return Operator{}, madeKeys{}, err
	}
	userSigner, userSignerPub, err := key(nkeys.CreateAccount)
	if err != nil {
		return Operator{}, madeKeys{}, err
	}

	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = name
	oc.SigningKeys.Add(signerPub)
	oc.SystemAccount = sysPub
	opJWT, err := oc.Encode(opKey)
	if err != nil {
		return Operator{}, madeKeys{}, fmt.Errorf("signing the operator's JWT: %w", err)
	}
	// The system account has no JetStream: the servers refuse it one.
	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = SystemAccountName
	sysJWT, err := sc.Encode(signer)
	if err != nil {
		return Operator{}, madeKeys{}, fmt.Errorf("signing the system account's JWT: %w", err)
	}
	uc := jwt.NewUserClaims(sysUserPub)
	uc.Name = SystemUserName
	sysUserJWT, err := uc.Encode(sysKey)
	if err != nil {
		return Operator{}, madeKeys{}, fmt.Errorf("signing the system user's JWT: %w", err)
	}
	sysSeed, err := sysUser.Seed()
	if err != nil {
		return Operator{}, madeKeys{}, err
	}
	sysCreds, err := jwt.FormatUserConfig(sysUserJWT, sysSeed)
	if err != nil {
		return Operator{}, madeKeys{}, fmt.Errorf("writing the system user's creds: %w", err)
	}
	// Unlimited but by what each server's own jetstream block allows it.
	mesh := Account{Name: account, PublicKey: meshPub, SigningKeys: []string{userSignerPub},
		JetStream: jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}}
	meshJWT, err := mesh.Encode(signer, "", now)
	if err != nil {
		return Operator{}, madeKeys{}, err
	}

	o := Operator{
		Name: name, PublicKey: opPub, JWT: opJWT, Signer: signer,
		SystemAccount: sysPub, SystemCreds: sysCreds, SystemAccountJWT: sysJWT,
		Account: mesh, AccountJWT: meshJWT, UserSigner: userSigner,
	}
	return o, madeKeys{seeds: seeds, systemUserJWT: sysUserJWT}, nil
}

// madeKeys is what a fresh operator's store holds besides its Operator: every seed made, and
// the system user's JWT, which the store keeps as nsc does.
type madeKeys struct {
	seeds         []nkeys.KeyPair
	systemUserJWT string
}

// The store's paths under its root, as nsc files them.
func storeDir(root, operator string) string { return filepath.Join(root, "stores", operator) }

func seedPath(root, pub string) string {
	return filepath.Join(root, "keys", "keys", pub[:1], pub[1:3], pub+".nk")
}

func credsPath(root, operator, account, user string) string {
	return filepath.Join(root, "keys", "creds", operator, account, user+".creds")
}

// keysIgnore is the .gitignore nsc writes in its keys directory, so that a store kept in git
// never commits a seed.
const keysIgnore = "# ignore all nk files \n**/*.nk\n\n# ignore all creds files\n**/*.creds\n"

// writeStore writes o's store under root: the seeds and the system user's creds under keys/,
// each a new file, then the operator's directory, made beside stores/ and renamed into it whole,
// so that a store is read as an operator only once it is complete. On an error, every file it
// wrote is removed again.
func writeStore(root string, o Operator, made madeKeys) (err error) {
	var written []string
	tmp := ""
	defer func() {
		if err != nil {
			for _, f := range written {
				os.Remove(f)
			}
		}
		if tmp != "" {
			os.RemoveAll(tmp)
		}
	}()
	newFile := func(path string, data []byte) error {
		if err := writeNew(path, data); err != nil {
			return err
		}
		written = append(written, path)
		return nil
	}
	if err := os.MkdirAll(filepath.Join(root, "keys"), 0o700); err != nil {
		return err
	}
	if err := writeNew(filepath.Join(root, "keys", ".gitignore"), []byte(keysIgnore)); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	for _, kp := range made.seeds {
		pub, err := kp.PublicKey()
		if err != nil {
			return err
		}
		seed, err := kp.Seed()
		if err != nil {
			return err
		}
		if err := newFile(seedPath(root, pub), seed); err != nil {
			return fmt.Errorf("writing the seed of %s: %w", pub, err)
		}
	}
	if err := newFile(credsPath(root, o.Name, SystemAccountName, SystemUserName), o.SystemCreds); err != nil {
		return fmt.Errorf("writing the system user's creds: %w", err)
	}

	info, err := json.Marshal(map[string]any{"managed": false, "name": o.Name, "kind": jwt.OperatorClaim, "version": "1"})
	if err != nil {
		return err
	}
	if tmp, err = os.MkdirTemp(root, "."+o.Name+".new-"); err != nil {
		return err
	}
	account := o.Account.Name
	for rel, data := range map[string][]byte{
		// nsc and the nats CLI read a directory of stores/ as an operator only beside this.
		".nsc":          info,
		o.Name + ".jwt": []byte(o.JWT),
		filepath.Join("accounts", SystemAccountName, SystemAccountName+".jwt"):       []byte(o.SystemAccountJWT),
		filepath.Join("accounts", SystemAccountName, "users", SystemUserName+".jwt"): []byte(made.systemUserJWT),
		filepath.Join("accounts", account, account+".jwt"):                           []byte(o.AccountJWT),
	} {
		if err := writeNew(filepath.Join(tmp, rel), data); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "stores"), 0o700); err != nil {
		return err
	}
	// A rename onto a directory that is not empty fails: a store made meanwhile is kept.
	if err := os.Rename(tmp, storeDir(root, o.Name)); err != nil {
		return fmt.Errorf("%w: %w", ErrOperatorExists, err)
	}
	tmp = ""
	return nil
}

// writeNew writes data to path, a file that must not exist yet, 0600 in directories made 0700:
// a key once written is never replaced.
func writeNew(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

// OperatorMode is what o's servers are configured with to run in operator mode: o's JWT, its
// system account, and the system account's and the mesh account's JWTs preloaded. The embedded
// bus takes it as it is (bus.EmbeddedOptions.Operator); ServerConfig writes it out for an
// operator's own servers.
func (o Operator) OperatorMode() bus.OperatorMode {
	return bus.OperatorMode{OperatorJWT: o.JWT, SystemAccount: o.SystemAccount, Preload: []string{o.SystemAccountJWT, o.AccountJWT}}
}

// ServerConfig is the static config an operator gives each of its servers so that they trust
// o and hold the mesh's account: `operator`, `system_account`, `resolver { type: full, dir:
// <resolverDir>, allow_delete: false, interval: <interval> }` and `resolver_preload` with the
// system account's and the mesh account's JWTs. It holds no seed. Once a server runs on it,
// every change to the mesh's account is a push over the system account: the text never
// changes, and no server reloads.
func (o Operator) ServerConfig(resolverDir, interval string) (string, error) {
	statements, err := o.OperatorMode().Statements(resolverDir, interval)
	if err != nil {
		return "", fmt.Errorf("the servers' config for %s: %w", o, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Operator mode: the servers trust operator %s (%s) and keep account JWTs in\n", o.Name, o.PublicKey)
	fmt.Fprintf(&b, "# their NATS resolver. The mesh's account %s (%s) is preloaded; meshctl pushes\n", o.Account.Name, o.Account.PublicKey)
	b.WriteString("# every change to it over the system account, so this text never changes.\n")
	for _, s := range statements {
		b.WriteString(s + "\n")
	}
	return b.String(), nil
}
