package state

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Dead letters add up per consumer, each message once: one announced again, in the same batch
// or a later one, is neither counted nor returned as counted again. A store opened afresh reads
// the same counts.
func TestDeadLettersAreCountedOncePerMessage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	a := DeadLetter{Stream: "SEAT_MAILER", Consumer: "SEAT_MAILER_worker", StreamSeq: 7, Deliveries: 3, At: t0}
	b := DeadLetter{Stream: "SEAT_MAILER", Consumer: "SEAT_MAILER_worker", StreamSeq: 9, Deliveries: 3, At: t0.Add(time.Minute)}
	c := DeadLetter{Stream: "EVENTS", Consumer: "beta_postman", StreamSeq: 7, Deliveries: 5, At: t0.Add(2 * time.Minute)}

	counted, err := s.RecordDeadLetters(ctx, []DeadLetter{a, a, c})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]DeadLetter{a, c}, counted); diff != "" {
		t.Errorf("counted (-want +got):\n%s", diff)
	}
	again := a
	again.At = t0.Add(3 * time.Minute)
	if counted, err = s.RecordDeadLetters(ctx, []DeadLetter{again, b}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]DeadLetter{b}, counted); diff != "" {
		t.Errorf("counted (-want +got):\n%s", diff)
	}

	want := []ConsumerDeadLetters{
		{Stream: "EVENTS", Consumer: "beta_postman", Count: 1, FirstAt: c.At, LastAt: c.At, LastStreamSeq: 7, LastDeliveries: 5},
		{Stream: "SEAT_MAILER", Consumer: "SEAT_MAILER_worker", Count: 2, FirstAt: a.At, LastAt: b.At, LastStreamSeq: 9, LastDeliveries: 3},
	}
	got, err := s.DeadLetters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("dead letters (-want +got):\n%s", diff)
	}
	dir := s.Dir()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	got, err = openStore(t, dir).DeadLetters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("dead letters after reopening (-want +got):\n%s", diff)
	}
}

// The messages remembered for telling a repeat are bounded; the counts are not.
func TestDeadLetterMessagesAreBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	at := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	var letters []DeadLetter
	for i := range maxDeadLetterMessages + 10 {
		letters = append(letters, DeadLetter{Stream: "S", Consumer: "c", StreamSeq: uint64(i + 1), Deliveries: 2, At: at})
	}
	if _, err := s.RecordDeadLetters(ctx, letters); err != nil {
		t.Fatal(err)
	}
	var kept, oldest int64
	if err := s.db.QueryRow("SELECT count(*), min(stream_seq) FROM dead_letter_messages").Scan(&kept, &oldest); err != nil {
		t.Fatal(err)
	}
	if kept != maxDeadLetterMessages || oldest != 11 {
		t.Errorf("kept %d messages from %d; want %d from 11", kept, oldest, maxDeadLetterMessages)
	}
	got, err := s.DeadLetters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Count != maxDeadLetterMessages+10 {
		t.Errorf("dead letters: %+v", got)
	}
}
