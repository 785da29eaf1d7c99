package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/explain"
	"github.com/meshbus/meshctl/internal/printable"
)

func init() {
	register("explain", command{summary: "explain the permission violations in a nats-server log in the description's terms", run: runExplain})
}

const explainHelp = `
Usage: meshctl explain [-f DIR] LOGFILE

Reads a nats-server log and explains, against the description in DIR, each distinct
permission violation in it ("Publish Violation - Subject …", "Subscription Violation - …"):
the user, what it was refused, how often, and the line of YAML that would grant it, or why
no declaration can (another principal's inbox, the JetStream API). It changes nothing.

'meshctl watch' does this itself for the embedded bus. For an external server, have it log to
a file (log_file in its config; violations are logged at its default level) and point this
command at it, or at what journalctl printed.

Example:
  meshctl explain -f mesh/ /var/log/nats-server.log
  journalctl -u nats-server --since -1h > /tmp/nats.log && meshctl explain -f mesh/ /tmp/nats.log
`

func runExplain(ctx context.Context, e *env, args []string) int {
	f := newFlags(e, "explain", explainHelp)
	dir := f.dirFlag()
	positional, done, code := f.parse(args)
	if done {
		return code
	}
	if len(positional) != 1 {
		e.errorf("give the server's log file: meshctl explain -f DIR LOGFILE")
		return exitError
	}
	m, code := loadDescription(ctx, e, *dir)
	if code != exitOK {
		return code
	}
	file, err := os.Open(positional[0])
	if err != nil {
		e.errorf("reading the server's log: %v", err)
		return exitError
	}
	defer file.Close()
	counts := map[bus.PermissionError]int{}
	var order []bus.PermissionError
	lines := bufio.NewScanner(file)
	lines.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for lines.Scan() {
		r, ok := bus.ParseServerViolation(lines.Text())
		if !ok {
			continue
		}
		if counts[r] == 0 {
			order = append(order, r)
		}
		counts[r]++
	}
	if err := lines.Err(); err != nil {
		e.errorf("reading the server's log %s: %v", positional[0], err)
		return exitError
	}
	if len(order) == 0 {
		fmt.Fprintf(e.stderr, "no permission violation in %s\n", positional[0])
		return exitOK
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	for _, r := range order {
		fmt.Fprintf(w, "%s\t%s\t%d time(s)\t%s\n", printable.Text(r.User), refused(r.Op, r.Subject, r.Queue), counts[r],
			printable.Text(explain.Refusal(m, r).Text))
	}
	_ = w.Flush()
	return exitOK
}
