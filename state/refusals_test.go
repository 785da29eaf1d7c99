package state

import (
	"context"
	"fmt"
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
