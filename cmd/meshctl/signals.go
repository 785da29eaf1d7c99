package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// stopGrace is how long a command has, after SIGINT or SIGTERM cancelled its context, to
// stop at a safe point and say what it did. A command still running after this (a read
// blocked in the kernel, work that does not check its context) is abandoned, so that the
// process always exits within a second.
const stopGrace = 900 * time.Millisecond

// runWithSignals runs the command in args with a context that SIGINT and SIGTERM cancel.
func runWithSignals(args []string, stdout, stderr io.Writer) int {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	name := "meshctl"
	if len(args) > 0 {
		name = args[0]
	}
	return runInterruptible(name, commands[name].stopsCleanly, stderr, sigs, stopGrace,
		func(ctx context.Context) int { return run(ctx, args, stdout, stderr) })
}

// runInterruptible runs fn, the command name, with a context the first of sigs cancels.
//
// A command that then returns early exits exitInterrupted, having said what it did; one
// still running after grace is abandoned, with a line saying so. A command that stops
// cleanly (watch) is the exception: stopping is how it ends, and it stops the embedded bus
// it serves cleanly however long that takes (it says so when that is long); a second
// signal abandons it too.
func runInterruptible(name string, stopsCleanly bool, stderr io.Writer, sigs <-chan os.Signal, grace time.Duration, fn func(context.Context) int) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- fn(ctx) }()

	var sig os.Signal
	select {
	case code := <-done:
		return code
	case sig = <-sigs:
	}
	cancel()
	var deadline <-chan time.Time
	if !stopsCleanly {
		deadline = time.After(grace)
	}
	select {
	case code := <-done:
		if code == exitOK {
			return exitOK // stopped as it should (watch), or finished just as the signal came
		}
		fmt.Fprintf(stderr, "meshctl: %s: %s stopped before it finished\n", signalName(sig), name)
	case <-deadline:
		fmt.Fprintf(stderr, "meshctl: %s: %s did not stop within %s and is abandoned (what it did is said above)\n", signalName(sig), name, grace)
	case sig = <-sigs:
		fmt.Fprintf(stderr, "meshctl: %s again: %s abandoned before it stopped cleanly\n", signalName(sig), name)
	}
	return exitInterrupted
}

func signalName(s os.Signal) string {
	switch s {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}
