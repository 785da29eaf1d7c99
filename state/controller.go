package state

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Enrolment is an enrolled node: the public key its declarations are sealed to.
type Enrolment struct {
	Node       string
	PublicKey  []byte
	EnrolledAt time.Time
}

// NodeEnrolment is what EnrolNode is asked to record: the node, the principals of its
// enrolment identity and of the node itself, and the key the node sent.
type NodeEnrolment struct {
	Node           string
	EnrolPrincipal string
	NodePrincipal  string
	PublicKey      []byte
	// Nkey mints the node's credential as an nkey user's (bus.auth: nkey): the secret
	// EnrolNode returns is then its seed, and the store keeps its public key.
	Nkey bool
	// JWT, in a jwt mesh (bus.auth: jwt), is the node's user the caller minted, whose seed
	// goes in its answer: the enrolment identity's user is the credential spent, and its key
	// is kept to revoke. EnrolNode then mints nothing and returns no secret.
	JWT *JWTUser
}

// ErrNoEnrolmentCredential is returned (wrapped) by EnrolNode when the node's enrolment
// identity holds no credential: never issued, or already used once.
var ErrNoEnrolmentCredential = errors.New("the node's enrolment credential is not issued or was already used")

// EnrolNode enrols a node in one transaction: it checks that the enrolment identity holds a
// credential, stores the hash of a fresh password (with Nkey, the public key of a fresh nkey;
// with JWT, the user the caller minted) for the node's own principal, records the
// node's key, and deletes the enrolment identity's credential, so the same credential never
// enrols twice. A node enrolled before (a lost disk, enrolled again with a freshly issued
// credential) keeps its generation, but what it was declared is forgotten: those credentials
// were sealed to a key that is gone. It returns the node's password (with Nkey, its seed), the
// one plaintext, also with ErrReplicaBehind: the enrolment stands.
func (s *Store) EnrolNode(ctx context.Context, e NodeEnrolment, cost int) (string, error) {
	if len(e.PublicKey) == 0 || e.Node == "" || e.EnrolPrincipal == "" || e.NodePrincipal == "" {
		return "", errors.New("enrolling a node: the node, its principals and its key are all required")
	}
	var fresh []minted
	if e.JWT == nil {
		// Hashed before the write lock is taken, as ControllerPassword does: bcrypt takes ~100ms.
		var err error
		if fresh, err = mint(ctx, []string{e.NodePrincipal}, cost, e.Nkey); err != nil {
			return "", fmt.Errorf("enrolling node %s: %w", e.Node, err)
		}
	}
	now := time.Now()
	err := s.change(ctx, fmt.Sprintf("enrolling node %s in %s", e.Node, s.dir), func(tx *sql.Tx, c *changes) error {
		if e.JWT != nil {
			if err := enrolJWTNode(ctx, tx, c, e, now); err != nil {
				return err
			}
		} else if err := enrolNode(ctx, tx, c, e, fresh, now); err != nil {
			return err
		}
		c.add(&enrolments, e.Node)
		if _, err := tx.ExecContext(ctx, `INSERT INTO enrolments (node, public_key, enrolled_at) VALUES (?, ?, ?)
			ON CONFLICT (node) DO UPDATE SET public_key = excluded.public_key, enrolled_at = excluded.enrolled_at`,
			e.Node, e.PublicKey, formatTime(now)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM declared_credentials WHERE node = ?", e.Node); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, "UPDATE declarations SET digest = '' WHERE node = ?", e.Node)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n > 0 {
			c.add(&declarations, e.Node)
		}
		return nil
	})
	if err != nil && !errors.Is(err, ErrReplicaBehind) || e.JWT != nil {
		return "", err
	}
	return fresh[0].password, err
}

// enrolNode spends the enrolment identity's credential of e and stores the node's fresh one.
func enrolNode(ctx context.Context, tx *sql.Tx, c *changes, e NodeEnrolment, fresh []minted, now time.Time) error {
	res, err := tx.ExecContext(ctx, "DELETE FROM credentials WHERE principal = ?", e.EnrolPrincipal)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return fmt.Errorf("%w (%s)", ErrNoEnrolmentCredential, e.EnrolPrincipal)
	}
	c.add(&credentials, e.EnrolPrincipal)
	if err := recordRevocation(ctx, tx, c, e.EnrolPrincipal, now); err != nil {
		return err
	}
	return storeHashes(ctx, tx, c, fresh, now, opEnrol)
}

// Enrolments lists the enrolled nodes, sorted by node.
func (s *Store) Enrolments(ctx context.Context) ([]Enrolment, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT node, public_key, enrolled_at FROM enrolments ORDER BY node")
	if err != nil {
		return nil, fmt.Errorf("reading the enrolments: %w", err)
	}
	defer rows.Close()
	var out []Enrolment
	for rows.Next() {
		var e Enrolment
		var at string
		if err := rows.Scan(&e.Node, &e.PublicKey, &at); err != nil {
			return nil, fmt.Errorf("reading the enrolments: %w", err)
		}
		if e.EnrolledAt, err = parseTime(at); err != nil {
			return nil, fmt.Errorf("reading the enrolments: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the enrolments: %w", err)
	}
	return out, nil
}

// DeclaredCredential is one instance's credential as it was last declared: the hash it was
// minted with, so a credential minted again elsewhere is noticed, and the copy sealed to the
// node's key. The plaintext is never stored.
type DeclaredCredential struct {
	Hash   string
	Sealed []byte
}

// Declared is what a node was last declared.
type Declared struct {
	Generation uint64
	// Digest identifies what was declared, credentials aside; empty when nothing was or the
	// node enrolled again since.
	Digest      string
	DeclaredAt  time.Time
	Credentials map[string]DeclaredCredential // by principal
}

// Declared returns what node was last declared, the zero Declared if never.
func (s *Store) Declared(ctx context.Context, node string) (Declared, error) {
	var d Declared
	var at string
	err := s.db.QueryRowContext(ctx, "SELECT generation, digest, declared_at FROM declarations WHERE node = ?", node).
		Scan(&d.Generation, &d.Digest, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return Declared{}, nil
	}
	if err != nil {
		return Declared{}, fmt.Errorf("reading node %s's declaration: %w", node, err)
	}
	if d.DeclaredAt, err = parseTime(at); err != nil {
		return Declared{}, err
	}
	rows, err := s.db.QueryContext(ctx, "SELECT principal, hash, sealed FROM declared_credentials WHERE node = ?", node)
	if err != nil {
		return Declared{}, fmt.Errorf("reading node %s's declared credentials: %w", node, err)
	}
	defer rows.Close()
	d.Credentials = map[string]DeclaredCredential{}
	for rows.Next() {
		var p string
		var c DeclaredCredential
		if err := rows.Scan(&p, &c.Hash, &c.Sealed); err != nil {
			return Declared{}, fmt.Errorf("reading node %s's declared credentials: %w", node, err)
		}
		d.Credentials[p] = c
	}
	if err := rows.Err(); err != nil {
		return Declared{}, fmt.Errorf("reading node %s's declared credentials: %w", node, err)
	}
	return d, nil
}

// RecordDeclaration records what node was declared, replacing the previous declaration and
// its credentials, in one transaction. The node must be enrolled.
func (s *Store) RecordDeclaration(ctx context.Context, node string, d Declared) error {
	what := fmt.Sprintf("recording generation %d of node %s's declaration in %s", d.Generation, node, s.dir)
	return s.change(ctx, what, func(tx *sql.Tx, c *changes) error {
		c.add(&declarations, node)
		if _, err := tx.ExecContext(ctx, "DELETE FROM declared_credentials WHERE node = ?", node); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO declarations (node, generation, digest, declared_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (node) DO UPDATE SET generation = excluded.generation, digest = excluded.digest, declared_at = excluded.declared_at`,
			node, d.Generation, d.Digest, formatTime(d.DeclaredAt)); err != nil {
			return err
		}
		for p, c := range d.Credentials {
			if _, err := tx.ExecContext(ctx, "INSERT INTO declared_credentials (node, principal, hash, sealed) VALUES (?, ?, ?, ?)",
				node, p, c.Hash, c.Sealed); err != nil {
				return err
			}
		}
		return nil
	})
}

// Generations returns the last declared generation of every declared node.
func (s *Store) Generations(ctx context.Context) (map[string]uint64, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT node, generation FROM declarations")
	if err != nil {
		return nil, fmt.Errorf("reading the declared generations: %w", err)
	}
	defer rows.Close()
	out := map[string]uint64{}
	for rows.Next() {
		var n string
		var g uint64
		if err := rows.Scan(&n, &g); err != nil {
			return nil, fmt.Errorf("reading the declared generations: %w", err)
		}
		out[n] = g
	}
	return out, rows.Err()
}

// Report is the last report a node filed: the generation it applied, the principals whose
// memberships it wrote, and those it could not write with why.
type Report struct {
	Node       string
	Generation uint64
	Applied    []string
	Failed     map[string]string
	ReportedAt time.Time // when the node filed it (the bus's timestamp)
	RecordedAt time.Time
}

// RecordReport records r as its node's last report.
func (s *Store) RecordReport(ctx context.Context, r Report) error {
	applied, _ := json.Marshal(r.Applied)
	failed, _ := json.Marshal(r.Failed)
	if r.RecordedAt.IsZero() {
		r.RecordedAt = time.Now()
	}
	what := fmt.Sprintf("recording node %s's report of generation %d in %s", r.Node, r.Generation, s.dir)
	return s.change(ctx, what, func(tx *sql.Tx, c *changes) error {
		c.add(&reports, r.Node)
		_, err := tx.ExecContext(ctx, `INSERT INTO reports (node, generation, applied, failed, reported_at, recorded_at) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (node) DO UPDATE SET generation = excluded.generation, applied = excluded.applied,
				failed = excluded.failed, reported_at = excluded.reported_at, recorded_at = excluded.recorded_at`,
			r.Node, r.Generation, string(applied), string(failed), formatTime(r.ReportedAt), formatTime(r.RecordedAt))
		return err
	})
}

// Reports returns every node's last report, sorted by node.
func (s *Store) Reports(ctx context.Context) ([]Report, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT node, generation, applied, failed, reported_at, recorded_at FROM reports ORDER BY node")
	if err != nil {
		return nil, fmt.Errorf("reading the reports: %w", err)
	}
	defer rows.Close()
	var out []Report
	for rows.Next() {
		var r Report
		var applied, failed, reported, recorded string
		if err := rows.Scan(&r.Node, &r.Generation, &applied, &failed, &reported, &recorded); err != nil {
			return nil, fmt.Errorf("reading the reports: %w", err)
		}
		if err := json.Unmarshal([]byte(applied), &r.Applied); err != nil {
			return nil, fmt.Errorf("reading node %s's report: %w", r.Node, err)
		}
		if err := json.Unmarshal([]byte(failed), &r.Failed); err != nil {
			return nil, fmt.Errorf("reading node %s's report: %w", r.Node, err)
		}
		if r.ReportedAt, err = parseTime(reported); err != nil {
			return nil, err
		}
		if r.RecordedAt, err = parseTime(recorded); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
