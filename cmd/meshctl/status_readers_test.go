package main

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshbus/meshctl/state"
)

// status, diff and credentials list only read the store, and the store is in WAL mode, where
// a reader needs nothing a writer holds: they must work while another process (here a
// connection of its own, as watch's would be) holds the write lock, not wait 5s for it and
// exit 2 with "database is locked".
func TestReadersWorkWhileTheStoreIsBeingWritten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, stateDir := cliFixture(t)
	st, err := state.Open(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()

	db, err := sql.Open("sqlite", filepath.Join(stateDir, "meshctl.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	writer, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	if _, err := writer.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	if _, err := writer.ExecContext(ctx, `INSERT INTO applies (started, finished, user, host, git_commit, summary, outcome)
		VALUES ('', '', '', '', '', 'in progress', '')`); err != nil {
		t.Fatal(err)
	}
	defer writer.ExecContext(ctx, "ROLLBACK")

	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"status", "--state", stateDir}, exitOK},
		{[]string{"credentials", "list", "-f", dir, "--state", stateDir}, exitOK},
		{[]string{"diff", "-f", dir, "--state", stateDir}, exitChanges},
	} {
		code, _, stderr := meshctl(t, c.args...)
		if code != c.want || strings.Contains(stderr, "locked") {
			t.Errorf("meshctl %s while another process writes: exit %d, want %d\n%s", strings.Join(c.args, " "), code, c.want, stderr)
		}
	}
}
