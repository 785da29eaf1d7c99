package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/explain"
	"github.com/meshbus/meshctl/internal/printable"
)

func init() {
	register("explain", command{summary: "explain the permission violations in a nats-server log in the description's terms", run: runExplain})
}

const explainHelp = `
Usage: meshctl explain [-f DIR] [--state DIR] LOGFILE|-

Reads a nats-server log and explains, against the description in DIR, each kind of
permission violation in it ("Publish Violation - Subject …", "Subscription Violation - …"):
the user, what it was refused, how often, and the lines of YAML that would grant it, each
checked to validate, or why no declaration can (another principal's inbox, the JetStream
API). A kind is a user, an operation and the subjects of one rule: a client whose inbox
prefix is not set, refused a new random inbox on every connection, is one. It changes nothing.

'meshctl watch' does this itself for the embedded bus. For an external server, have it log to
a file (log_file in its config; violations are logged at its default level) and point this
command at it, or pipe the log in with - for LOGFILE.

With bus.auth: nkey the server names a host by its public key; the state store (--state)
names it by its principal. A key the store does not hold is shown as nkey:U….

Example:
  meshctl explain -f mesh/ /var/log/nats-server.log
  journalctl -u nats-server --since -1h | meshctl explain -f mesh/ -
  kubectl logs statefulset/nats -c nats | meshctl explain -f mesh/ -
`

func runExplain(ctx context.Context, e *env, args []string) int {
	f := newFlags(e, "explain", explainHelp)
	dir := f.dirFlag()
	sf := f.stateFlag()
	positional, done, code := f.parse(args)
	if done {
		return code
	}
	if len(positional) != 1 {
		e.errorf("give the server's log file, or - to read it from standard input: meshctl explain -f DIR LOGFILE")
		return exitError
	}
	m, code := loadDescription(ctx, e, *dir)
	if code != exitOK {
		return code
	}
	log, where, in := e.stdin, "standard input", "on standard input"
	if positional[0] != "-" {
		file, err := os.Open(positional[0])
		if err != nil {
			e.errorf("reading the server's log: %v", err)
			return exitError
		}
		defer file.Close()
		log, where, in = file, positional[0], "in "+positional[0]
	}
	var principals bus.Principals
	if st, err := sf.openExisting(); err == nil {
		defer st.Close()
		principals = st.NkeyPrincipals()
	} else if m.Bus.Nkeys() {
		fmt.Fprintf(e.stderr, "the state store is not at hand to name the hosts, which log in with nkeys (%v): each is shown by its public key\n", err)
	}
	// One line per group, as watch logs them: a client without its inbox prefix is refused a
	// new inbox on every connection, and is one mistake.
	counts := map[explain.Group]int{}
	latest := map[explain.Group]busclient.PermissionError{}
	var order []explain.Group
	lines := bufio.NewScanner(log)
	lines.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for lines.Scan() {
		r, ok := bus.ParseServerViolation(lines.Text(), principals)
		if !ok {
			continue
		}
		g := explain.GroupOf(r)
		if counts[g] == 0 {
			order = append(order, g)
		}
		counts[g]++
		latest[g] = r
	}
	if err := lines.Err(); err != nil {
		e.errorf("reading the server's log from %s: %v", where, err)
		return exitError
	}
	if len(order) == 0 {
		fmt.Fprintf(e.stderr, "no permission violation %s\n", in)
		return exitOK
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	for _, g := range order {
		r := latest[g]
		fmt.Fprintf(w, "%s\t%s\t%d time(s)\t%s\n", printable.Text(r.User), refused(r.Op, g.Rule, r.Subject, r.Queue), counts[g],
			printable.Text(explain.Refusal(m, r).Text))
	}
	_ = w.Flush()
	return exitOK
}
