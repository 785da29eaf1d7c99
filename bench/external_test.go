package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// The embedded rows and the external server's rows of one size land in one result, kept in
// order of size.
func TestWaitAtKeepsOneResultPerSizeInOrder(t *testing.T) {
	var waits []*waitResult
	for _, n := range []int{5000, 500, 20000, 5000, 500} {
		waitAt(&waits, n).row(wApply).add(time.Millisecond, 0)
	}
	var sizes []int
	for _, w := range waits {
		sizes = append(sizes, w.size)
	}
	if len(sizes) != 3 || sizes[0] != 500 || sizes[1] != 5000 || sizes[2] != 20000 {
		t.Fatalf("sizes %v; want [500 5000 20000]", sizes)
	}
	if got := len(waits[1].rows[wApply].times); got != 2 {
		t.Errorf("%d runs at 5,000; want 2", got)
	}
}

// The external server's table compares each row with the embedded bus's and holds the
// converged apply and one change to 10% above it.
func TestTheExternalRowsAreHeldToTheEmbeddedOnes(t *testing.T) {
	w := &waitResult{size: referenceSize, rows: map[string]*series{}}
	for id, ms := range map[string]int{wApply: 300, wOneChange: 600, wExtApply: 320, wExtOneChange: 700} {
		w.row(id).add(time.Duration(ms)*time.Millisecond, 1e8)
	}
	r := &report{plan: runPlan{runs: 1}, waits: []*waitResult{w}}
	var b bytes.Buffer
	r.writeWaits(&printer{w: &b})
	out := b.String()
	_, external, ok := strings.Cut(out, "On an external nats-server")
	if !ok {
		t.Fatalf("no table of the external server:\n%s", out)
	}
	for _, want := range []string{
		"| converged apply (nothing to change: no mutating call; the apply lock taken on the bus) | 320 ms | 320 ms – 320 ms | 100 MB | converged apply (300 ms) | 1.07× | ≤ 1.1× at 5,000 | yes |",
		"| one change: one module follows one more event (and back) | 700 ms | 700 ms – 700 ms | 100 MB | one change (600 ms) | 1.17× | ≤ 1.1× at 5,000 | **no** |",
	} {
		if !strings.Contains(external, want) {
			t.Errorf("the external table lacks\n%s\nin\n%s", want, external)
		}
	}
}

// A harnessTB's Fatalf panics with its message, which startServer returns as its error, and
// close runs the cleanups registered, the last first.
func TestAHarnessFatalRunsTheCleanupsAndPanicsWithItsMessage(t *testing.T) {
	tb := &harnessTB{dir: t.TempDir()}
	var ran []int
	tb.Cleanup(func() { ran = append(ran, 1) })
	tb.Cleanup(func() { ran = append(ran, 2) })
	func() {
		defer func() {
			if f, ok := recover().(harnessFatal); !ok || string(f) != "no server: 3" {
				t.Errorf("Fatalf panicked with %v; want the harnessFatal \"no server: 3\"", f)
			}
		}()
		tb.Fatalf("no server: %d", 3)
	}()
	tb.close()
	if len(ran) != 2 || ran[0] != 2 || ran[1] != 1 {
		t.Errorf("cleanups ran %v; want [2 1]", ran)
	}
}
