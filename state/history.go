package state

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	osuser "os/user"
	"strings"
	"time"
)

// ApplyRecord is one apply: who ran it, from where, on which commit of the YAML, and how it ended.
type ApplyRecord struct {
	ID                int64 // assigned by RecordApply
	Started, Finished time.Time
	User, Host        string
	Commit            string // git commit of the YAML directory, "-dirty" appended if modified; may be empty
	Summary           string // what was changed, e.g. "3 created, 1 updated"
	Outcome           string // e.g. "applied", "failed: …", "no changes"
	// Converged says the apply found nothing to do: it is kept in this store's history, but
	// not sent to its copy on the bus on its own, since a converged apply writes nothing there.
	Converged bool
}

// RecordApply appends r to the history (r.ID is ignored) and returns its ID, which is never
// reused and which SaveInventory takes to tie holder changes to the apply that made them; the
// ID is valid with ErrReplicaBehind too. A full disk, the failure the history most often
// tells of, is said as ErrNoSpace.
func (s *Store) RecordApply(ctx context.Context, r ApplyRecord) (int64, error) {
	var id int64
	err := s.change(ctx, "recording the apply in "+s.dir, func(tx *sql.Tx, c *changes) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO applies (started, finished, user, host, git_commit, summary, outcome)
			VALUES (?, ?, ?, ?, ?, ?, ?)`,
			formatTime(r.Started), formatTime(r.Finished), r.User, r.Host, r.Commit, r.Summary, r.Outcome)
		if err != nil {
			return err
		}
		if id, err = res.LastInsertId(); err != nil {
			return err
		}
		c.add(&applies, id)
		if r.Converged {
			c.keepLocal()
		}
		return nil
	})
	if err != nil && !errors.Is(err, ErrReplicaBehind) {
		return 0, err
	}
	return id, err
}

// History returns up to limit applies, newest first (limit <= 0: all of them). Times are UTC.
func (s *Store) History(ctx context.Context, limit int) ([]ApplyRecord, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, started, finished, user, host, git_commit, summary, outcome
		FROM applies ORDER BY id DESC LIMIT ?`, sqlLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("reading the apply history: %w", err)
	}
	defer rows.Close()
	var history []ApplyRecord
	for rows.Next() {
		var r ApplyRecord
		var started, finished string
		if err := rows.Scan(&r.ID, &started, &finished, &r.User, &r.Host, &r.Commit, &r.Summary, &r.Outcome); err != nil {
			return nil, fmt.Errorf("reading the apply history: %w", err)
		}
		if r.Started, err = parseTime(started); err != nil {
			return nil, fmt.Errorf("reading apply %d: %w", r.ID, err)
		}
		if r.Finished, err = parseTime(finished); err != nil {
			return nil, fmt.Errorf("reading apply %d: %w", r.ID, err)
		}
		history = append(history, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the apply history: %w", err)
	}
	return history, nil
}

// WhoAmI returns what an ApplyRecord says about its origin: the user (os/user, else $USER), the
// host name, and the git commit of dir ("-dirty" appended when files under dir are modified or
// untracked). commit is empty when dir is not in a git work tree or git is absent: a missing
// provenance must never stop an apply. Empty strings stand for anything else unknown.
func WhoAmI(dir string) (user, host, commit string) {
	if u, err := osuser.Current(); err == nil {
		user = u.Username
	} else {
		user = os.Getenv("USER")
	}
	host, _ = os.Hostname()
	return user, host, gitCommit(dir)
}

// gitTimeout bounds each git command: a hung git (a network file system, a credential prompt)
// must not hang an apply for the sake of its history line.
const gitTimeout = 10 * time.Second

// gitCommit returns dir's HEAD commit, with "-dirty" when `git status` shows changes under dir.
func gitCommit(dir string) string {
	head, ok := git(dir, "rev-parse", "HEAD")
	if !ok || !isHex(head) {
		return ""
	}
	status, ok := git(dir, "status", "--porcelain", "--", ".")
	if !ok {
		return ""
	}
	if status != "" {
		return head + "-dirty"
	}
	return head
}

// git runs git -C dir args and returns its trimmed output and whether it succeeded.
func git(dir string, args ...string) (string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), gitTimeout)
	defer cancel()
	// --no-optional-locks: `git status` would otherwise refresh and rewrite the index, racing an
	// operator's own git commands in the same repository for index.lock.
	cmd := exec.CommandContext(ctx, "git", append([]string{"--no-optional-locks", "-C", dir}, args...)...)
	// A meshctl run from a git hook inherits GIT_DIR and friends, which would make -C dir
	// describe the hook's repository instead of dir's.
	cmd.Env = withoutGitEnv(os.Environ())
	out, err := cmd.Output()
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(out)), true
}

// withoutGitEnv drops the variables that redirect git away from the -C directory.
func withoutGitEnv(env []string) []string {
	var kept []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR", "GIT_PREFIX":
			continue
		}
		kept = append(kept, kv)
	}
	return kept
}

// isHex reports whether s looks like an object name (SHA-1 or SHA-256), not an error message.
func isHex(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, r := range s {
		if !strings.ContainsRune("0123456789abcdef", r) {
			return false
		}
	}
	return true
}
