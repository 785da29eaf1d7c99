package state

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base32"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/internal/atomicfile"
)

// DefaultCost is the bcrypt cost of minted passwords: bcrypt's least.
//
// A bcrypt cost slows the guessing of a password from its hash, which matters for a password a
// person chose. meshctl chooses every password itself, 130 random bits (GeneratePassword): no
// cost changes what guessing one from a leaked hash would take. The server, though, pays the
// cost at every login, and at every reload once for every connected client, one after another
// (nats-server's reloadAuthorization checks each connection against the new users): measured
// on 2 cores, a reload with 20 clients connected took 2.33 s at cost 11 — nats-server's own
// password tool's default — and 20 ms at cost 4 (bus.BenchmarkReloadWithClients). At cost 11 a
// mesh of 5,000 connected hosts would spend ten minutes of the server's time on every
// credential issued. --bcrypt-cost sets another for an operator who wants it; hashes already
// minted keep theirs until the credential is rotated.
const DefaultCost = bcrypt.MinCost

// controllerPrincipal is the principal name of meshctl's own identity on the bus, and
// systemPrincipal that of its user in the servers' system account (render.SystemUser).
const (
	controllerPrincipal = "controller"
	systemPrincipal     = "_meshctl.system"
)

// Operations recorded by ControllerPassword, SystemPassword and RotateControllerPassword.
const (
	opControllerFirstUse = "controller-first-use"
	opControllerRotate   = "controller-rotate"
	opSystemFirstUse     = "system-first-use"
	// opSystemDerived replaces a system user's hash that refuses the password derived from the
	// controller's: one an earlier meshctl minted at random, or one of a rotated controller.
	opSystemDerived = "system-derived"
)

// OpDeclare is the operation the controller records with a module instance's credential it
// mints to declare, sealed, to the instance's node: the node's agent holds it. opEnrol is the
// one EnrolNode records with a node's own credential.
const (
	OpDeclare = "declare"
	opEnrol   = "enrol"
)

// issuedByHand reports whether a credential minted by operation was issued by an operator
// (`meshctl credentials issue` or `rotate`), who gave it to a host of their own, rather than
// minted by meshctl itself: by the controller for a declaration or an enrolment, or as one of
// meshctl's own identities. Any operation meshctl does not record itself counts as by hand: a
// credential nobody can tell the origin of is not the controller's to replace.
func issuedByHand(operation string) bool {
	switch operation {
	case OpDeclare, opEnrol, opControllerFirstUse, opControllerRotate, opSystemFirstUse, opSystemDerived,
		// What an earlier meshctl recorded when it minted its own identities anew.
		"controller-remint", "system-remint":
		return false
	}
	return true
}

// GeneratePassword returns a fresh random password: 26 characters of base32 (A–Z, 2–7) from
// crypto/rand, 130 bits. The alphabet survives a URL, a JSON line, a shell and a config file
// unquoted, and no password starts with '-' to be mistaken for a flag.
func GeneratePassword() (string, error) {
	// rand.Text panics rather than return a weak value if the system's randomness fails; the
	// error result keeps callers ready for a generator that reports failure instead.
	return rand.Text(), nil
}

// Credential describes a stored credential. It never carries the hash or the password.
type Credential struct {
	Principal string
	MintedAt  time.Time
	Operation string // why it was minted, e.g. "credentials issue", "declare", "controller-first-use"
}

// ByHand reports whether an operator issued the credential (`meshctl credentials issue` or
// `rotate`) rather than meshctl minting it itself. For a module instance on an enrolled node it
// says who holds it: the host it was issued to, not the node's agent.
func (c Credential) ByHand() bool { return issuedByHand(c.Operation) }

// Mint generates a password for each principal, stores its bcrypt hash at cost (replacing any
// previous credential of that principal), and returns the plaintexts by principal. The hashing
// runs on runtime.GOMAXPROCS goroutines, and every row is written in one transaction once all
// hashes exist: a failure or cancellation leaves every previous credential in place, never a
// mesh where half the principals were rotated. Duplicate principals are minted once.
func (s *Store) Mint(ctx context.Context, principals []string, cost int, operation string) (map[string]string, error) {
	return s.mintAndStore(ctx, principals, cost, false, operation)
}

// mintAndStore is Mint, and with nkey MintNkeys.
func (s *Store) mintAndStore(ctx context.Context, principals []string, cost int, nkey bool, operation string) (map[string]string, error) {
	fresh, err := mint(ctx, principals, cost, nkey)
	if err != nil {
		return nil, fmt.Errorf("minting credentials: %w", err)
	}
	now := time.Now()
	err = s.change(ctx, fmt.Sprintf("storing %d minted credentials in %s", len(fresh), s.dir), func(tx *sql.Tx, c *changes) error {
		return storeHashes(ctx, tx, c, fresh, now, operation)
	})
	if err != nil && !errors.Is(err, ErrReplicaBehind) {
		return nil, err
	}
	// Stored, if not yet on the bus: these plaintexts are the only ones of the hashes stored.
	passwords := make(map[string]string, len(fresh))
	for _, m := range fresh {
		passwords[m.principal] = m.password
	}
	return passwords, err
}

// minted is one principal's new secret and what the store keeps of it, before they are
// stored: a password and its bcrypt hash, or an nkey user's seed and public key.
type minted struct {
	principal, password, hash string
}

// mint validates the principals and cost and makes a fresh credential for each principal:
// a password hashed at cost, or with nkey an nkey user key pair (newNkeys).
func mint(ctx context.Context, principals []string, cost int, nkey bool) ([]minted, error) {
	// bcrypt silently uses its DefaultCost (10) for a cost below MinCost: a typo would weaken
	// every hash without a word.
	if !nkey && (cost < bcrypt.MinCost || cost > bcrypt.MaxCost) {
		return nil, fmt.Errorf("bcrypt cost %d is outside %d..%d", cost, bcrypt.MinCost, bcrypt.MaxCost)
	}
	seen := make(map[string]bool, len(principals))
	out := make([]minted, 0, len(principals))
	for _, p := range principals {
		if strings.TrimSpace(p) == "" {
			return nil, errors.New("a principal name is empty")
		}
		if seen[p] {
			continue
		}
		seen[p] = true
		if nkey {
			out = append(out, minted{principal: p})
			continue
		}
		pw, err := GeneratePassword()
		if err != nil {
			return nil, err
		}
		out = append(out, minted{principal: p, password: pw})
	}
	if nkey {
		return out, newNkeys(out)
	}
	if err := hashAll(ctx, out, cost); err != nil {
		return nil, err
	}
	return out, nil
}

// hashAll fills in the hash of every entry, spreading the bcrypt runs over GOMAXPROCS
// goroutines: at cost 11 one hash takes ~100ms, so a 6,000-principal mesh minted on one core
// would take ten minutes. The first error (or ctx ending) stops the remaining work.
func hashAll(ctx context.Context, entries []minted, cost int) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(entries)) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(entries) {
					return
				}
				h, err := bcrypt.GenerateFromPassword([]byte(entries[i].password), cost)
				if err != nil {
					// bcrypt's errors never contain the password.
					cancel(fmt.Errorf("hashing the password of %s: %w", entries[i].principal, err))
					return
				}
				entries[i].hash = string(h)
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// storeHashes writes the hashes of fresh, replacing any previous rows of the same principals,
// and notes in c the rows it changed.
func storeHashes(ctx context.Context, tx *sql.Tx, c *changes, fresh []minted, at time.Time, operation string) error {
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO credentials (principal, hash, minted_at, operation)
		VALUES (?, ?, ?, ?)
		ON CONFLICT (principal) DO UPDATE SET
			hash = excluded.hash, minted_at = excluded.minted_at, operation = excluded.operation`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for _, m := range fresh {
		if _, err := stmt.ExecContext(ctx, m.principal, m.hash, formatTime(at), operation); err != nil {
			return fmt.Errorf("storing the hash of %s: %w", m.principal, err)
		}
		c.add(&credentials, m.principal)
		res, err := tx.ExecContext(ctx, "DELETE FROM revocations WHERE principal = ?", m.principal)
		if err != nil {
			return fmt.Errorf("storing the hash of %s: %w", m.principal, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n > 0 {
			c.add(&revocations, m.principal)
		}
	}
	return nil
}

// Revoke deletes principal's credential, so that the next accounts file leaves it out and it can
// no longer log in. It reports whether there was one. The revocation is recorded too (Known):
// the principal's entry on the server is this store's to lock, whether or not it held the
// credential. On ErrReplicaBehind the revocation stands and the result is valid.
func (s *Store) Revoke(ctx context.Context, principal string) (bool, error) {
	var had bool
	err := s.change(ctx, "revoking the credential of "+principal, func(tx *sql.Tx, c *changes) error {
		var err error
		had, err = revoke(ctx, tx, c, principal, time.Now())
		return err
	})
	if err != nil && !errors.Is(err, ErrReplicaBehind) {
		return false, err
	}
	return had, err
}

// RevokeAll is Revoke for each of principals, in one transaction: all are revoked, or none.
// On ErrReplicaBehind the revocations stand.
func (s *Store) RevokeAll(ctx context.Context, principals []string) error {
	now := time.Now()
	return s.change(ctx, fmt.Sprintf("revoking %d credentials in %s", len(principals), s.dir), func(tx *sql.Tx, c *changes) error {
		for _, p := range principals {
			if _, err := revoke(ctx, tx, c, p, now); err != nil {
				return fmt.Errorf("revoking the credential of %s: %w", p, err)
			}
		}
		return nil
	})
}

// revoke deletes principal's credential in tx and records its revocation, noting both in c,
// and reports whether there was one.
func revoke(ctx context.Context, tx *sql.Tx, c *changes, principal string, at time.Time) (bool, error) {
	res, err := tx.ExecContext(ctx, "DELETE FROM credentials WHERE principal = ?", principal)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	if n > 0 {
		c.add(&credentials, principal)
	}
	return n > 0, recordRevocation(ctx, tx, c, principal, at)
}

// Hashes returns every stored credential by principal — a bcrypt hash, or an nkey principal's
// public key (MintNkeys) — what the accounts file is rendered from.
func (s *Store) Hashes(ctx context.Context) (map[string]string, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT principal, hash FROM credentials")
	if err != nil {
		return nil, fmt.Errorf("reading the credential hashes: %w", err)
	}
	defer rows.Close()
	hashes := make(map[string]string)
	for rows.Next() {
		var p, h string
		if err := rows.Scan(&p, &h); err != nil {
			return nil, fmt.Errorf("reading the credential hashes: %w", err)
		}
		hashes[p] = h
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the credential hashes: %w", err)
	}
	return hashes, nil
}

// IssuedByHand returns the principals whose stored credential an operator issued
// (Credential.ByHand): the controller keeps such a module instance's credential when its node
// enrols, rather than mint the agent one that would lock the host out.
func (s *Store) IssuedByHand(ctx context.Context) (map[string]bool, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT principal, operation FROM credentials")
	if err != nil {
		return nil, fmt.Errorf("reading who issued the credentials: %w", err)
	}
	defer rows.Close()
	byHand := map[string]bool{}
	for rows.Next() {
		var p, op string
		if err := rows.Scan(&p, &op); err != nil {
			return nil, fmt.Errorf("reading who issued the credentials: %w", err)
		}
		if issuedByHand(op) {
			byHand[p] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading who issued the credentials: %w", err)
	}
	return byHand, nil
}

// Credentials lists the stored credentials, sorted by principal.
func (s *Store) Credentials(ctx context.Context) ([]Credential, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT principal, minted_at, operation FROM credentials ORDER BY principal")
	if err != nil {
		return nil, fmt.Errorf("listing the credentials: %w", err)
	}
	defer rows.Close()
	var creds []Credential
	for rows.Next() {
		var c Credential
		var at string
		if err := rows.Scan(&c.Principal, &at, &c.Operation); err != nil {
			return nil, fmt.Errorf("listing the credentials: %w", err)
		}
		if c.MintedAt, err = parseTime(at); err != nil {
			return nil, fmt.Errorf("listing the credentials: %s: %w", c.Principal, err)
		}
		creds = append(creds, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing the credentials: %w", err)
	}
	return creds, nil
}

// meshctl's own passwords.
//
// meshctl logs in as principals of its own: the controller, its system user (the one it asks a
// server to reload as, reload: system) and each accounts file's generation principal (the
// reconciler's proof of which file a server serves). Only the controller's password is kept, in
// dir/controller.password: the one secret an operator backs up and hands to a standby or to
// CI. The others follow from it (DerivedPassword), so that whoever holds the controller's
// password — the control host, a store restored from the bus, a standby, a CI runner starting
// from an empty directory — is the same authority, with the same system user and the same
// generation principals: it proves what a server serves with one login, and has nothing to
// mint, write or reload where the bus is converged.
//
// So the controller's password is never minted behind the operator's back either. A file the
// stored hash refuses (replaced, edited, restored from another backup), or a file missing beside
// a stored hash, is refused (ControllerMismatchError): minting anew would leave every copy of
// the password stale with nothing said. It is minted on first use only, where the state
// directory holds neither, and replaced only when the operator asks (RotateControllerPassword).

// ControllerMismatchError is a controller password file the stored controller hash does not
// accept (ErrControllerMismatch): what disagrees, and the two ways out. Nothing is changed.
type ControllerMismatchError struct {
	Why string
}

func (e *ControllerMismatchError) Error() string {
	return e.Why + "; nothing was changed: put the controller's password file back (the one a standby, the CI secret " +
		"or a backup holds), or replace the controller's password with 'meshctl credentials rotate controller' " +
		"and hand the new file to every holder"
}

func (e *ControllerMismatchError) Is(target error) bool { return target == ErrControllerMismatch }

// ControllerPassword returns the controller's password, minting it on first use only: where
// the state directory holds neither dir/controller.password (0600) nor a hash of principal
// "controller". A file and a hash that disagree — either missing, or the hash refusing the file —
// are a *ControllerMismatchError, and nothing is written (see above).
func (s *Store) ControllerPassword(ctx context.Context, cost int) (string, error) {
	pw, err := s.controllerPassword(ctx, s.db, true)
	if errors.Is(err, ErrControllerMismatch) {
		// Another process's first use writes the file and commits the hash under the write
		// lock, so a read without it may see one and not the other: read again under it.
		err = s.inWriteTx(ctx, func(tx *sql.Tx) error {
			pw, err = s.controllerPassword(ctx, tx, true)
			return err
		})
	}
	if !errors.Is(err, ErrNoController) {
		return pw, err
	}
	what := fmt.Sprintf("minting the controller's password in %s", s.dir)
	// Hash before taking the write lock: at a cost an operator may choose, bcrypt takes ~100ms
	// (cost 11), during which every other writer of the store would wait.
	m, err := mint(ctx, []string{controllerPrincipal}, cost, false)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	wrote := false
	err = s.change(ctx, what, func(tx *sql.Tx, c *changes) error {
		// Checked again under the write lock: two meshctl processes starting together must not
		// both mint, or the one that wrote its file first would hold a password the other
		// overwrote.
		got, err := s.controllerPassword(ctx, tx, true)
		if !errors.Is(err, ErrNoController) {
			pw = got
			return err
		}
		pw = m[0].password
		if err := storeHashes(ctx, tx, c, m, time.Now(), opControllerFirstUse); err != nil {
			return err
		}
		// Written before the commit, so that a hash is never stored without its password.
		wrote = true
		return s.writeOwnPassword(controllerOwn, m[0].hash, pw)
	})
	if err != nil && !errors.Is(err, ErrReplicaBehind) {
		if wrote {
			// Not committed: a file no hash accepts would be refused from now on.
			os.Remove(filepath.Join(s.dir, controllerPasswordFileName))
		}
		return "", err
	}
	return pw, err
}

// controllerPassword is the controller's password when dir/controller.password and the stored
// hash agree; ErrNoController where neither exists; a *ControllerMismatchError otherwise. A pair
// known to match is not checked with bcrypt again (verified.go); remember records one bcrypt
// accepted.
func (s *Store) controllerPassword(ctx context.Context, q querier, remember bool) (string, error) {
	path := filepath.Join(s.dir, controllerPasswordFileName)
	data, err := os.ReadFile(path)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("reading the controller's password: %w", err)
	}
	hash, hashed, err := storedHash(ctx, q, controllerPrincipal)
	if err != nil {
		return "", err
	}
	pw := strings.TrimSpace(string(data))
	switch {
	case !exists && !hashed:
		return "", fmt.Errorf("%s: %w", s.dir, ErrNoController)
	case !exists:
		return "", &ControllerMismatchError{Why: fmt.Sprintf("%s is missing, while the state store holds the controller's hash", path)}
	case !hashed:
		return "", &ControllerMismatchError{Why: fmt.Sprintf("the state store holds no controller hash to accept the password in %s "+
			"(the controller was revoked, or this directory's store is new: a store is rebuilt from the bus with --controller-password-file)", path)}
	case pw == "" || !s.accepts(controllerOwn, hash, pw, remember):
		return "", &ControllerMismatchError{Why: fmt.Sprintf("%s does not hold the controller's password: the controller's hash in the state "+
			"store refuses it (the file replaced, edited or restored from another backup, or the controller rotated elsewhere)", path)}
	}
	// The file may have been restored or copied with a wider mode; it is a plaintext password.
	if err := os.Chmod(path, fileMode); err != nil {
		return "", fmt.Errorf("restricting the controller's password file: %w", err)
	}
	return pw, nil
}

// storedHash is principal's stored hash, and whether there is one.
func storedHash(ctx context.Context, q querier, principal string) (string, bool, error) {
	var hash string
	err := q.QueryRowContext(ctx, "SELECT hash FROM credentials WHERE principal = ?", principal).Scan(&hash)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("reading the hash of %s: %w", principal, err)
	}
	return hash, true, nil
}

// accepts reports whether hash is o's password's: known to match (verified.go), or checked
// with bcrypt, which remember records.
func (s *Store) accepts(o own, hash, password string, remember bool) bool {
	if s.knownToMatch(o, hash, password) {
		return true
	}
	if bcrypt.CompareHashAndPassword([]byte(hash), []byte(password)) != nil {
		return false
	}
	if remember {
		s.rememberMatch(o, hash, password)
	}
	return true
}

// DerivedPassword is the password of one of meshctl's own principals that follow the
// controller's (see above): HMAC-SHA256 keyed with the controller's password, over what the
// principal is for (purpose) and what it is bound to, as 26 characters of base32 like every
// password meshctl makes (GeneratePassword). The HMAC gives nothing of the controller's
// password away, and no two purposes or bindings share a password.
func DerivedPassword(controller, purpose string, binding ...string) string {
	mac := hmac.New(sha256.New, []byte(controller))
	for _, part := range append([]string{"meshctl " + purpose}, binding...) {
		// Each part with its length ahead of it: "a","bc" and "ab","c" are two messages.
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		mac.Write(n[:])
		mac.Write([]byte(part))
	}
	return base32.StdEncoding.EncodeToString(mac.Sum(nil))[:26]
}

// systemPurpose is DerivedPassword's purpose for meshctl's system user.
const systemPurpose = "system user"

// SystemPasswordFor is the password of meshctl's system user that follows from the controller
// password controller (SystemPassword).
func SystemPasswordFor(controller string) string { return DerivedPassword(controller, systemPurpose) }

// SystemPassword returns the password of meshctl's system user (render.SystemUser), the one it
// asks servers to reload as: derived from the controller's (DerivedPassword), so that a
// restored store, a standby and a CI runner ask as the same user the servers know. Its hash is
// stored where there is none, or where the stored one refuses it — one an earlier meshctl minted
// at random, or one of a controller password since rotated — which changes the accounts config
// once, as a plan shows. The controller's password must be the stored one
// (StoredControllerPassword's errors otherwise). On ErrReplicaBehind the password returned is
// the one stored.
func (s *Store) SystemPassword(ctx context.Context, cost int) (string, error) {
	what := fmt.Sprintf("storing the hash of meshctl's system user in %s", s.dir)
	controller, err := s.StoredControllerPassword(ctx)
	if err != nil {
		return "", err
	}
	pw := SystemPasswordFor(controller)
	if ok, err := s.systemAccepts(ctx, s.db, pw); err != nil || ok {
		return pw, err
	}
	m := []minted{{principal: systemPrincipal, password: pw}}
	if err := hashAll(ctx, m, cost); err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	err = s.change(ctx, what, func(tx *sql.Tx, c *changes) error {
		if ok, err := s.systemAccepts(ctx, tx, pw); err != nil || ok {
			return err
		}
		op := opSystemFirstUse
		if _, hashed, err := storedHash(ctx, tx, systemPrincipal); err != nil {
			return err
		} else if hashed {
			op = opSystemDerived
		}
		if err := storeHashes(ctx, tx, c, m, time.Now(), op); err != nil {
			return err
		}
		s.rememberMatch(systemOwn, m[0].hash, pw)
		return nil
	})
	if err != nil && !errors.Is(err, ErrReplicaBehind) {
		return "", err
	}
	return pw, err
}

// systemAccepts reports whether the stored hash of meshctl's system user accepts pw.
func (s *Store) systemAccepts(ctx context.Context, q querier, pw string) (bool, error) {
	hash, hashed, err := storedHash(ctx, q, systemPrincipal)
	if err != nil || !hashed {
		return false, err
	}
	return s.accepts(systemOwn, hash, pw, true), nil
}

// ReadLegacySystemPassword reads dir/system.password, the system user's password an earlier
// meshctl minted at random: "" where there is none. A server that has not yet loaded a file
// with the derived one's hash still knows the system user by it, and only by it.
func ReadLegacySystemPassword(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, systemPasswordFileName))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

// ReadControllerPassword reads the controller's password file in dir without opening the
// store or checking it against its hash: for a connection started before the store is read,
// used only once ControllerPassword (or StoredControllerPassword) returns the same password,
// and for what is derived from it where the store has checked it already.
func ReadControllerPassword(dir string) (string, error) {
	path := filepath.Join(dir, controllerPasswordFileName)
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the controller's password: %w", err)
	}
	pw := strings.TrimSpace(string(data))
	if pw == "" {
		return "", fmt.Errorf("reading the controller's password: %s is empty", path)
	}
	return pw, nil
}

// own is one of meshctl's own identities on the bus whose pair of password and hash is
// remembered as matching (verified.go): the controller, and the system user. file is its
// password's file in the state directory (the system user's is an earlier meshctl's), which
// names the record.
type own struct {
	file string
}

var (
	controllerOwn = own{file: controllerPasswordFileName}
	systemOwn     = own{file: systemPasswordFileName}
)

// querier is what *sql.DB and *sql.Tx have in common.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// writeOwnPassword writes o's password file and the record that it matches hash. Callers hold
// the database's write lock (removeStaleTemps).
func (s *Store) writeOwnPassword(o own, hash, password string) error {
	path := filepath.Join(s.dir, o.file)
	removeStaleTemps(filepath.Split(path))
	if err := atomicfile.Write(path, []byte(password+"\n")); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	s.rememberMatch(o, hash, password)
	return nil
}

// removeStaleTemps deletes temporary files a crashed writeFileAtomic left next to base: each may
// hold a plaintext password that no hash matches any more. Callers hold the database's write
// lock, so no other meshctl is writing one of them at the time.
func removeStaleTemps(dir, base string) {
	stale, _ := filepath.Glob(filepath.Join(dir, base+".tmp-*"))
	for _, p := range stale {
		os.Remove(p)
	}
}
