// Package backoff is the one capped, doubling wait between attempts of something that keeps
// failing — joining a bus that is down, binding a consumer the server cannot answer yet, a
// reconcile or a declaration that failed — shared by the agent, the controller and watch.
// A bus restarting or reloading answers within moments; one that stays away is asked every
// few seconds, not hammered.
//
// It owns no goroutine and no clock but the timer of Sleep; it logs nothing.
package backoff

import (
	"context"
	"time"
)

// Backoff is the wait before each attempt of a series that keeps failing: Min after the
// first failure, twice as long after each next one, never more than Max. The zero value of
// the series is its start; a Backoff is used by one goroutine.
type Backoff struct {
	Min, Max time.Duration
	last     time.Duration
}

// Next is the wait before the next attempt.
func (b *Backoff) Next() time.Duration {
	b.last = min(max(2*b.last, b.Min), b.Max)
	return b.last
}

// Reset starts a new series: what failed now is a new failure, not the same one again.
func (b *Backoff) Reset() { b.last = 0 }

// After is the wait after the failures-th failure in a row (from 1): lo, doubled for each
// failure after the first, capped at hi. It is Next for a caller that counts its failures.
func After(lo, hi time.Duration, failures int) time.Duration {
	d := lo
	for i := 1; i < failures && d < hi; i++ {
		d *= 2
	}
	return min(d, hi)
}

// Sleep waits d, and reports false if ctx ended first.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Retry calls attempt until it reports done or ctx ends, waiting as b says between attempts.
// It reports whether attempt succeeded.
func Retry(ctx context.Context, b Backoff, attempt func() (done bool)) bool {
	for {
		if attempt() {
			return true
		}
		if !Sleep(ctx, b.Next()) {
			return false
		}
	}
}
