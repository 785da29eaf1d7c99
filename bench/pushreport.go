package main

import (
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

func (r *report) writePushes(p *printer) {
	x := r.pushes
	if x == nil || len(x.rows) == 0 {
		return
	}
	p.f("## Operator mode: what a push of the account JWT costs the servers\n\n")
	p.f("With `bus.auth: jwt` every change meshctl makes is one push of the mesh's account JWT over the system account, " +
		"and it counts only once every server has answered that it stored the JWT and reads it back. Each server decodes " +
		"the JWT, stores it in its resolver directory, applies it to the account, and re-checks every connected client of " +
		"the account against it: the client's user JWT decoded and verified again, and, when the account revokes anyone, " +
		"decoded once more and looked up in the revocation list. The JWT carries that list whole, so its size, and what " +
		"every server decodes at every push, grows with the list. The rows measure both: the revocation list's size, and " +
		"the users connected.\n\n")
	p.f("A JetStream cluster of %d nats-server %s processes in operator mode (the NATS resolver, its catch-up interval "+
		"long enough to stay out of the figures), its operator made by the nats CLI. For each number of users of the account "+
		"connected (spread over the servers, each holding one subscription) and each revocation-list size, the bench pushes %d "+
		"successive account JWTs %d times: each the proper successor of the last (`iat` strictly greater) revoking the same "+
		"keys, none a connected user's. The push is timed from the request until every server answered; the read-back, "+
		"`Resolver.Status`, until every server's JWT is shown current. The servers' CPU (utime + stime of each process, "+
		"/proc, summed over the %d) is read around each push and each read-back, and divided by the pushes of each batch. "+
		"The times are the median push or read-back, with the fastest and the slowest; the CPU the median batch's, with the "+
		"lowest and the highest. With nothing pushed, the servers spent %s of CPU a second between them.\n\n",
		x.servers, server.VERSION, x.plan.pushes, x.plan.runs, x.servers, duration(float64(x.idlePerSecond())))
	p.f("| users connected | revocations | account JWT | push: every server stored it | read back from every server | servers' CPU a push | servers' CPU a read-back | users dropped |\n" +
		"|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, row := range x.rows {
		p.f("| %s | %s | %s | %s | %s | %s | %s | %d |\n", num(row.connected), num(row.revocations), megabytes(int64(row.jwtBytes)),
			spreadCell(&row.push), spreadCell(&row.readBack), spreadCell(&row.pushCPU), spreadCell(&row.readBackCPU), row.dropped)
	}
	p.f("\nNo push revokes a connected user, so none may drop: a drop would be a client the re-check wrongly refused.\n\n")
	for _, l := range x.findings() {
		p.f("- %s\n", l)
	}
	p.f("\n")
}

// maxJWT is the largest account JWT: what jwt/v2 and the servers accept, and nats-server's
// default max_payload, which a push must fit.
const maxJWT = 1 << 20

// findings are what the rows show, worked out from them: what a revocation adds to the JWT,
// and what a connected user adds to a push.
func (x *pushReport) findings() []string {
	var out []string
	at := func(connected, revocations int) *pushResult {
		for _, row := range x.rows {
			if row.connected == connected && row.revocations == revocations {
				return row
			}
		}
		return nil
	}
	revs, users := x.plan.revocations, x.plan.connected
	if len(revs) > 1 {
		lo, hi := at(users[0], revs[0]), at(users[0], revs[len(revs)-1])
		if lo != nil && hi != nil {
			per := float64(hi.jwtBytes-lo.jwtBytes) / float64(hi.revocations-lo.revocations)
			out = append(out, fmt.Sprintf("A revocation adds %.0f bytes to the account JWT, so about %s revocations fill the 1 MiB an account JWT "+
				"may take, which is also nats-server's default `max_payload`: past it jwt/v2 refuses the token, "+
				"and `accounts.Account.Encode` with it.",
				per, num(int(float64(maxJWT-lo.jwtBytes)/per))))
		}
	}
	if len(users) > 1 {
		for _, n := range revs {
			lo, hi := at(users[0], n), at(users[len(users)-1], n)
			if lo == nil || hi == nil {
				continue
			}
			per := float64(hi.pushCPU.median()-lo.pushCPU.median()) / float64(hi.connected-lo.connected)
			list := "an empty revocation list"
			if n > 0 {
				list = num(n) + " revocations"
			}
			out = append(out, fmt.Sprintf("With %s, each user connected adds %s of the servers' CPU to every push (%s with %s users, %s with %s).",
				list, duration(per), duration(float64(hi.pushCPU.median())), num(hi.connected), duration(float64(lo.pushCPU.median())), num(lo.connected)))
		}
	}
	return out
}

// printPushes writes the push rows' medians for the terminal.
func printPushes(w io.Writer, x *pushReport) {
	if x == nil {
		return
	}
	fmt.Fprintf(w, "account JWT pushes on %d servers in operator mode (median; servers' CPU a push and a read-back):\n", x.servers)
	for _, row := range x.rows {
		fmt.Fprintf(w, "  %6s users %6s revocations %8s: push %8s, read back %8s   CPU %8s / %8s   %d dropped\n",
			num(row.connected), num(row.revocations), megabytes(int64(row.jwtBytes)), duration(float64(row.push.median())),
			duration(float64(row.readBack.median())), duration(float64(row.pushCPU.median())),
			duration(float64(row.readBackCPU.median())), row.dropped)
	}
}

// idlePerSecond is the servers' CPU a second with nothing pushed.
func (x *pushReport) idlePerSecond() time.Duration {
	return time.Duration(float64(x.idle) / idleWindow.Seconds())
}
