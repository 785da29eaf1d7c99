package state

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// Refusals of one kind add up under one row, the newest first; the table keeps maxRefusals.
func TestRefusalsAddUpAndAreBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	r := Refusal{User: "two.shop", Op: "publish", Subject: "mesh.mod.telegram.tool.status", Advice: "module shop does not declare calls: [telegram/status]", Count: 1, FirstAt: t0, LastAt: t0}
	if err := s.RecordRefusal(ctx, r); err != nil {
		t.Fatal(err)
	}
	r.Count, r.FirstAt, r.LastAt = 3, t0.Add(time.Minute), t0.Add(time.Minute)
	if err := s.RecordRefusal(ctx, r); err != nil {
		t.Fatal(err)
	}
	got, err := s.Refusals(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Count != 4 || !got[0].FirstAt.Equal(t0) || !got[0].LastAt.Equal(t0.Add(time.Minute)) || got[0].Advice != r.Advice {
		t.Fatalf("got %+v", got)
	}
	for i := range maxRefusals + 5 {
		at := t0.Add(time.Hour + time.Duration(i)*time.Second)
		if err := s.RecordRefusal(ctx, Refusal{User: "two.audit", Op: "subscribe", Subject: fmt.Sprintf("x.%d", i), Count: 1, FirstAt: at, LastAt: at}); err != nil {
			t.Fatal(err)
		}
	}
	got, err = s.Refusals(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != maxRefusals || got[0].Subject != fmt.Sprintf("x.%d", maxRefusals+4) {
		t.Fatalf("kept %d, newest %+v", len(got), got[0])
	}
}

// Refusals of one rule add up under one row whatever their subjects, the row showing the
// latest subject: a client without its inbox prefix refuses a new subject per connection.
func TestRefusalsOfOneRuleShareARow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	for i := range 5 {
		at := t0.Add(time.Duration(i) * time.Second)
		r := Refusal{User: "two.audit", Op: "subscribe", Rule: "_INBOX.>", Subject: fmt.Sprintf("_INBOX.random%d.*", i),
			Advice: "inbox prefix not set", Count: 1, FirstAt: at, LastAt: at}
		if err := s.RecordRefusal(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Refusals(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Count != 5 || got[0].Rule != "_INBOX.>" || got[0].Subject != "_INBOX.random4.*" || !got[0].FirstAt.Equal(t0) {
		t.Fatalf("got %+v, want one row of 5 refusals, the last subject _INBOX.random4.*", got)
	}
}

// A store from before refusals had rules keeps its rows, each its own rule.
func TestRefusalsFromBeforeRulesAreKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := rawDB(t, filepath.Join(dir, dbFileName))
	for _, m := range migrations[:7] {
		if _, err := db.Exec(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`INSERT INTO refusals VALUES ('two.shop', 'publish', 'mesh.mod.telegram.tool.status', '',
		'module shop does not declare calls: [telegram/status]', 3, '2026-12-01T08:00:00.000000000Z', '2026-12-01T08:01:00.000000000Z')`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA user_version = 7"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, dir)
	r := Refusal{User: "two.shop", Op: "publish", Subject: "mesh.mod.telegram.tool.status", Count: 1,
		FirstAt: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), LastAt: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	if err := s.RecordRefusal(ctx, r); err != nil {
		t.Fatal(err)
	}
	got, err := s.Refusals(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Count != 4 || got[0].Rule != r.Subject || got[0].Subject != r.Subject {
		t.Fatalf("got %+v, want the row kept, its rule its subject, adding up", got)
	}
}
