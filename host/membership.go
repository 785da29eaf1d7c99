package host

import (
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/nats-io/jwt/v2"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/wire"
)

// Membership is what a host needs to join the bus: the line `meshctl credentials issue` prints,
// and what the controller seals to a node. Its shape is the mesh's protocol (wire.Membership);
// reading it and joining with it are this package's.
type Membership = wire.Membership

// maxMembership bounds what ReadMembership reads: a membership is one short line, and a host
// pointed at the wrong file should say so rather than read a disk image into memory.
const maxMembership = 64 << 10

// ReadMembership reads one membership from r, as `meshctl credentials issue` prints it. Unknown
// fields are an error, like unknown keys in the mesh's YAML: a misspelt "pasword" must say so
// rather than read as a membership without one. It carries exactly one secret, a password or
// an nkey user seed, and a seed must be a user's: an account's seed, or one cut short in a
// copy, would otherwise be found out only as a refused login. A user JWT (operator mode) comes
// with the seed of its subject, and nothing else is one. Errors never quote the input, which
// holds the secret.
func ReadMembership(r io.Reader) (Membership, error) {
	var m Membership
	dec := json.NewDecoder(io.LimitReader(r, maxMembership))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		if errors.Is(err, io.EOF) {
			return m, errors.New("reading the membership: it is empty; `meshctl credentials issue PRINCIPAL` prints one")
		}
		// A syntax error quotes the character it stopped at, which may be one of the
		// password's: say where, not what.
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return m, fmt.Errorf("reading the membership: not JSON at byte %d", syntax.Offset)
		}
		return m, fmt.Errorf("reading the membership: %w", err)
	}
	// One membership, nothing after it: a second object would be a second principal's
	// credential concatenated by mistake, and this host would silently take the first.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return m, errors.New("reading the membership: more than one JSON value; a membership is one line")
	}
	var missing []string
	for _, f := range []struct{ name, value string }{{"address", m.Address}, {"user", m.User}} {
		if strings.TrimSpace(f.value) == "" {
			missing = append(missing, f.name)
		}
	}
	password, seed := strings.TrimSpace(m.Password) != "", strings.TrimSpace(m.Seed) != ""
	if m.JWT != "" && !seed {
		// Half a credential: the servers ask the seed to sign their challenge.
		return m, errors.New("reading the membership: a user JWT without its seed; an operator-mode membership carries both, as `meshctl credentials issue` prints it")
	}
	if !password && !seed {
		missing = append(missing, "password or seed")
	}
	if len(missing) > 0 {
		return m, fmt.Errorf("reading the membership: no %s", strings.Join(missing, ", no "))
	}
	if password && seed {
		return m, errors.New("reading the membership: both a password and a seed; a membership carries one, as `meshctl credentials issue` prints it")
	}
	if (m.CertFile == "") != (m.KeyFile == "") {
		return m, errors.New("reading the membership: a client certificate needs both cert_file and key_file")
	}
	if m.CA != "" && !x509.NewCertPool().AppendCertsFromPEM([]byte(m.CA)) {
		return m, fmt.Errorf("reading the membership: its ca: %w", busclient.ErrNoCACertificate)
	}
	if seed {
		kp, err := busclient.UserKey(m.Seed)
		if err != nil {
			return m, fmt.Errorf("reading the membership: %w", err)
		}
		defer kp.Wipe() // only checked here: Join makes its own when it dials
		if m.JWT != "" {
			pub, _ := kp.PublicKey()
			if err := checkUserJWT(m.JWT, pub); err != nil {
				return m, fmt.Errorf("reading the membership: %w", err)
			}
		}
	}
	return m, nil
}

// checkUserJWT refuses a token that is not a user JWT whose subject is pub, the public key of
// the seed beside it: a JWT and a seed from two credentials, or two copies of one file, would
// otherwise be found out only as a refused login. Only public keys are named.
func checkUserJWT(token, pub string) error {
	claims, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return errors.New("its jwt is not a user JWT (what `meshctl credentials issue` prints in operator mode)")
	}
	if claims.Subject != pub {
		return fmt.Errorf("the seed's public key %s is not the user JWT's subject %s: the two are halves of different credentials", pub, claims.Subject)
	}
	return nil
}

// ReadMembershipFile reads the membership in the file at path, as ReadMembership reads it;
// what is wrong with its content is said after the file's name. The agent and every host
// that takes a membership file read it here.
func ReadMembershipFile(path string) (Membership, error) {
	f, err := os.Open(path)
	if err != nil {
		return Membership{}, err
	}
	defer f.Close()
	m, err := ReadMembership(f)
	if err != nil {
		return Membership{}, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// MembershipOf is the membership of user on the bus t reaches, with its secret (the seed of its
// nkey where nkey, else its password): every server t lists, recognised as t recognises it (its
// pins, its CA), presenting t's client certificate. What `meshctl credentials issue` prints
// and what the controller seals to a node are both built here.
func MembershipOf(t busclient.Target, user, secret string, nkey bool) Membership {
	m := wire.NewMembership(t.ServerURLs(), t.Fingerprint, user, secret, nkey)
	m.CA, m.CertFile, m.KeyFile = t.CA, t.CertFile, t.KeyFile
	return m
}

// targetOf is where m's bus is: its address, and every other server it lists. An address
// without a scheme is taken as nats://.
func targetOf(m Membership) busclient.Target {
	address := withScheme(m.Address)
	var others []string
	for _, s := range m.Servers {
		if s = withScheme(s); s != "" && s != address && !slices.Contains(others, s) {
			others = append(others, s)
		}
	}
	return busclient.Target{URL: address, Fingerprint: m.Fingerprint, CA: m.CA, CertFile: m.CertFile, KeyFile: m.KeyFile,
		Others: strings.Join(others, ",")}
}

func withScheme(address string) string {
	address = strings.TrimSpace(address)
	if address != "" && !strings.Contains(address, "://") {
		return "nats://" + address
	}
	return address
}
