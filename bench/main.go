// Command bench measures meshctl at scale and writes docs/BENCHMARKS.md: `make bench`.
//
// It builds the test binaries of model, render, plan and reconcile, runs every scale
// benchmark (the *_bench_test.go files) once per mesh size, each in a process of its own so
// that the peak RSS the kernel reports for that process is the stage's, and writes what it
// measured with the machine it ran on: tables, the checks issue 8 asks for, and the raw
// lines in the standard `go test -bench` format that benchstat reads.
//
// It also measures what a user waits for (wait.go): the built meshctl binary run as a user
// runs it, one-shot and with `meshctl watch` serving the bus, each row run -runs times and
// interleaved with the bare-client floor it is compared with; and the converged rows and one
// change again on an external nats-server with the store on the bus (external.go), compared
// with the embedded bus's.
//
//	go run ./bench -out docs/BENCHMARKS.md            # everything, on a quiet machine
//	go run ./bench -out - -sizes 500 -live-sizes 500  # a quick look, on stdout
//	go run ./bench -out - -sizes none -live-sizes none -restart-sizes none -wait-sizes 200 -external-sizes 200 -runs 3
//	                                                  # the user-wait rows alone, small
//	go run ./bench -gen /tmp/mesh -instances 5000     # write a generated mesh as YAML
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"github.com/meshbus/meshctl/bench/meshgen"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "docs/BENCHMARKS.md", "where to write the report; - for stdout")
	sizes := fs.String("sizes", joinInts(meshgen.Sizes), "module instances to measure the local stages at")
	liveSizes := fs.String("live-sizes", joinInts(meshgen.Sizes), "module instances to measure against an embedded bus at")
	restartSizes := fs.String("restart-sizes", "500,5000", "module instances to stop and start the embedded bus at (about 10 ms per consumer to stop); larger sizes are extrapolated")
	gen := fs.String("gen", "", "write a generated mesh as YAML into this directory and exit")
	instances := fs.Int("instances", 5000, "with -gen: module instances (nodes and seats scale with them)")
	waitSizes := fs.String("wait-sizes", "5000", "module instances to measure what a user waits for at (whole meshctl processes; any size); none to skip")
	externalSizes := fs.String("external-sizes", "5000", "module instances to measure the converged apply and one change on an external nats-server at, the store on the bus (whole meshctl processes; any size); none to skip")
	convergedSizes := fs.String("converged-sizes", "20000", "module instances to measure only the converged diff, apply and one change at, watch serving (whole meshctl processes; any size; its first apply is setup, not measured); none to skip")
	connectedSizes := fs.String("connected-sizes", "2000,5000", "module instances to measure with every host connected at, one connection per instance (whole meshctl processes; any size); none to skip")
	connectedAuth := fs.String("connected-auth", "password,nkey", "the kinds of principal (bus.auth) the connected rows measure")
	loadFile := fs.String("load", "", "internal: be the connected rows' hosts, one connection per membership in this file")
	runs := fs.Int("runs", 5, "runs of each user-wait row (the median and the spread are reported)")
	var fl floorArgs
	fs.StringVar(&fl.kind, "floor", "", "internal: run one bare-client floor (create or list) and print its time as JSON")
	fs.StringVar(&fl.mesh, "floor-mesh", "", "internal: with -floor create, the description")
	fs.StringVar(&fl.dir, "floor-dir", "", "internal: with -floor create, the store of its bus")
	fs.StringVar(&fl.url, "floor-url", "", "internal: with -floor list, the bus")
	fs.StringVar(&fl.passwordFile, "floor-password", "", "internal: with -floor list, the controller's password file")
	fs.StringVar(&fl.fingerprint, "floor-fingerprint", "", "internal: with -floor list, the pin of an external server's certificate")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *loadFile != "" {
		return runLoad(ctx, *loadFile, os.Stdin, stdout)
	}
	if fl.kind != "" {
		return runFloor(ctx, fl, os.Stdin, stdout)
	}
	if *gen != "" {
		g := meshgen.Scaled(*instances)
		if err := g.Write(*gen); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote a mesh of %d nodes, %d module instances and %d seats to %s\n", g.Nodes, g.Instances, g.Seats, *gen)
		return nil
	}
	plan := runPlan{}
	var err error
	if plan.sizes, err = parseInts(*sizes); err != nil {
		return fmt.Errorf("-sizes: %w", err)
	}
	if plan.live, err = parseInts(*liveSizes); err != nil {
		return fmt.Errorf("-live-sizes: %w", err)
	}
	if plan.restart, err = parseInts(*restartSizes); err != nil {
		return fmt.Errorf("-restart-sizes: %w", err)
	}
	if plan.wait, err = parseInts(*waitSizes); err != nil {
		return fmt.Errorf("-wait-sizes: %w", err)
	}
	if plan.external, err = parseInts(*externalSizes); err != nil {
		return fmt.Errorf("-external-sizes: %w", err)
	}
	if plan.converged, err = parseInts(*convergedSizes); err != nil {
		return fmt.Errorf("-converged-sizes: %w", err)
	}
	if plan.connected, err = parseInts(*connectedSizes); err != nil {
		return fmt.Errorf("-connected-sizes: %w", err)
	}
	for _, a := range strings.Split(*connectedAuth, ",") {
		switch a = strings.TrimSpace(a); a {
		case "password", "nkey":
			plan.auths = append(plan.auths, a)
		case "":
		default:
			return fmt.Errorf("-connected-auth: %q is neither password nor nkey", a)
		}
	}
	if *runs < 1 {
		return fmt.Errorf("-runs %d: at least one", *runs)
	}
	plan.runs = *runs
	for _, n := range append(append(append([]int{}, plan.sizes...), plan.live...), plan.restart...) {
		if !contains(meshgen.Sizes, n) {
			return fmt.Errorf("size %d is not one the benchmarks define (%s)", n, joinInts(meshgen.Sizes))
		}
	}

	tmp, err := os.MkdirTemp("", "meshctl-bench-")
	if err != nil {
		return err
	}
	// Every store the bench made is kept until the report is written (see spend): their
	// removal, gigabytes at 20,000 instances, takes minutes of its own.
	defer func() {
		fmt.Fprintf(stderr, "removing the bench's stores in %s\n", tmp)
		if err := os.RemoveAll(tmp); err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
		}
	}()
	rep, err := measure(ctx, plan, tmp, stderr)
	if err != nil {
		return err
	}
	var w io.Writer = stdout
	if *out != "-" {
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	if err := rep.write(w); err != nil {
		return err
	}
	if *out != "-" {
		fmt.Fprintf(stderr, "wrote %s\n", *out)
	}
	return nil
}

// parseInts reads a list of sizes; "none" (or nothing) is none.
func parseInts(s string) ([]int, error) {
	var out []int
	if strings.TrimSpace(s) == "none" {
		return nil, nil
	}
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func joinInts(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

func contains(ns []int, n int) bool {
	for _, x := range ns {
		if x == n {
			return true
		}
	}
	return false
}
