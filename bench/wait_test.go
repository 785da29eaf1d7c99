package main

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/meshbus/meshctl/internal/testwait"
)

func TestSeriesMedianAndSpread(t *testing.T) {
	var s series
	for _, ms := range []int{30, 10, 20, 50, 40} {
		s.add(time.Duration(ms)*time.Millisecond, int64(ms))
	}
	if got := s.median(); got != 30*time.Millisecond {
		t.Errorf("median of five = %s; want 30ms", got)
	}
	s.add(60*time.Millisecond, 5)
	if got := s.median(); got != 35*time.Millisecond {
		t.Errorf("median of six = %s; want 35ms", got)
	}
	if lo, hi := s.spread(); lo != 10*time.Millisecond || hi != 60*time.Millisecond {
		t.Errorf("spread = %s – %s; want 10ms – 60ms", lo, hi)
	}
	if s.peak() != 50 {
		t.Errorf("peak = %d; want 50", s.peak())
	}
}

func TestSizesMayBeNone(t *testing.T) {
	for in, want := range map[string]int{"none": 0, "": 0, "200": 1, "500,5000": 2} {
		got, err := parseInts(in)
		if err != nil || len(got) != want {
			t.Errorf("parseInts(%q) = %v, %v; want %d sizes", in, got, err, want)
		}
	}
	if _, err := parseInts("many"); err == nil {
		t.Error(`parseInts("many") succeeded`)
	}
}

func TestCPUOfThisProcess(t *testing.T) {
	before := cpuOf(os.Getpid())
	// Spun until the count moves, not for a fixed time: /proc counts in ticks of 10 ms, and
	// on a loaded machine a spin of any length may be given less than one.
	testwait.Until(t, "this process's CPU time growing while it spins", func() error {
		for end, x := time.Now().Add(10*time.Millisecond), 0; time.Now().Before(end); x++ {
			_ = x * x
		}
		if after := cpuOf(os.Getpid()); after <= before {
			return fmt.Errorf("CPU %s; before the spin, %s", after, before)
		}
		return nil
	})
}
