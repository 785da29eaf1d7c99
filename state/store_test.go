package state

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// rawDB opens the database file at path with the driver alone, bypassing Open's checks: how the
// tests build the files that Open must migrate or refuse.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func userVersion(t *testing.T, db *sql.DB) int {
	t.Helper()
	var v int
	if err := db.QueryRow("PRAGMA user_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func tables(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

func TestOpenMigratesEmptyDir(t *testing.T) {
	t.Parallel()
	// Characters that mean something in a SQLite URI must not redirect the database elsewhere.
	dir := filepath.Join(t.TempDir(), "nested dir?mode=ro#%41", "state")
	s := openStore(t, dir)
	if s.Dir() != dir {
		t.Errorf("Dir() = %q, want %q", s.Dir(), dir)
	}
	if _, err := s.Mint(context.Background(), []string{"node.one"}, bcrypt.MinCost, "issue"); err != nil {
		t.Fatal(err)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 3 {
		t.Errorf("state directory holds %v (%v), want the database and its -wal and -shm", entries, err)
	}
	if got := userVersion(t, s.db); got != len(migrations) {
		t.Errorf("user_version = %d, want %d", got, len(migrations))
	}
	want := []string{"applies", "credentials", "dead_letter_messages", "dead_letters", "declarations", "declared_credentials", "enrolments", "holder_changes",
		"identity", "inventory_holders", "inventory_instances", "inventory_nodes", "inventory_seats", "jwt_revoked", "jwt_users", "refusals", "replica", "reports", "revocations"}
	if got := tables(t, s.db); !slices.Equal(got, want) {
		t.Errorf("tables = %v, want %v", got, want)
	}
	var mode string
	if err := s.db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q (%v), want wal", mode, err)
	}
	var fk, timeout int
	if err := s.db.QueryRow("PRAGMA foreign_keys").Scan(&fk); err != nil || fk != 1 {
		t.Errorf("foreign_keys = %d (%v), want 1", fk, err)
	}
	if err := s.db.QueryRow("PRAGMA busy_timeout").Scan(&timeout); err != nil || timeout != 5000 {
		t.Errorf("busy_timeout = %d (%v), want 5000", timeout, err)
	}
}

func TestOpenMigratesVersion1(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, dbFileName)

	// A store as the first release of meshctl left it: migration 1 only, with data.
	db := rawDB(t, path)
	if _, err := db.Exec(migrations[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA user_version = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO credentials VALUES ('node.one', '$2a$04$hash', '2024-01-02T03:04:05.000000000Z', 'issue')`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO applies (started, finished, user, host, git_commit, summary, outcome)
		VALUES ('2024-01-02T03:04:05.000000000Z', '2024-01-02T03:04:06.000000000Z', 'ops', 'ctl', 'abc', '1 created', 'applied')`); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s := openStore(t, dir)
	if got := userVersion(t, s.db); got != len(migrations) {
		t.Fatalf("user_version after migrating = %d, want %d", got, len(migrations))
	}
	creds, err := s.Credentials(ctx)
	if err != nil || len(creds) != 1 || creds[0].Principal != "node.one" || creds[0].Operation != "issue" {
		t.Errorf("Credentials after migrating = %+v, %v; want node.one's row kept", creds, err)
	}
	history, err := s.History(ctx, 0)
	if err != nil || len(history) != 1 || history[0].Summary != "1 created" {
		t.Errorf("History after migrating = %+v, %v; want the v1 apply kept", history, err)
	}
	inv := Inventory{Nodes: []string{"one"}, Instances: []Instance{{"one", "telegram"}}, Seats: []string{"telegram-sender"},
		Holders: []Holder{{"telegram-sender", "one", "telegram"}}}
	if err := s.SaveInventory(ctx, inv, history[0].ID); err != nil {
		t.Errorf("SaveInventory on the migrated store: %v", err)
	}
	// The file SQLite created for the test with its default mode is tightened by Open.
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != fileMode {
		t.Errorf("mode of the migrated database = %v (%v), want %v", fi.Mode().Perm(), err, fileMode)
	}
}

func TestReopenKeepsDataAndVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Mint(ctx, []string{"node.one"}, bcrypt.MinCost, "issue"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir)
	hashes, err := s.Hashes(ctx)
	if err != nil || len(hashes) != 1 {
		t.Errorf("Hashes after reopening = %v, %v; want node.one's", hashes, err)
	}
	if got := userVersion(t, s.db); got != len(migrations) {
		t.Errorf("user_version after reopening = %d, want %d", got, len(migrations))
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, dbFileName)
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db := rawDB(t, path)
	if _, err := db.Exec("PRAGMA user_version = 999"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	_, err = Open(dir)
	if !errors.Is(err, ErrNewerSchema) {
		t.Fatalf("Open = %v, want ErrNewerSchema", err)
	}
	for _, want := range []string{"999", fmt.Sprint(len(migrations)), "upgrade meshctl", path} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if after, err := os.ReadFile(path); err != nil || !bytes.Equal(before, after) {
		t.Errorf("Open modified the newer store (%v)", err)
	}
}

func TestOpenRefusesCorruptFiles(t *testing.T) {
	t.Parallel()
	validStore := func(t *testing.T) []byte {
		dir := t.TempDir()
		s, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Mint(context.Background(), []string{"node.one", "node.two"}, bcrypt.MinCost, "issue"); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(dir, dbFileName))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	tests := map[string]func(t *testing.T) []byte{
		"garbage": func(*testing.T) []byte {
			return []byte("this is not a database, it is a note an operator saved in the wrong place\n")
		},
		"short": func(*testing.T) []byte { return []byte("SQLite") },
		"damaged pages": func(t *testing.T) []byte {
			// A real header over pages of garbage: only SQLite itself can tell.
			data := validStore(t)
			for i := 100; i < len(data); i++ {
				data[i] = 0xA5
			}
			return data
		},
		"damaged table": func(t *testing.T) []byte {
			// The schema page intact, a table's page not: what quick_check is for.
			data := validStore(t)
			if len(data) < 3*4096 {
				t.Fatalf("the store is only %d bytes", len(data))
			}
			for i := 4096; i < 2*4096; i++ {
				data[i] = 0xA5
			}
			return data
		},
	}
	for name, content := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, dbFileName)
			data := content(t)
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Open(dir)
			if err == nil {
				s.Close()
				t.Fatal("Open accepted a corrupt file")
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("Open = %v, want ErrCorrupt", err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name %s", err, path)
			}
			after, rerr := os.ReadFile(path)
			if rerr != nil || !bytes.Equal(data, after) {
				t.Errorf("Open changed the corrupt file (%v)", rerr)
			}
		})
	}
}

func TestFileModes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state")
	s := openStore(t, dir)
	if _, err := s.ControllerPassword(ctx, bcrypt.MinCost); err != nil {
		t.Fatal(err)
	}
	l, err := AcquireLock(ctx, dir, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	modes, err := fileModes(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkPrivateModes(t, modes)
}

func TestFileModesUnderPermissiveUmask(t *testing.T) {
	t.Parallel()
	// The umask is per process, so a child process sets it to 0, where every file created with
	// a default mode would be world-readable.
	dir := filepath.Join(t.TempDir(), "state")
	cmd := helperCommand(t, "umask", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, stderr.Bytes())
	}
	var modes map[string]fs.FileMode
	if err := json.Unmarshal(out, &modes); err != nil {
		t.Fatalf("helper output %q: %v", out, err)
	}
	checkPrivateModes(t, modes)
}

func TestTwoStoresWriteConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	stores := []*Store{openStore(t, dir), openStore(t, dir)}
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 20 {
		s := stores[i%2]
		wg.Go(func() {
			if _, err := s.RecordApply(ctx, ApplyRecord{Summary: fmt.Sprint(i)}); err != nil {
				errs <- err
			}
			if _, err := s.Mint(ctx, []string{fmt.Sprintf("node.%d", i)}, bcrypt.MinCost, "issue"); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	history, err := stores[0].History(ctx, 0)
	if err != nil || len(history) != 20 {
		t.Errorf("History = %d records (%v), want 20", len(history), err)
	}
	hashes, err := stores[1].Hashes(ctx)
	if err != nil || len(hashes) != 20 {
		t.Errorf("Hashes = %d (%v), want 20", len(hashes), err)
	}
}
