package main

import (
	"fmt"
	"io"
	"time"
)

// The bounds on the connected rows.
const (
	// With this many hosts connected, issuing one credential in an nkey mesh takes at most
	// issueNkeyShare of the same in a password mesh, and under issueNkeyBound.
	issueNkeyAt    = 2000
	issueNkeyShare = 1.0 / 3
	issueNkeyBound = 500 * time.Millisecond
	// With this many hosts of an nkey mesh connected, one change costs at most oneChangeSlack
	// over the converged apply, as it does with none.
	oneChangeNkeyAt = 5000
)

func (r *report) writeConnected(p *printer) {
	if len(r.connected) == 0 {
		return
	}
	p.f("## With the mesh's hosts connected\n\n")
	p.f("A mesh in production has its hosts connected: one connection per module instance. At each reload nats-server "+
		"re-checks every connected client against the new config — for a password user a bcrypt comparison, for an nkey "+
		"user a check of the signature it connected with — so every change meshctl makes live costs the server in proportion to its hosts. "+
		"Each mesh below runs with `watch` serving the embedded bus; a load process of its own joins every instance but "+
		"those of two nodes held aside (one issued and rotated, one enrolled by `meshctl agent`), each with its own "+
		"membership through the `host` package and holding one subscription. Every row runs %d times with the hosts "+
		"connected and %d times with none, the two interleaved. The server CPU is what the `watch` process serving the bus "+
		"spent while the row's process ran (utime + stime, /proc).\n\n", r.plan.runs, r.plan.runs)
	r.writeConnectedChecks(p)
	for _, c := range r.connected {
		p.f("### `bus.auth: %s`, %s module instances, %s hosts connected\n\n", c.auth, num(c.size), num(c.hosts))
		lo, hi := c.connect.spread()
		p.f("The %s hosts connected in %s (%s – %s); %d of them disconnected across every row.\n\n",
			num(c.hosts), duration(float64(c.connect.median())), duration(float64(lo)), duration(float64(hi)), c.disconnects)
		p.f("| | no host connected | %s hosts connected | added | server CPU, no host | server CPU, %s hosts | peak RSS |\n|---|---:|---:|---:|---:|---:|---:|\n",
			num(c.hosts), num(c.hosts))
		for _, row := range connectedRows {
			none, hosts := c.rows[row.id+"/none"], c.rows[row.id+"/hosts"]
			if none == nil || hosts == nil {
				continue
			}
			added := hosts.median() - none.median()
			sign := "+"
			if added < 0 {
				sign, added = "−", -added
			}
			p.f("| %s | %s | %s | %s%s | %s | %s | %s |\n", row.title, spreadCell(none), spreadCell(hosts), sign, duration(float64(added)),
				duration(float64(c.cpu[row.id+"/none"].median())), duration(float64(c.cpu[row.id+"/hosts"].median())),
				megabytes(max(none.peak(), hosts.peak())))
		}
		p.f("\n")
	}
}

func spreadCell(s *series) string {
	lo, hi := s.spread()
	return fmt.Sprintf("%s (%s – %s)", duration(float64(s.median())), duration(float64(lo)), duration(float64(hi)))
}

// connectedAt is the result of auth at size, or nil.
func (r *report) connectedAt(auth string, size int) *connectedResult {
	for _, c := range r.connected {
		if c.auth == auth && c.size == size {
			return c
		}
	}
	return nil
}

func (r *report) writeConnectedChecks(p *printer) {
	var lines []string
	pw, nk := r.connectedAt("password", issueNkeyAt), r.connectedAt("nkey", issueNkeyAt)
	if pw != nil && nk != nil {
		a, b := nk.rows["issue/hosts"].median(), pw.rows["issue/hosts"].median()
		ok := float64(a) <= issueNkeyShare*float64(b) && a < issueNkeyBound
		lines = append(lines, fmt.Sprintf("| `credentials issue` with %s hosts connected: nkey ≤ ⅓ of password and < %s | %s against %s (%.2f×) | %s |",
			num(issueNkeyAt), duration(float64(issueNkeyBound)), duration(float64(a)), duration(float64(b)), float64(a)/float64(b), verdict(ok)))
	}
	if nk := r.connectedAt("nkey", oneChangeNkeyAt); nk != nil {
		a, c := nk.rows["one-change/hosts"].median(), nk.rows["apply/hosts"].median()
		lines = append(lines, fmt.Sprintf("| one change with %s nkey hosts connected ≤ converged apply + %s | %s against %s (+%s) | %s |",
			num(nk.hosts), duration(float64(oneChangeSlack)), duration(float64(a)), duration(float64(c)), duration(float64(a-c)), verdict(a <= c+oneChangeSlack)))
	}
	for _, c := range r.connected {
		lines = append(lines, fmt.Sprintf("| no host disconnected: %s, %s hosts | %d disconnects | %s |", c.auth, num(c.hosts), c.disconnects, verdict(c.disconnects == 0)))
	}
	if len(lines) == 0 {
		return
	}
	p.f("| check | measured | |\n|---|---|---|\n")
	for _, l := range lines {
		p.f("%s\n", l)
	}
	p.f("\n")
}

// printConnected writes the connected medians as the harness finishes them, for the terminal.
func printConnected(w io.Writer, results []*connectedResult) {
	for _, c := range results {
		fmt.Fprintf(w, "with %s hosts connected, %s principals, %s instances (median with none / with the hosts; server CPU):\n", num(c.hosts), c.auth, num(c.size))
		for _, row := range connectedRows {
			none, hosts := c.rows[row.id+"/none"], c.rows[row.id+"/hosts"]
			if none == nil || hosts == nil {
				continue
			}
			fmt.Fprintf(w, "  %-12s %8s / %8s   CPU %8s / %8s\n", row.id, duration(float64(none.median())), duration(float64(hosts.median())),
				duration(float64(c.cpu[row.id+"/none"].median())), duration(float64(c.cpu[row.id+"/hosts"].median())))
		}
		fmt.Fprintf(w, "  %d disconnects\n", c.disconnects)
	}
}
