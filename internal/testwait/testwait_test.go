package testwait

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// failures is a testing.TB that records Fatalf instead of failing the test running it.
type failures struct {
	testing.TB
	said string
}

func (f *failures) Fatalf(format string, args ...any) {
	f.said = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls until on a TB of its own, on a goroutine of its own (Fatalf ends it), and returns
// what it failed with, empty when the wait ended.
func run[C Condition](t *testing.T, limit time.Duration, what string, cond C) string {
	f := &failures{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		until(f, limit, what, cond)
	}()
	<-done
	return f.said
}

func TestUntilEndsOnceTheConditionHolds(t *testing.T) {
	t.Parallel()
	asked := 0
	if said := run(t, Limit, "the third ask", func() bool { asked++; return asked == 3 }); said != "" || asked != 3 {
		t.Errorf("a condition holding at the third ask: failed %q after %d asks", said, asked)
	}
	asked = 0
	if said := run(t, Limit, "the second ask", func() error {
		if asked++; asked < 2 {
			return errors.New("not yet")
		}
		return nil
	}); said != "" || asked != 2 {
		t.Errorf("a condition holding at the second ask: failed %q after %d asks", said, asked)
	}
}

func TestUntilFailsNamingWhatAndWhy(t *testing.T) {
	t.Parallel()
	said := run(t, 50*time.Millisecond, "the file", func() error { return errors.New("no such file") })
	if !strings.Contains(said, "waiting for the file") || !strings.Contains(said, "no such file") {
		t.Errorf("a condition that never holds failed with %q; want what it waited for and why", said)
	}
	said = run(t, 50*time.Millisecond, "the count", func() bool { return false })
	if !strings.Contains(said, "waiting for the count") {
		t.Errorf("a condition that never holds failed with %q; want what it waited for", said)
	}
}
