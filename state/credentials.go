package state

import (
	"context"
	"crypto/rand"
	"database/sql"
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

// Operations recorded by ControllerPassword and SystemPassword.
const (
	opControllerFirstUse = "controller-first-use"
	opControllerRemint   = "controller-remint"
	opSystemFirstUse     = "system-first-use"
	opSystemRemint       = "system-remint"
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
	case OpDeclare, opEnrol, opControllerFirstUse, opControllerRemint, opSystemFirstUse, opSystemRemint:
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

// ControllerPassword returns the controller's password, minting it on first use. The plaintext
// lives in dir/controller.password (0600) and its hash under principal "controller". If the file
// and the stored hash agree, the password is returned unchanged; if either is missing or they
// disagree (an operator revoked "controller", a file was restored from an old backup), both are
// minted anew, since a password the bus would refuse is worth nothing.
func (s *Store) ControllerPassword(ctx context.Context, cost int) (string, error) {
	return s.ownPassword(ctx, controllerOwn, cost)
}

// SystemPassword is ControllerPassword for meshctl's system user (render.SystemUser), the one
// it asks servers to reload as: dir/system.password (0600), its hash under that principal.
func (s *Store) SystemPassword(ctx context.Context, cost int) (string, error) {
	return s.ownPassword(ctx, systemOwn, cost)
}

// ReadSystemPassword reads meshctl's system user's password from dir, as SystemPassword last
// minted it, without opening the store: for a reload by request, made after the session's
// SystemPassword has minted it or found it matching its hash.
func ReadSystemPassword(dir string) (string, error) { return readOwnPassword(dir, systemOwn) }

// ReadControllerPassword reads the controller's password file in dir without opening the
// store or checking it against its hash: for a connection started before the store is read,
// used only once ControllerPassword (or StoredControllerPassword) returns the same password.
func ReadControllerPassword(dir string) (string, error) { return readOwnPassword(dir, controllerOwn) }

func readOwnPassword(dir string, o own) (string, error) {
	path := filepath.Join(dir, o.file)
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading %s password: %w", o.what, err)
	}
	pw := strings.TrimSpace(string(data))
	if pw == "" {
		return "", fmt.Errorf("reading %s password: %s is empty", o.what, path)
	}
	return pw, nil
}

// own is one of meshctl's own identities on the bus, whose plaintext meshctl keeps because
// it logs in as it: the controller, and the system user.
type own struct {
	principal string
	file      string // the password's file in the state directory
	what      string // how errors name it
	// The operations recorded when it is minted: the first time, and anew.
	opFirstUse, opRemint string
	wrong                error // what adopting a password its hash refuses wraps
}

var (
	controllerOwn = own{principal: controllerPrincipal, file: controllerPasswordFileName, what: "the controller's",
		opFirstUse: opControllerFirstUse, opRemint: opControllerRemint, wrong: ErrWrongControllerPassword}
	systemOwn = own{principal: systemPrincipal, file: systemPasswordFileName, what: "meshctl's system user's",
		opFirstUse: opSystemFirstUse, opRemint: opSystemRemint, wrong: ErrWrongSystemPassword}
)

// ownPassword is ControllerPassword and SystemPassword for o. On ErrReplicaBehind the
// password returned is the one stored.
func (s *Store) ownPassword(ctx context.Context, o own, cost int) (string, error) {
	what := fmt.Sprintf("getting %s password in %s", o.what, s.dir)
	if pw, err := s.verifiedOwnPassword(ctx, s.db, o, true); err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	} else if pw != "" {
		return pw, nil
	}
	// Hash before taking the write lock: at a cost an operator may choose, bcrypt takes ~100ms
	// (cost 11), during which every other writer of the store would wait.
	m, err := mint(ctx, []string{o.principal}, cost, false)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	var pw string
	err = s.change(ctx, what, func(tx *sql.Tx, c *changes) error {
		// Check again under the write lock: two meshctl processes starting together must not
		// both mint, or the one that wrote its file first would hold a password the other
		// overwrote.
		verified, err := s.verifiedOwnPassword(ctx, tx, o, true)
		if err != nil || verified != "" {
			pw = verified
			return err
		}
		pw = m[0].password
		return s.storeOwnPassword(ctx, tx, c, o, m)
	})
	if err != nil && !errors.Is(err, ErrReplicaBehind) {
		return "", err
	}
	return pw, err
}

// querier is what *sql.DB and *sql.Tx have in common.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// verifiedOwnPassword returns the password in o's file if the stored hash accepts it, and ""
// when there is nothing usable. A pair known to match is not checked with bcrypt again
// (verified.go); remember records one that bcrypt accepted.
func (s *Store) verifiedOwnPassword(ctx context.Context, q querier, o own, remember bool) (string, error) {
	path := filepath.Join(s.dir, o.file)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading %s password: %w", o.what, err)
	}
	pw := strings.TrimSpace(string(data))
	var hash string
	err = q.QueryRowContext(ctx, "SELECT hash FROM credentials WHERE principal = ?", o.principal).Scan(&hash)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading %s hash: %w", o.what, err)
	}
	if pw == "" {
		return "", nil
	}
	if !s.knownToMatch(o, hash, pw) {
		if bcrypt.CompareHashAndPassword([]byte(hash), []byte(pw)) != nil {
			return "", nil
		}
		if remember {
			s.rememberMatch(o, hash, pw)
		}
	}
	// The file may have been restored or copied with a wider mode; it is a plaintext password.
	if err := os.Chmod(path, fileMode); err != nil {
		return "", fmt.Errorf("restricting %s password file: %w", o.what, err)
	}
	return pw, nil
}

// storeOwnPassword stores o's minted hash in tx (noting it in c) and writes its password to the file. The file
// is written before the transaction commits: if writing fails nothing changes, and if the
// commit fails the next call finds file and hash disagreeing and mints again.
func (s *Store) storeOwnPassword(ctx context.Context, tx *sql.Tx, c *changes, o own, m []minted) error {
	path := filepath.Join(s.dir, o.file)
	op := o.opFirstUse
	if _, err := os.Stat(path); err == nil {
		op = o.opRemint
	} else {
		var n int
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM credentials WHERE principal = ?", o.principal).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			op = o.opRemint
		}
	}
	if err := storeHashes(ctx, tx, c, m, time.Now(), op); err != nil {
		return err
	}
	// Bound to the new hash: if the commit fails, the old hash and the record disagree.
	return s.writeOwnPassword(o, m[0].hash, m[0].password)
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
