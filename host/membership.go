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

	"github.com/meshbus/meshctl/busclient"
)

// Membership is what a host needs to join the bus: exactly the JSON line `meshctl credentials
// issue` prints. The user and password ride beside the address, not inside it: a credential
// embedded in a URL leaks into every log line that prints a connection, so the host
// joins them once, when it dials.
type Membership struct {
	// Address is the bus's URL without credentials: nats://host:port or tls://host:port.
	Address string `json:"address"`
	// Fingerprint is the hex SHA-256 of the bus's leaf certificate, or empty for a bus that
	// presents none (the embedded default on loopback) or is verified by a CA. A cluster whose
	// servers present different certificates, or a planned rotation, lists each, separated by
	// spaces: any of them is the bus.
	Fingerprint string `json:"fingerprint"`
	// CA is the PEM of the authorities that sign the bus's certificates (bus.ca_file): the
	// host verifies the server's certificate by it and by the server's name, so a certificate
	// the CA renews is accepted with this membership unchanged. Without it, and without a
	// fingerprint, a tls:// address is verified against the system's roots.
	CA string `json:"ca,omitempty"`
	// CertFile and KeyFile name the host's own client certificate and its key, files on the
	// host, presented to a server that asks for one (verify: true in its tls block).
	CertFile string `json:"cert_file,omitempty"`
	KeyFile  string `json:"key_file,omitempty"`
	User     string `json:"user"`
	// Password is a password principal's secret; Seed is an nkey principal's (an `SU…` user
	// seed, `bus.auth: nkey`). A membership carries exactly one of the two.
	Password string `json:"password,omitempty"`
	Seed     string `json:"seed,omitempty"`
	// Servers, for a bus of several servers, is every server's URL, Address first (NewMembership):
	// the host connects to whichever answers and moves on when its server goes away. A
	// membership of one server has none, as before clusters.
	Servers []string `json:"servers,omitempty"`
}

// String names the address and user and never the password or seed, so a Membership printed
// by mistake does not put a secret in a log.
func (m Membership) String() string {
	return fmt.Sprintf("user %q at %s (secret redacted)", m.User, m.Address)
}

// GoString is String for %#v, which would otherwise print every field.
func (m Membership) GoString() string { return "host.Membership{" + m.String() + "}" }

// maxMembership bounds what ReadMembership reads: a membership is one short line, and a host
// pointed at the wrong file should say so rather than read a disk image into memory.
const maxMembership = 64 << 10

// ReadMembership reads one membership from r, as `meshctl credentials issue` prints it. Unknown
// fields are an error, like unknown keys in the mesh's YAML: a misspelt "pasword" must say so
// rather than read as a membership without one. It carries exactly one secret, a password or
// an nkey user seed, and a seed must be a user's: an account's seed, or one cut short in a
// copy, would otherwise be found out only as a refused login. Errors never quote the input,
// which holds the secret.
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
		kp.Wipe() // only checked here: Join makes its own when it dials
	}
	return m, nil
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

// NewMembership is the membership of user on the bus t reaches, recognised as t recognises it
// (its pins, its CA) and presenting t's client certificate: for a cluster, with every server
// listed, so the host can reach the bus through any of them.
func NewMembership(t busclient.Target, user, password string) Membership {
	m := Membership{Address: t.URL, Fingerprint: t.Fingerprint, CA: t.CA, CertFile: t.CertFile, KeyFile: t.KeyFile,
		User: user, Password: password}
	if t.Others != "" {
		m.Servers = append([]string{t.URL}, strings.Split(t.Others, ",")...)
	}
	return m
}

// target is where the membership's bus is: its address, and every other server it lists. An
// address without a scheme is taken as nats://.
func (m Membership) target() busclient.Target {
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
