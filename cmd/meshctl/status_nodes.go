package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/meshbus/meshctl/controller"
)

// printNodes writes the live mesh's nodes as the controller recorded them: enrolled or not, the
// generation declared and the one reported, and what the last report could not apply.
func printNodes(out io.Writer, nodes []controller.NodeStatus) {
	if len(nodes) == 0 {
		return
	}
	fmt.Fprintln(out, "\nNodes:")
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  NODE\tENROLLED\tDECLARED\tREPORTED\tLAST REPORT\tSTATE")
	for _, n := range nodes {
		enrolled, last, state := "no", "-", "not enrolled"
		if n.Enrolled {
			enrolled = n.EnrolledAt.Local().Format(time.DateTime)
			state = "converging"
		}
		if !n.ReportedAt.IsZero() {
			last = n.ReportedAt.Local().Format(time.DateTime)
		}
		switch {
		case n.Converged():
			state = "at the declared generation"
		case len(n.Failed) > 0:
			state = fmt.Sprintf("%d instance(s) not applied", len(n.Failed))
		}
		fmt.Fprintf(w, "  %s\t%s\t%d\t%d\t%s\t%s\n", n.Node, enrolled, n.Declared, n.Reported, last, state)
	}
	_ = w.Flush()
}
