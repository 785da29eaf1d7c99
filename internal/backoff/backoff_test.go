package backoff

import (
	"context"
	"slices"
	"testing"
	"time"
)

func TestNextDoublesFromMinToMax(t *testing.T) {
	b := Backoff{Min: 100 * time.Millisecond, Max: time.Second}
	var got []time.Duration
	for range 6 {
		got = append(got, b.Next())
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}
	if !slices.Equal(got, want) {
		t.Errorf("waits %v; want %v", got, want)
	}
	b.Reset()
	if d := b.Next(); d != 100*time.Millisecond {
		t.Errorf("after Reset the wait is %s; want the minimum", d)
	}
}

func TestAfterCountsFailures(t *testing.T) {
	for failures, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 5: 16 * time.Second, 6: 30 * time.Second, 60: 30 * time.Second, 0: time.Second} {
		if got := After(time.Second, 30*time.Second, failures); got != want {
			t.Errorf("After(1s, 30s, %d) = %s; want %s", failures, got, want)
		}
	}
}

func TestRetryStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	tries := 0
	done := Retry(ctx, Backoff{Min: time.Millisecond, Max: time.Millisecond}, func() bool {
		tries++
		if tries == 3 {
			cancel()
		}
		return false
	})
	if done || tries != 3 {
		t.Errorf("Retry with its context ended: done %v after %d tries; want false after 3", done, tries)
	}
	if !Retry(context.Background(), Backoff{Min: time.Millisecond, Max: time.Millisecond}, func() bool { tries++; return tries > 5 }) {
		t.Error("Retry did not report an attempt that succeeded")
	}
}
