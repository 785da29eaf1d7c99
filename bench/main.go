// Command bench measures meshctl at scale and writes docs/BENCHMARKS.md: `make bench`.
//
// It builds the test binaries of model, render, plan and reconcile, runs every scale
// benchmark (the *_bench_test.go files) once per mesh size, each in a process of its own so
// that the peak RSS the kernel reports for that process is the stage's, and writes what it
// measured with the machine it ran on: tables, the bounds the product holds itself to, and the raw
// lines in the standard `go test -bench` format that benchstat reads.
//
// It also measures what a user waits for (wait.go): the built meshctl binary run as a user
// runs it, one-shot and with `meshctl watch` serving the bus, each row run -runs times and
// interleaved with the bare-client floor it is compared with; and the converged rows and one
// change again on an external nats-server with the store on the bus (external.go), compared
// with the embedded bus's. In operator mode (`bus.auth: jwt`) it measures what a push of the
// mesh's account JWT costs the servers of a three-server cluster (push.go).
//
//	go run ./bench -out docs/BENCHMARKS.md            # everything, on a quiet machine
//	go run ./bench -out - -sizes 500 -live-sizes 500  # a quick look, on stdout
//	go run ./bench -out - -sizes none -live-sizes none -restart-sizes none -wait-sizes 200 -external-sizes 200 -runs 3 -push-revocations none
//	                                                  # the user-wait rows alone, small
//	go run ./bench -out - -sizes none -live-sizes none -restart-sizes none -wait-sizes none -external-sizes none -converged-sizes none -connected-sizes none
//	                                                  # the operator-mode push rows alone
//	go run ./bench -out - -sizes none -live-sizes none -restart-sizes none -wait-sizes none -external-sizes none -converged-sizes none -push-revocations none -connected-auth jwt -connected-sizes 200 -runs 1
//	                                                  # the operator-mode connected rows alone, small
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

// run is the bench command: it parses args and either plays an internal part (the load
// process, a floor), writes a generated mesh, or measures and writes the report.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if f.loadFile != "" {
		return runLoad(ctx, f.loadFile, os.Stdin, stdout)
	}
	if f.floor.kind != "" {
		return runFloor(ctx, f.floor, os.Stdin, stdout)
	}
	if f.gen != "" {
		return writeGenerated(f.gen, f.instances, stderr)
	}
	plan, err := f.plan()
	if err != nil {
		return err
	}
	return measureAndReport(ctx, plan, f.out, stdout, stderr)
}

// benchFlags is bench's command line, as given.
type benchFlags struct {
	out            string
	sizes          string
	liveSizes      string
	restartSizes   string
	gen            string
	instances      int
	waitSizes      string
	externalSizes  string
	convergedSizes string
	connectedSizes string
	connectedAuth  string
	pushRevoked    string
	pushConnected  string
	pushes         int
	loadFile       string
	runs           int
	floor          floorArgs
}

// parseFlags reads bench's command line, printing usage and errors to stderr.
func parseFlags(args []string, stderr io.Writer) (benchFlags, error) {
	var f benchFlags
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.out, "out", "docs/BENCHMARKS.md", "where to write the report; - for stdout")
	fs.StringVar(&f.sizes, "sizes", joinInts(meshgen.Sizes), "module instances to measure the local stages at")
	fs.StringVar(&f.liveSizes, "live-sizes", joinInts(meshgen.Sizes), "module instances to measure against an embedded bus at")
	fs.StringVar(&f.restartSizes, "restart-sizes", "500,5000", "module instances to stop and start the embedded bus at (about 10 ms per consumer to stop); larger sizes are extrapolated")
	fs.StringVar(&f.gen, "gen", "", "write a generated mesh as YAML into this directory and exit")
	fs.IntVar(&f.instances, "instances", 5000, "with -gen: module instances (nodes and seats scale with them)")
	fs.StringVar(&f.waitSizes, "wait-sizes", "5000", "module instances to measure what a user waits for at (whole meshctl processes; any size); none to skip")
	fs.StringVar(&f.externalSizes, "external-sizes", "5000", "module instances to measure the converged apply and one change on an external nats-server at, the store on the bus (whole meshctl processes; any size); none to skip")
	fs.StringVar(&f.convergedSizes, "converged-sizes", "20000", "module instances to measure only the converged diff, apply and one change at, watch serving (whole meshctl processes; any size; its first apply is setup, not measured); none to skip")
	fs.StringVar(&f.connectedSizes, "connected-sizes", "2000,5000", "module instances to measure with every host connected at, one connection per instance (whole meshctl processes; any size); none to skip")
	fs.StringVar(&f.connectedAuth, "connected-auth", "password,nkey,jwt", "the kinds of principal (bus.auth) the connected rows measure; jwt on a three-server operator-mode cluster of its own per size")
	fs.StringVar(&f.pushRevoked, "push-revocations", "0,1000,10000", "revocation-list sizes to measure a push of the account JWT at, on a three-server operator-mode cluster (bus.auth: jwt); none to skip")
	fs.StringVar(&f.pushConnected, "push-connected", "3,2000", "users of the account connected during the pushes, spread over the three servers (at least one each)")
	fs.IntVar(&f.pushes, "pushes", 10, "pushes of each batch of the push rows (-runs batches each; the servers' CPU is read around each)")
	fs.StringVar(&f.loadFile, "load", "", "internal: be the connected rows' hosts, one connection per membership in this file")
	fs.IntVar(&f.runs, "runs", 5, "runs of each user-wait row (the median and the spread are reported)")
	fs.StringVar(&f.floor.kind, "floor", "", "internal: run one bare-client floor (create or list) and print its time as JSON")
	fs.StringVar(&f.floor.mesh, "floor-mesh", "", "internal: with -floor create, the description")
	fs.StringVar(&f.floor.dir, "floor-dir", "", "internal: with -floor create, the store of its bus")
	fs.StringVar(&f.floor.url, "floor-url", "", "internal: with -floor list, the bus")
	fs.StringVar(&f.floor.passwordFile, "floor-password", "", "internal: with -floor list, the controller's password file")
	fs.StringVar(&f.floor.fingerprint, "floor-fingerprint", "", "internal: with -floor list, the pin of an external server's certificate")
	return f, fs.Parse(args)
}

// writeGenerated writes the mesh of the given module instances as YAML into dir.
func writeGenerated(dir string, instances int, stderr io.Writer) error {
	g := meshgen.Scaled(instances)
	if err := g.Write(dir); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote a mesh of %d nodes, %d module instances and %d seats to %s\n", g.Nodes, g.Instances, g.Seats, dir)
	return nil
}

// plan is the sizes, kinds of principal and runs the flags ask for, checked: the local and
// embedded-bus stages only run at the sizes the benchmarks define.
func (f benchFlags) plan() (runPlan, error) {
	var plan runPlan
	for _, s := range []struct {
		flag, value string
		into        *[]int
	}{
		{"-sizes", f.sizes, &plan.sizes},
		{"-live-sizes", f.liveSizes, &plan.live},
		{"-restart-sizes", f.restartSizes, &plan.restart},
		{"-wait-sizes", f.waitSizes, &plan.wait},
		{"-external-sizes", f.externalSizes, &plan.external},
		{"-converged-sizes", f.convergedSizes, &plan.converged},
		{"-connected-sizes", f.connectedSizes, &plan.connected},
		{"-push-revocations", f.pushRevoked, &plan.push.revocations},
		{"-push-connected", f.pushConnected, &plan.push.connected},
	} {
		var err error
		if *s.into, err = parseInts(s.value); err != nil {
			return runPlan{}, fmt.Errorf("%s: %w", s.flag, err)
		}
	}
	for _, a := range strings.Split(f.connectedAuth, ",") {
		switch a = strings.TrimSpace(a); a {
		case "password", "nkey", "jwt":
			plan.auths = append(plan.auths, a)
		case "":
		default:
			return runPlan{}, fmt.Errorf("-connected-auth: %q is not password, nkey or jwt", a)
		}
	}
	if f.runs < 1 {
		return runPlan{}, fmt.Errorf("-runs %d: at least one", f.runs)
	}
	plan.runs = f.runs
	if err := plan.push.check(f.pushes, f.runs); err != nil {
		return runPlan{}, err
	}
	for _, n := range append(append(append([]int{}, plan.sizes...), plan.live...), plan.restart...) {
		if !contains(meshgen.Sizes, n) {
			return runPlan{}, fmt.Errorf("size %d is not one the benchmarks define (%s)", n, joinInts(meshgen.Sizes))
		}
	}
	return plan, nil
}

// measureAndReport runs plan and writes the report to out, or stdout for "-", keeping every
// store the bench made until the report is written.
func measureAndReport(ctx context.Context, plan runPlan, out string, stdout, stderr io.Writer) error {
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
	if out != "-" {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	if err := rep.write(w); err != nil {
		return err
	}
	if out != "-" {
		fmt.Fprintf(stderr, "wrote %s\n", out)
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
