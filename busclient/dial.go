package busclient

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/meshbus/meshctl/internal/redact"
)

// Target is where the bus is and how to recognise it.
type Target struct {
	// URL is nats://host:port or tls://host:port. It never carries a user or password: a
	// credential inside a URL leaks into every log line that prints a connection, so
	// Dial refuses one.
	URL string
	// Fingerprint, when set, is the hex SHA-256 of the server's leaf certificate DER, in either
	// case and with or without ':' separators. The mesh's bus presents a certificate no public
	// verifier accepts, so pinning it is how a client knows it reached the right server.
	// A cluster's servers may present different certificates, and a planned rotation has the
	// old certificate and its successor: Fingerprint then lists each, separated by spaces, and
	// any of them is the bus.
	Fingerprint string
	// CA, when set, is PEM: the certificates of the authorities that sign the bus's
	// certificates. A server's certificate must chain to one of them and name the host the URL
	// names, as any TLS client checks; any leaf they sign for that name is the bus, so a
	// certificate renewed by the CA (every cert-manager rotation) needs no change here. With
	// Fingerprint too, the certificate must pass both. With neither, a tls:// URL is verified
	// against the system's roots.
	CA string
	// CertFile and KeyFile name the client certificate and its key the connection presents to
	// a server that asks for one (verify: true in its tls block). They are read again at every
	// connection, so a certificate renewed in place is presented at the next reconnect.
	CertFile, KeyFile string
	// Others are the URLs of a cluster's other servers, separated by commas (servers.go): a
	// connection starts at any server that answers and moves to another when its server goes
	// away. A string, so that a Target stays comparable.
	Others string
}

// Credential is a principal's user and its secret on the bus: a password, or for an nkey
// principal (bus.auth: nkey) the nkey user seed it signs the server's challenge with. One of
// the two, never both. An operator-mode principal (bus.auth: jwt) has a seed and the user JWT
// of its key.
type Credential struct {
	User     string
	Password string
	Seed     string
	// JWT, with Seed, is an operator-mode user's credential: the user JWT the server checks
	// against the account that signed it, presented with the seed's signature of the server's
	// nonce.
	JWT string
	// Refresh, when set, is asked for the user JWT and seed at every connection, the first and
	// each reconnect, in place of JWT and Seed. A JWT is read by the server only at connect,
	// so a credential replaced where it is kept (a membership file rewritten) is taken at the
	// next reconnect, as nats.go takes a creds file's.
	Refresh func() (jwt, seed string, err error)
}

// String names the user and never the secret, so a Credential printed with %v or %+v by
// mistake does not put a password or a seed in a log.
func (c Credential) String() string { return fmt.Sprintf("user %q (secret redacted)", c.User) }

// GoString is String for %#v, which would otherwise print every field.
func (c Credential) GoString() string { return "busclient.Credential{" + c.String() + "}" }

// Address is the URL as every error and log line prints it: scheme://host:port, never its
// userinfo, path or query, and only the scheme of a URL that does not parse (redact.URL).
func (t Target) Address() string { return redact.URL(t.URL) }

// userinfo is the raw "user:password" part of a URL, or "" when it has none; it is what must be
// kept out of any message about that URL.
func (t Target) userinfo() string {
	rest := t.URL
	if i := strings.Index(rest, "://"); i >= 0 {
		rest = rest[i+3:]
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		return rest[:i]
	}
	return ""
}

// check validates the URL without ever quoting it whole.
func (t Target) check() error {
	if t.userinfo() != "" {
		return fmt.Errorf("bus URL %s carries a user or password: give them as the credential "+
			"instead, so the password never travels in a URL that ends up in logs", t.Address())
	}
	u, err := url.Parse(t.URL)
	if err != nil {
		// Not even the parser's cause: it quotes the part it stumbled on ("invalid port
		// \":pa\""), which may be a piece of a password.
		return fmt.Errorf("bus URL %s does not parse: write it as nats://host:port or tls://host:port", t.Address())
	}
	switch u.Scheme {
	case "nats", "tls":
	default:
		return fmt.Errorf("bus URL %s: scheme must be nats:// or tls://", t.Address())
	}
	if u.Host == "" {
		return fmt.Errorf("bus URL %s names no host", t.Address())
	}
	return nil
}

// Fingerprint is the lower-case hex SHA-256 of a certificate's DER bytes (x509.Certificate.Raw)
// — the leaf's own hash, which is what the mesh pins. The server's `pinned_certs` hashes the
// public key instead, a different number (docs/nats-behaviour.md, "TLS").
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// normalFingerprint accepts what operators paste — upper or lower case, with or without ':'
// (openssl prints "AB:CD:…") — and returns the form Fingerprint produces.
func normalFingerprint(s string) (string, error) {
	f := strings.ToLower(strings.ReplaceAll(strings.TrimSpace(s), ":", ""))
	if b, err := hex.DecodeString(f); err != nil || len(b) != sha256.Size {
		return "", fmt.Errorf("fingerprint %q is not a hex SHA-256 (64 hex digits, ':' allowed)", s)
	}
	return f, nil
}

// FingerprintMismatchError is the pin refusing a certificate: the server answered, but with a
// certificate other than the one the mesh pinned.
type FingerprintMismatchError struct {
	Got, Want string
}

// Error says both fingerprints, so an operator can tell a rotated certificate from a wrong server.
func (e *FingerprintMismatchError) Error() string {
	return fmt.Sprintf("certificate fingerprint mismatch: got %s, want %s", e.Got, e.Want)
}

// ErrNoCACertificate is returned (wrapped) for a CA that holds no PEM certificate: a file
// cut short, a key pasted in its place, or nothing at all.
var ErrNoCACertificate = errors.New("the CA holds no PEM certificate")

// roots is the pool of t's CA, or nil when it names none.
func (t Target) roots() (*x509.CertPool, error) {
	if t.CA == "" {
		return nil, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(t.CA)) {
		return nil, ErrNoCACertificate
	}
	return pool, nil
}

// tlsOptions are the options that make the connection verify the bus as t says — by its
// pins, its CA, or both — and present t's client certificate; none for a Target that says
// nothing of TLS, which nats.go then speaks where the URL or the server asks for it,
// verified against the system's roots. Any of them makes TLS mandatory, even on a nats://
// URL: a client told how to recognise the bus never speaks to it in the clear.
func (t Target) tlsOptions() ([]nats.Option, error) {
	pins, err := t.pins()
	if err != nil {
		return nil, err
	}
	roots, err := t.roots()
	if err != nil {
		return nil, err
	}
	var opts []nats.Option
	switch {
	case len(pins) > 0:
		opts = append(opts, nats.Secure(pinnedTLS(roots, pins...)))
	case roots != nil:
		opts = append(opts, nats.Secure(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}))
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, errors.New("a client certificate needs both its file and its key's")
	}
	if t.CertFile != "" {
		// nats.go reads the pair here, refusing a missing or mismatched one before dialling,
		// and again at every connection.
		opts = append(opts, nats.ClientCert(t.CertFile, t.KeyFile))
	}
	return opts, nil
}

// pinnedTLS accepts exactly the leaf certificates whose SHA-256 is among want (the servers of
// one bus, or a certificate and its planned successor) and nothing else. Without roots,
// InsecureSkipVerify turns off name and chain verification, which the mesh's self-signed
// certificate cannot pass ("certificate is not valid for any names"); the pin is stricter.
// With roots the chain and the name are verified as well, and the pin is checked after them.
// It is VerifyConnection, not VerifyPeerCertificate: the latter is skipped on resumed sessions.
func pinnedTLS(roots *x509.CertPool, want ...string) *tls.Config {
	return &tls.Config{
		RootCAs:            roots,
		InsecureSkipVerify: roots == nil, //nolint:gosec // replaced by the pin in VerifyConnection
		MinVersion:         tls.VersionTLS12,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the server presented no certificate to check the pinned fingerprint against")
			}
			if got := Fingerprint(cs.PeerCertificates[0].Raw); !slices.Contains(want, got) {
				return &FingerprintMismatchError{Got: got, Want: strings.Join(want, " or ")}
			}
			return nil
		},
	}
}

// ErrNotUserSeed is returned (wrapped) for a seed that is not an nkey user seed (`SU…`): an
// account's or an operator's seed, a seed cut short, or not a seed at all.
var ErrNotUserSeed = errors.New("the seed is not an nkey user seed (SU…)")

// UserKey is the nkey user key pair of seed. Its error is ErrNotUserSeed alone, never the
// parser's, so that no part of the seed reaches a message.
func UserKey(seed string) (nkeys.KeyPair, error) {
	kp, err := nkeys.FromSeed([]byte(seed))
	if err != nil {
		return nil, ErrNotUserSeed
	}
	if pub, err := kp.PublicKey(); err != nil || !nkeys.IsValidPublicUserKey(pub) {
		kp.Wipe()
		return nil, ErrNotUserSeed
	}
	return kp, nil
}

// login is the option that presents cred to the server: the user and password, the seed's
// public key and its signature of the server's nonce, or the user JWT and that signature.
func (c Credential) login() (nats.Option, error) {
	if c.JWT != "" || c.Refresh != nil {
		return c.jwtLogin()
	}
	if c.Seed == "" {
		return nats.UserInfo(c.User, c.Password), nil
	}
	if c.Password != "" {
		return nil, errors.New("the credential has both a password and a seed; a principal has one")
	}
	kp, err := UserKey(c.Seed)
	if err != nil {
		return nil, err
	}
	pub, _ := kp.PublicKey()
	return nats.Nkey(pub, kp.Sign), nil
}

// jwtLogin presents the user JWT, and signs the server's nonce with the seed read with it: the
// JWT and the seed of one reading go together, even when the credential is replaced between
// the two callbacks of one connection.
func (c Credential) jwtLogin() (nats.Option, error) {
	if c.Password != "" {
		return nil, errors.New("the credential has both a password and a user JWT; a principal has one")
	}
	read := c.Refresh
	if read == nil {
		if c.Seed == "" {
			return nil, errors.New("the credential has a user JWT and no seed to sign with")
		}
		token, seed := c.JWT, c.Seed
		read = func() (string, string, error) { return token, seed, nil }
	}
	var (
		mu   sync.Mutex
		seed string
	)
	userJWT := func() (string, error) {
		token, s, err := read()
		if err != nil {
			return "", err
		}
		if token == "" {
			return "", errors.New("the credential has no user JWT")
		}
		kp, err := UserKey(s)
		if err != nil {
			return "", err
		}
		kp.Wipe()
		mu.Lock()
		seed = s
		mu.Unlock()
		return token, nil
	}
	sign := func(nonce []byte) ([]byte, error) {
		mu.Lock()
		s := seed
		mu.Unlock()
		kp, err := UserKey(s)
		if err != nil {
			return nil, err
		}
		defer kp.Wipe()
		return kp.Sign(nonce)
	}
	// nats.UserJWT calls userJWT once as the options are applied: a credential that cannot be
	// presented is Dial's error, before anything is dialled.
	return nats.UserJWT(userJWT, sign), nil
}

// defaultConnectTimeout bounds one connection attempt when ctx has no sooner deadline: a
// reconciler that waits nats.go's default on an unreachable bus looks hung.
const defaultConnectTimeout = 5 * time.Second

// Dial connects to the bus as cred.User.
//
// It always sets, after any opts so they cannot be lost by accident: the inbox prefix
// "_INBOX.<user>" (every principal is granted only its own inbox; the default random prefix is
// refused), the credential (user and password, the nkey of the user's seed, or its user JWT), and
// an async error handler that records permission violations (chaining any handler given in opts). It also sets a connection name, a connect
// timeout of 5s or ctx's deadline if sooner, PermissionErrOnSubscribe, and TLS as t says:
// verified by t.Fingerprint's pins, t.CA's authorities or both, presenting t.CertFile's
// certificate (any of which makes TLS mandatory). ctx bounds only the connect; the connection
// outlives it.
//
// Errors name t.Address() and the user, never the password or seed, and wrap the cause with %w
// (a pin refusal is a *FingerprintMismatchError, a certificate the CA did not sign for the
// server's name a *tls.CertificateVerificationError, a wrong password or seed
// nats.ErrAuthorization, a seed that is not a user's ErrNotUserSeed).
func Dial(ctx context.Context, t Target, cred Credential, opts ...nats.Option) (*Conn, error) {
	for _, s := range t.servers() {
		if err := s.check(); err != nil {
			return nil, err
		}
	}
	addr := t.Address()
	if cred.User == "" {
		return nil, fmt.Errorf("connecting to the bus at %s: no user given", addr)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("connecting to the bus at %s as %q: %w", addr, cred.User, err)
	}
	timeout := defaultConnectTimeout
	if d, ok := ctx.Deadline(); ok && time.Until(d) < timeout {
		timeout = max(time.Until(d), time.Millisecond)
	}

	c := &Conn{
		user:       cred.User,
		violations: make(chan *PermissionError, violationBuffer),
		changed:    make(chan struct{}),
	}
	all := []nats.Option{
		nats.Name("meshctl:" + cred.User),
		nats.Timeout(timeout),
		nats.PermissionErrOnSubscribe(true),
	}
	secure, err := t.tlsOptions()
	if err != nil {
		return nil, fmt.Errorf("connecting to the bus at %s: %w", addr, err)
	}
	all = append(all, secure...)
	login, err := cred.login()
	if err != nil {
		return nil, fmt.Errorf("connecting to the bus at %s as %q: %w", addr, cred.User, err)
	}
	all = append(all, opts...)
	all = append(all,
		login,
		nats.CustomInboxPrefix("_INBOX."+cred.User),
		c.installHandlers,
	)
	nc, err := nats.Connect(t.urls(), all...)
	for try := 1; err != nil && cutOff(err) && try < cutOffTries && ctx.Err() == nil; try++ {
		nc, err = nats.Connect(t.urls(), all...)
	}
	if err != nil {
		return nil, fmt.Errorf("connecting to the bus at %s as %q: %w", addr, cred.User, err)
	}
	c.Conn = nc
	return c, nil
}

// cutOffTries is how many times a connect the server cut off is made before its error is
// the answer.
const cutOffTries = 3

// cutOff reports whether a connect failed because the server closed the socket under it. A
// server that refuses a login writes "Authorization Violation" and closes the connection at
// once; a client still writing its CONNECT then sees a broken pipe or a reset, not the
// refusal, and a refused credential would read as a network fault. Asked again, it reads
// the refusal.
func cutOff(err error) bool {
	return errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

// violationBuffer is how many refusals Violations holds for a slow reader, and how many recent
// ones WaitViolation looks back over.
const violationBuffer = 64

// Conn is a connection to the bus that also reports what the server refused it.
type Conn struct {
	*nats.Conn

	user       string
	violations chan *PermissionError

	mu      sync.Mutex
	recent  []*PermissionError // the last violationBuffer refusals, oldest first
	changed chan struct{}      // closed and replaced on every refusal, and closed on close
	closed  bool
}

// installHandlers is a nats.Option applied last, so it sees (and chains) any error and closed
// handlers the caller gave.
func (c *Conn) installHandlers(o *nats.Options) error {
	prevErr, prevClosed := o.AsyncErrorCB, o.ClosedCB
	o.AsyncErrorCB = func(nc *nats.Conn, sub *nats.Subscription, err error) {
		if v := parseViolation(c.user, err); v != nil {
			c.record(v)
		}
		if prevErr != nil {
			prevErr(nc, sub, err)
		}
	}
	o.ClosedCB = func(nc *nats.Conn) {
		c.markClosed()
		if prevClosed != nil {
			prevClosed(nc)
		}
	}
	return nil
}

// record keeps a refusal and wakes its waiters. It never blocks: it runs on nats.go's callback
// goroutine, and a reader that stopped reading Violations must not stall every other callback.
func (c *Conn) record(v *PermissionError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.recent = append(c.recent, v)
	if len(c.recent) > violationBuffer {
		c.recent = c.recent[len(c.recent)-violationBuffer:]
	}
	close(c.changed)
	c.changed = make(chan struct{})
	select {
	case c.violations <- v:
	default: // full: dropped from the channel, still kept in recent and as LastViolation
	}
}

// markClosed ends Violations and wakes every waiter, so nobody waits on a connection that can no
// longer be refused anything.
func (c *Conn) markClosed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	close(c.violations)
	close(c.changed)
}

// Violations delivers each permission violation the server reports on this connection. It is
// buffered; when nobody reads, later violations are dropped from it (WaitViolation and
// LastViolation still see them). It is closed when the connection closes.
func (c *Conn) Violations() <-chan *PermissionError { return c.violations }

// LastViolation is the most recent permission violation on this connection, or nil.
func (c *Conn) LastViolation() *PermissionError {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.recent) == 0 {
		return nil
	}
	return c.recent[len(c.recent)-1]
}

// WaitViolation returns the first violation naming exactly subject — one already reported (of the
// last 64) or the next one. A refused subscription in a queue group matches its subject. It
// returns an error when ctx ends or the connection closes first. This is how a test tells "the
// server refused this" from a timeout that merely looks like it (docs/nats-behaviour.md).
func (c *Conn) WaitViolation(ctx context.Context, subject string) (*PermissionError, error) {
	for {
		c.mu.Lock()
		for _, v := range c.recent {
			if v.Subject == subject {
				c.mu.Unlock()
				return v, nil
			}
		}
		closed, changed := c.closed, c.changed
		c.mu.Unlock()
		if closed {
			return nil, fmt.Errorf("waiting for a permission violation on %q: %w", subject, nats.ErrConnectionClosed)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for a permission violation on %q: %w", subject, ctx.Err())
		case <-changed:
		}
	}
}
