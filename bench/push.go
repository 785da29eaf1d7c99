package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/internal/backoff"
	"github.com/meshbus/meshctl/internal/testnats"
	"github.com/meshbus/meshctl/internal/testnats/opmode"
)

// What a push of the mesh's account JWT costs the servers, in operator mode (`bus.auth: jwt`).
// There every change meshctl makes is one push over the system account, and each server of
// the cluster decodes the JWT, stores it in its resolver directory, applies it to the account
// and re-checks every connected client of the account against it: the client's user JWT
// decoded and verified again, and, when the account revokes anyone, decoded once more and
// looked up in the revocation list. The JWT carries that list whole, about 90 bytes a
// revocation, so every server decodes all of it at every push.
//
// The rows run on a three-server JetStream cluster of nats-server processes in operator mode,
// built from the module's pinned release (internal/testnats/opmode: an operator made by the
// nats CLI, the NATS resolver). For each number of users connected, and each revocation-list
// size in ascending order, the bench pushes -pushes successive account JWTs, -runs times: each
// a proper successor (iat strictly greater) revoking the same keys, none of them a connected
// user's; faster than one a second, their iat runs ahead of the clock a second a push, as
// accounts.Account.Encode makes it, and the servers apply them all the same. A push counts when every server answered that it stored the JWT and Status reads it
// back from each; the servers' CPU (utime + stime of each process, /proc) is read around each
// push and each read-back and summed over the three.

// pushPlan is what the push rows measure.
type pushPlan struct {
	revocations []int // sizes of the revocation list, ascending
	connected   []int // users of the account connected during the pushes, ascending
	pushes      int   // per batch
	runs        int   // batches per row
}

// pushResult is one row: the pushes at one revocation-list size with some users connected.
type pushResult struct {
	revocations, connected int
	jwtBytes               int
	// push and readBack are the wall time of every push until each server answered, and of
	// every read-back until each server's JWT was shown current.
	push, readBack series
	// pushCPU and readBackCPU are the servers' CPU per push and per read-back, one a batch.
	pushCPU, readBackCPU series
	// dropped counts the users connected before the row's pushes and not after them.
	dropped int
}

// pushReport is every push row, with the servers' CPU when nothing is pushed.
type pushReport struct {
	plan    pushPlan
	rows    []*pushResult
	servers int
	// idle is the CPU the servers spent in idleWindow with nothing pushed, between them.
	idle time.Duration
}

// pushServers is how many servers the cluster of the push rows has.
const pushServers = 3

// idleWindow is how long the servers' idle CPU is read over, once, before the first push.
const idleWindow = 2 * time.Second

// pushWait bounds one push or read-back: the servers answer in milliseconds, so this only
// bounds a server that hangs.
const pushWait = 30 * time.Second

// measurePushes starts the cluster in a directory under tmp and measures every row of p.
func measurePushes(ctx context.Context, p pushPlan, tmp string, log io.Writer) (rep *pushReport, err error) {
	if len(p.revocations) == 0 || len(p.connected) == 0 {
		return nil, nil
	}
	dir := filepath.Join(tmp, "push")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// nats-server is built from the module's pinned version, the release the embedded bus
	// links; the nats CLI that makes the operator is built once per machine.
	defer testnats.RemoveBuiltServer()
	tb := &harnessTB{dir: dir}
	defer tb.close()
	defer tb.catch(&err)

	fmt.Fprintf(log, "starting a three-server operator-mode cluster for the push rows\n")
	// The resolver's catch-up (a CLAIMS.PACK exchange every interval) is kept out of the
	// figures: every server receives every push, so none has anything to catch up on.
	c := opmode.StartCluster(tb, opmode.ClusterOptions{Servers: pushServers, ResolverInterval: "1h"})
	s := &pusher{ctx: ctx, log: log, plan: p, cluster: c, signer: c.Operator.SigningKey(tb)}
	for _, srv := range c.Servers {
		s.pids = append(s.pids, srv.PID())
	}
	s.resolver = accounts.Resolver{Conn: c.ConnectSystem(), Servers: c.Names(), Wait: pushWait}
	rep = &pushReport{plan: p, servers: len(c.Servers)}
	before := s.cpu()
	if !backoff.Sleep(ctx, idleWindow) {
		return nil, ctx.Err()
	}
	rep.idle = s.cpu() - before
	fmt.Fprintf(log, "  the servers idle: %s of CPU in %s\n", rep.idle, idleWindow)
	for _, n := range p.connected {
		rows, err := s.rowsWith(n)
		if err != nil {
			return nil, fmt.Errorf("the push rows with %d users connected: %w", n, err)
		}
		rep.rows = append(rep.rows, rows...)
	}
	return rep, nil
}

// pusher is what every push row shares.
type pusher struct {
	ctx      context.Context
	log      io.Writer
	plan     pushPlan
	cluster  *opmode.Cluster
	signer   nkeys.KeyPair // the operator's signing key
	resolver accounts.Resolver
	pids     []int

	account accounts.Account
	last    string // the JWT the servers hold
}

// rowsWith measures the rows of every revocation-list size with n users of a fresh account
// connected: an account of its own, so that its revocation list starts empty.
func (s *pusher) rowsWith(n int) ([]*pushResult, error) {
	key, err := nkeys.CreateAccount()
	if err != nil {
		return nil, err
	}
	pub, err := key.PublicKey()
	if err != nil {
		return nil, err
	}
	s.account = accounts.Account{Name: "MESH", PublicKey: pub, JetStream: jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1}}
	// The account's first JWT is read back once its users are connected: a server that has
	// no client of the account has not loaded it, and answers without its JWT.
	first, err := s.account.Encode(s.signer, "", time.Now())
	if err != nil {
		return nil, err
	}
	if err := s.push(first); err != nil {
		return nil, err
	}
	s.last = first
	users, err := connectUsers(s.account, key, s.cluster.Servers, n)
	defer users.close()
	if err != nil {
		return nil, err
	}
	if err := s.readBack(first); err != nil {
		return nil, err
	}
	fmt.Fprintf(s.log, "push rows: %s users of the account connected\n", num(n))
	var rows []*pushResult
	revoked := 0
	for _, size := range s.plan.revocations {
		// The revocation list grows to size with keys no user connects with, in one push of
		// the setup's: the rows' pushes then carry it over unchanged.
		keys, err := userKeys(size - revoked)
		if err != nil {
			return nil, err
		}
		if err := s.pushProven(keys...); err != nil {
			return nil, err
		}
		revoked = size
		row := &pushResult{revocations: size, connected: n, jwtBytes: len(s.last)}
		before := users.connected()
		for range s.plan.runs {
			if err := s.batch(row); err != nil {
				return nil, fmt.Errorf("with %d revocations: %w", size, err)
			}
		}
		row.dropped = before - users.connected()
		fmt.Fprintf(s.log, "  %6s revocations (%s): push %s, read back %s; servers' CPU %s per push, %s per read-back; %d users dropped\n",
			num(size), megabytes(int64(row.jwtBytes)), row.push.median().Round(time.Microsecond), row.readBack.median().Round(time.Microsecond),
			row.pushCPU.median().Round(time.Microsecond), row.readBackCPU.median().Round(time.Microsecond), row.dropped)
		rows = append(rows, row)
	}
	return rows, nil
}

// batch makes one batch of pushes into row.
func (s *pusher) batch(row *pushResult) error {
	var pushCPU, readCPU time.Duration
	for range s.plan.pushes {
		token, err := s.account.Encode(s.signer, s.last, time.Now())
		if err != nil {
			return err
		}
		cpu0, t0 := s.cpu(), time.Now()
		if err := s.push(token); err != nil {
			return err
		}
		t1, cpu1 := time.Now(), s.cpu()
		if err := s.readBack(token); err != nil {
			return err
		}
		t2, cpu2 := time.Now(), s.cpu()
		s.last = token
		row.push.add(t1.Sub(t0), 0)
		row.readBack.add(t2.Sub(t1), 0)
		pushCPU += cpu1 - cpu0
		readCPU += cpu2 - cpu1
	}
	row.pushCPU.add(pushCPU/time.Duration(s.plan.pushes), 0)
	row.readBackCPU.add(readCPU/time.Duration(s.plan.pushes), 0)
	return nil
}

// pushProven pushes the successor of the JWT the servers hold, revoking keys, and reads it
// back: a push of the setup's, not measured.
func (s *pusher) pushProven(revoke ...string) error {
	token, err := s.account.Encode(s.signer, s.last, time.Now(), revoke...)
	if err != nil {
		return err
	}
	if err := s.push(token); err != nil {
		return err
	}
	s.last = token
	return s.readBack(token)
}

// push sends token to every server, and fails unless each answered that it stored it.
func (s *pusher) push(token string) error {
	ctx, cancel := context.WithTimeout(s.ctx, pushWait)
	defer cancel()
	res, err := s.resolver.Push(ctx, token)
	if err != nil {
		return err
	}
	return res.Err()
}

// readBack reads each server's JWT of the account until every one applies token. A server
// applies a JWT before it answers the push, so the first read shows it unless a server lost
// it; a server that has not loaded the account answers without its JWT, which the users
// connected to every server rule out.
func (s *pusher) readBack(token string) error {
	ctx, cancel := context.WithTimeout(s.ctx, pushWait)
	defer cancel()
	var behind []string
	var err error
	if backoff.Retry(ctx, backoff.Backoff{Min: 5 * time.Millisecond, Max: 500 * time.Millisecond}, func() bool {
		var st accounts.Status
		st, err = s.resolver.Status(ctx, token)
		behind = st.NotCurrent()
		return err == nil && len(behind) == 0
	}) {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("servers %v do not apply the account JWT pushed", behind)
}

// cpu is the user and system CPU the servers' processes have spent, between them.
func (s *pusher) cpu() time.Duration {
	var total time.Duration
	for _, pid := range s.pids {
		total += cpuOf(pid)
	}
	return total
}

// userKeys are n fresh user public keys, to revoke.
func userKeys(n int) ([]string, error) {
	keys := make([]string, 0, n)
	for range n {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return nil, err
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, err
		}
		keys = append(keys, pub)
	}
	return keys, nil
}

// pushUsers are the account's users the bench holds connected, each with one subscription of
// its own, as a mesh's hosts are.
type pushUsers struct {
	conns []*nats.Conn
}

// connectUsers mints n users of account a, signed by key, and connects them round the
// servers, so that with at least one a server every server has loaded the account.
func connectUsers(a accounts.Account, key nkeys.KeyPair, servers []*opmode.Server, n int) (*pushUsers, error) {
	u := &pushUsers{conns: make([]*nats.Conn, n)}
	errs := make([]error, n)
	sem := make(chan struct{}, loadInFlight)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			u.conns[i], errs[i] = connectUser(a, key, servers[i%len(servers)].URL, i)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return u, err
		}
	}
	return u, nil
}

func connectUser(a accounts.Account, key nkeys.KeyPair, url string, i int) (*nats.Conn, error) {
	subject := fmt.Sprintf("bench.user.%d", i)
	creds, err := a.MintUser(key, fmt.Sprintf("user-%d", i), accounts.Grants{Publish: []string{subject}, Subscribe: []string{subject}})
	if err != nil {
		return nil, err
	}
	kp, err := nkeys.ParseDecoratedNKey(creds.File)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(url, nats.UserJWT(func() (string, error) { return creds.JWT, nil }, kp.Sign),
		nats.NoReconnect(), nats.Name("bench-push-user"))
	if err != nil {
		return nil, fmt.Errorf("connecting user %d to %s: %w", i, url, err)
	}
	if _, err := nc.SubscribeSync(subject); err != nil {
		nc.Close()
		return nil, err
	}
	if err := nc.FlushTimeout(pushWait); err != nil {
		nc.Close()
		return nil, err
	}
	return nc, nil
}

// connected counts the users still connected.
func (u *pushUsers) connected() int {
	n := 0
	for _, nc := range u.conns {
		if nc != nil && nc.IsConnected() {
			n++
		}
	}
	return n
}

func (u *pushUsers) close() {
	for _, nc := range u.conns {
		if nc != nil {
			nc.Close()
		}
	}
}

// check completes a plan read from the flags: pushes a batch and runs batches a row, each
// list in ascending order, and at least one user on each server.
func (p *pushPlan) check(pushes, runs int) error {
	if len(p.revocations) == 0 || len(p.connected) == 0 {
		p.revocations, p.connected = nil, nil
		return nil
	}
	if pushes < 1 {
		return fmt.Errorf("-pushes %d: at least one", pushes)
	}
	p.pushes, p.runs = pushes, runs
	p.revocations, p.connected = sortedUnique(p.revocations), sortedUnique(p.connected)
	if p.revocations[0] < 0 {
		return fmt.Errorf("-push-revocations: %d revocations", p.revocations[0])
	}
	if p.connected[0] < pushServers {
		// A server with no client of the account has not loaded it, and answers a read-back
		// without its JWT.
		return fmt.Errorf("-push-connected %d: at least %d, one user a server", p.connected[0], pushServers)
	}
	return nil
}

// sortedUnique is ns in ascending order, each once.
func sortedUnique(ns []int) []int {
	out := slices.Clone(ns)
	slices.Sort(out)
	return slices.Compact(out)
}
