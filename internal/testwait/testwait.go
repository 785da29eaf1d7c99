// Package testwait is how a test waits for something it can only ask about — a file appearing,
// a server in another process taking a reload, a log line, a count reached — where there is
// nothing to block on. It asks again at a growing interval (internal/backoff) and gives up only
// after Limit: a failsafe against a hang, not a measurement. A wait ends as soon as its
// condition holds, so a loaded machine makes a test slower, never red. For the same reason a
// test's context deadline is made once the test runs, after its t.Parallel(), never by a
// parent for its parallel subtests: a test of this package holds every test file to that.
//
// It is test support, for tests and the test-support packages (bus/bustest, host/hosttest);
// meshctl's binary does not link it. It imports nothing of meshctl but internal/backoff, so
// every package's tests can use it without an import cycle, and not the testing package, so
// the benchmark driver, which starts bustest's servers outside a test, may link it.
package testwait

import (
	"context"
	"errors"
	"time"

	"github.com/meshbus/meshctl/internal/backoff"
)

// Limit is how long Until asks before it fails the test. Generous on purpose: it only bounds a
// wait that would never end, and two busy cores under the race detector are slow.
const Limit = time.Minute

// Condition is what Until asks: whether something holds, or why it does not yet (nil once it
// does). A reason is worth giving where there is one: it is what the failure says.
type Condition interface {
	func() bool | func() error
}

// TB is the part of testing.TB a wait needs, which bustest's testnats.TB has too.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Until asks cond until it holds, and fails t once Limit has passed, naming what it waited for
// and why cond did not hold the last time it was asked. cond runs on the calling goroutine, so
// it may fail the test itself when the wait can no longer succeed (a process that exited).
func Until[C Condition](t TB, what string, cond C) {
	t.Helper()
	until(t, Limit, what, cond)
}

// errNotYet is why a func() bool condition does not hold: it says no more.
var errNotYet = errors.New("the condition does not hold")

func until[C Condition](t TB, limit time.Duration, what string, cond C) {
	t.Helper()
	ask := func() error {
		switch c := any(cond).(type) {
		case func() error:
			return c()
		case func() bool:
			if c() {
				return nil
			}
		}
		return errNotYet
	}
	deadline := time.Now().Add(limit)
	interval := backoff.Backoff{Min: 5 * time.Millisecond, Max: 100 * time.Millisecond}
	for {
		err := ask()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not within %s: %v", what, limit, err)
		}
		backoff.Sleep(context.Background(), interval.Next())
	}
}
