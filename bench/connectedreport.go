package main

import (
	"fmt"
	"io"
	"strings"
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
	if r.connectedJWT() {
		p.f("With `bus.auth: jwt` the bus is a JetStream cluster of three nats-server processes in operator mode, one per size " +
			"(the NATS resolver; the operator made by the nats CLI, the mesh's account `MESH` added with `nats auth account add`), " +
			"and no `watch` runs: nothing reloads, and every change is one push of the account's JWT, which each server applies and " +
			"re-checks every connected user of the account against. The hosts' credentials are minted as `credentials issue` mints " +
			"them and recorded in the store, each host joining from a membership file of its own (`host.JoinFile`, which reads it " +
			"again at each reconnect). The one change alters one instance's permissions: meshctl reissues its user JWT for the " +
			"same key and revokes the older ones, so its host is disconnected; the bench then writes the new JWT into its file, " +
			"as an operator hands a host its reissued credential, and the host logs in again. The server CPU is the three " +
			"servers' processes', between them. `credentials rotate` is `issue` in this mode, and enrolled nodes are not yet " +
			"served credentials in it, so those rows are not measured.\n\n")
	}
	r.writeConnectedChecks(p)
	for _, c := range r.connected {
		p.f("### `bus.auth: %s`, %s module instances, %s hosts connected\n\n", c.auth, num(c.size), num(c.hosts))
		lo, hi := c.connect.spread()
		if c.auth == "jwt" {
			p.f("The %s hosts connected in %s (%s – %s). The one change alters the permissions of %s: of the %d changes made "+
				"with the hosts connected, %d disconnected exactly its host, which logged in again with its reissued JWT; %d "+
				"other hosts disconnected across every row.\n\n",
				num(c.hosts), duration(float64(c.connect.median())), duration(float64(lo)), duration(float64(hi)),
				strings.Join(c.reissued, ", "), c.changes, c.cut, c.disconnects)
		} else {
			p.f("The %s hosts connected in %s (%s – %s); %d of them disconnected across every row.\n\n",
				num(c.hosts), duration(float64(c.connect.median())), duration(float64(lo)), duration(float64(hi)), c.disconnects)
		}
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
			p.f("| %s | %s | %s | %s%s | %s | %s | %s |\n", rowTitle(c.auth, row.id, row.title), spreadCell(none), spreadCell(hosts), sign, duration(float64(added)),
				duration(float64(c.cpu[row.id+"/none"].median())), duration(float64(c.cpu[row.id+"/hosts"].median())),
				megabytes(max(none.peak(), hosts.peak())))
		}
		p.f("\n")
	}
}

// jwtRowTitles are the connected rows' titles in operator mode, where nothing reloads.
var jwtRowTitles = map[string]string{
	"apply":      "converged apply (nothing to change: no push)",
	"one-change": "one change applied and proven: one module follows one more event (and back), its host's user JWT reissued",
	"issue":      "`credentials issue` of another principal (the key it replaces revoked: one push, proven)",
}

// rowTitle is row id's title for principals of kind auth.
func rowTitle(auth, id, title string) string {
	if t, ok := jwtRowTitles[id]; ok && auth == "jwt" {
		return t
	}
	return title
}

// connectedJWT reports whether any connected rows are in operator mode.
func (r *report) connectedJWT() bool {
	for _, c := range r.connected {
		if c.auth == "jwt" {
			return true
		}
	}
	return false
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
		if c.auth == "jwt" {
			lines = append(lines, fmt.Sprintf("| only the host whose permissions changed disconnected: jwt, %s hosts | %d of %d changes cut exactly it; %d other disconnects | %s |",
				num(c.hosts), c.cut, c.changes, c.disconnects, verdict(c.cut == c.changes && c.changes > 0 && c.disconnects == 0)))
			continue
		}
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
		if c.auth == "jwt" {
			fmt.Fprintf(w, "  %d of %d changes cut exactly %v; ", c.cut, c.changes, c.reissued)
		}
		fmt.Fprintf(w, "  %d disconnects\n", c.disconnects)
	}
}
