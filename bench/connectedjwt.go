package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/nats-io/jwt/v2"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/bench/meshgen"
	"github.com/meshbus/meshctl/internal/backoff"
	"github.com/meshbus/meshctl/internal/testnats/opmode"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
	"github.com/meshbus/meshctl/wire"
)

// The connected rows in operator mode (`bus.auth: jwt`). There no server reloads: every change
// is one push of the mesh's account JWT to each server's resolver, and each server re-checks
// every connected user of the account against it (push.go). A permission change gives the
// principal a new user JWT for the same key and revokes the key's older JWTs, so its host, and
// only it, is disconnected; it logs in again once its membership file holds the new JWT. A
// credential issued is a fresh key, and the push revokes the key it replaces.
//
// The mesh is an account MESH, added with the nats CLI, of an operator-mode cluster of three
// nats-server processes (internal/testnats/opmode), one per size. No watch runs: the bus is
// the servers', and the server CPU of each row is the three servers' processes', between them.
// The hosts' credentials are minted as `credentials issue` mints them (accounts.JWT.Issue,
// recorded in the store, so that meshctl reissues their JWTs when their grants change), each
// written to a membership file of its own that the load process joins from (host.JoinFile).
// After each one change the bench writes the reissued principals' new JWTs into their files, as
// an operator hands a host its reissued credential, and counts who was disconnected: only the
// hosts whose permissions changed may be. The rows are the converged apply, the one change and
// `credentials issue`; `rotate` is `issue` in this mode, and enrolled nodes are not served
// credentials in it yet.

// jwtAccount is the mesh's account the admin adds.
const jwtAccount = "MESH"

// jwtFileStore is each server's JetStream file store limit: the generated mesh's streams
// reserve their max_bytes against it (gigabytes at 5,000 instances). Nothing is allocated.
const jwtFileStore = "1TB"

// runConnectedJWT measures the connected rows of a jwt mesh of n instances into res.
func (r *waitRunner) runConnectedJWT(n int, _ string, res *connectedResult) (err error) {
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return err
	}
	tb := &harnessTB{dir: r.dir}
	defer tb.close()
	defer tb.catch(&err)
	fmt.Fprintf(r.log, "starting a three-server operator-mode cluster for the jwt connected rows at %s instances\n", num(n))
	cl := opmode.StartCluster(tb, opmode.ClusterOptions{ResolverInterval: "1h", MaxFileStore: jwtFileStore})
	cl.Operator.Run(tb, "auth", "account", "add", jwtAccount, "--operator", cl.Operator.Name, "--defaults")
	x, err := r.generate(n, func(g *meshgen.Mesh) {
		g.Auth = model.AuthJWT
		g.Operator = meshgen.Operator{Servers: cl.URLs(), Store: filepath.Dir(filepath.Dir(cl.Operator.StoreDir)),
			Account: jwtAccount, SystemCreds: cl.Operator.SystemUserCreds}
	})
	if err != nil {
		return err
	}
	held, err := holdAside(x.m)
	if err != nil {
		return err
	}
	res.hosts, res.servers = len(held.hosts), len(cl.Servers)
	if res.reissued, err = reissuedBy(x.g); err != nil {
		return err
	}
	for _, p := range res.reissued {
		if !slices.Contains(held.hosts, p) {
			return fmt.Errorf("the one change alters %s, which is not a host connected", p)
		}
	}
	c := &connectedMesh{res: res, g: x.g, desc: x.desc, state: filepath.Join(r.dir, "state"), held: held}
	c.serverCPU = func() time.Duration {
		var total time.Duration
		for _, srv := range cl.Servers {
			total += cpuOf(srv.PID())
		}
		return total
	}
	fmt.Fprintf(r.log, "with hosts connected: jwt principals, %s instances, %s hosts, %d runs each; the one change reissues %v\n",
		num(n), num(len(held.hosts)), r.runs, res.reissued)
	// The first apply, from an empty state directory, is the setup of the rows.
	p, err := r.checkedApply(c.desc, c.state, "applied ", nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(r.log, "  %-19s setup: %s, peak RSS %s\n", "first apply", p.wall.Round(time.Millisecond), megabytes(p.peak))
	h := jwtHosts{dir: filepath.Join(r.dir, "hosts"), urls: cl.URLs(), seeds: map[string]string{}}
	t0 := time.Now()
	if err := mintJWTHosts(r.ctx, c.state, x.m, held.hosts, h); err != nil {
		return err
	}
	fmt.Fprintf(r.log, "  %s hosts' credentials minted in %s\n", num(len(h.seeds)), time.Since(t0).Round(time.Millisecond))
	if c.l, err = r.startLoad(h.dir); err != nil {
		return err
	}
	defer c.l.stop()
	syscall.Sync()

	touched := 0
	for i := range r.runs {
		phases := []string{"hosts", "none"}
		if i%2 == 1 {
			slices.Reverse(phases)
		}
		for _, phase := range phases {
			touched = 1 - touched
			if err := r.connectedJWTPhase(c, phase, i, touched, h); err != nil {
				return err
			}
		}
	}
	return nil
}

// connectedJWTPhase runs the jwt connected rows once in phase of run i, the one change
// writing the mesh with touched modules.
func (r *waitRunner) connectedJWTPhase(c *connectedMesh, phase string, i, touched int, h jwtHosts) error {
	if err := r.enterPhase(c, phase); err != nil {
		return err
	}
	if _, err := c.l.ask("mark"); err != nil {
		return err
	}
	desc, state := c.desc, c.state
	if err := r.timedRowSaying(c, "apply", phase, i, "the bus was already in sync", "apply", "-f", desc, "--state", state); err != nil {
		return err
	}
	if err := r.droppedNone(c, phase, "the converged apply"); err != nil {
		return err
	}
	next := c.g
	next.Touched = touched
	if err := next.Write(desc); err != nil {
		return err
	}
	if err := r.timedRowSaying(c, "one-change", phase, i, "applied ", "apply", "-f", desc, "--state", state); err != nil {
		return err
	}
	// The reissued hosts are handed their new JWTs, as an operator would: connected, they
	// were cut by the push and log in again with them; down, they log in with them next.
	if err := writeReissued(r.ctx, state, c.res.reissued, h); err != nil {
		return err
	}
	if phase == "hosts" {
		if err := r.reissuedBack(c); err != nil {
			return err
		}
	}
	out := filepath.Join(r.dir, "issued.json")
	if err := r.timedRow(c, "issue", phase, i, "credentials", "issue", c.held.rotated, "-f", desc, "--state", state, "-o", out, "--force"); err != nil {
		return err
	}
	return r.droppedNone(c, phase, "credentials issue")
}

// droppedNone counts, with the hosts connected, the hosts disconnected since the last mark:
// after a row that changes no connected host's permissions there must be none, and any is
// counted against the rows.
func (r *waitRunner) droppedNone(c *connectedMesh, phase, after string) error {
	if phase != "hosts" {
		return nil
	}
	a, err := c.l.ask("stats")
	if err != nil {
		return err
	}
	if len(a.Dropped) > 0 {
		c.res.disconnects += int64(len(a.Dropped))
		fmt.Fprintf(r.log, "  %s disconnected %v\n", after, a.Dropped)
	}
	if a.Connected != len(c.held.hosts) {
		return fmt.Errorf("after %s %d of %d hosts were connected", after, a.Connected, len(c.held.hosts))
	}
	_, err = c.l.ask("mark")
	return err
}

// reissuedBack waits until every host is connected again after the one change, and counts
// who it disconnected: the reissued hosts must all have been, and no other.
func (r *waitRunner) reissuedBack(c *connectedMesh) error {
	ctx, cancel := context.WithTimeout(r.ctx, pushWait)
	defer cancel()
	var a loadAnswer
	var err error
	backoff.Retry(ctx, backoff.Backoff{Min: 10 * time.Millisecond, Max: 250 * time.Millisecond}, func() bool {
		a, err = c.l.ask("stats")
		return err != nil || a.Connected == len(c.held.hosts) && len(a.Dropped) >= len(c.res.reissued)
	})
	if err != nil {
		return err
	}
	if a.Connected != len(c.held.hosts) {
		return fmt.Errorf("after the one change %d of %d hosts were connected again", a.Connected, len(c.held.hosts))
	}
	c.res.changes++
	others := 0
	for _, u := range a.Dropped {
		if !slices.Contains(c.res.reissued, u) {
			others++
		}
	}
	c.res.disconnects += int64(others)
	if others == 0 && len(a.Dropped) == len(c.res.reissued) {
		c.res.cut++
	} else {
		fmt.Fprintf(r.log, "  the one change disconnected %v; its permissions changed for %v\n", a.Dropped, c.res.reissued)
	}
	_, err = c.l.ask("mark")
	return err
}

// reissuedBy is the principals whose grants the one change alters: those of the mesh g
// describes with one module touched that differ from its base's.
func reissuedBy(g meshgen.Mesh) ([]string, error) {
	base, touched := g, g
	base.Touched, touched.Touched = 0, 1
	a, err := model.Parse(base.Files())
	if err != nil {
		return nil, err
	}
	b, err := model.Parse(touched.Files())
	if err != nil {
		return nil, err
	}
	da, db := render.Derive(a), render.Derive(b)
	var out []string
	for _, p := range db.Principals {
		q, ok := da.Principal(p.User)
		if !ok || !accounts.GrantsOf(p).Equal(accounts.GrantsOf(q)) {
			out = append(out, p.User)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("touching a module changes no principal's permissions")
	}
	return out, nil
}

// mintJWTHosts issues every host a credential as `credentials issue` does, recorded in the
// store at dir, and writes each host's membership to a file of its own (0600) in h.dir,
// keeping its seed in h.seeds for its reissued JWTs.
func mintJWTHosts(ctx context.Context, dir string, m *model.Mesh, users []string, h jwtHosts) error {
	st, err := state.Open(dir)
	if err != nil {
		return err
	}
	defer st.Close()
	j, done, err := reconcile.OpenJWT(ctx, m, st)
	if err != nil {
		return err
	}
	defer done()
	if err := os.MkdirAll(h.dir, 0o700); err != nil {
		return err
	}
	d := render.Derive(m)
	for _, u := range users {
		p, ok := d.Principal(u)
		if !ok {
			return fmt.Errorf("no principal %s", u)
		}
		creds, err := j.Issue(ctx, p, "credentials issue")
		if err != nil {
			return err
		}
		kp, err := jwt.ParseDecoratedUserNKey(creds.File)
		if err != nil {
			return err
		}
		seed, err := kp.Seed()
		if err != nil {
			return err
		}
		h.seeds[u] = string(seed)
		if err := h.write(u, string(seed), creds.JWT); err != nil {
			return err
		}
	}
	return nil
}

// writeReissued writes each of principals' user JWT in force in the store at dir into its
// membership file, beside its seed.
func writeReissued(ctx context.Context, dir string, principals []string, h jwtHosts) error {
	st, err := state.Open(dir)
	if err != nil {
		return err
	}
	defer st.Close()
	users, err := st.JWTUsers(ctx)
	if err != nil {
		return err
	}
	for _, p := range principals {
		u, ok := users[p]
		if !ok {
			return fmt.Errorf("the store holds no user of %s", p)
		}
		if err := h.write(p, h.seeds[p], u.JWT); err != nil {
			return err
		}
	}
	return nil
}

// jwtHosts is where the hosts' membership files are, the servers they name, and the hosts'
// seeds, by user.
type jwtHosts struct {
	dir   string
	urls  []string
	seeds map[string]string
}

// write writes user's membership, its seed and user JWT, to its file, replacing the file
// whole, as the agent writes one: a host reading it at a reconnect never sees half of it.
func (h jwtHosts) write(user, seed, token string) error {
	mb := wire.NewMembership(h.urls, "", user, seed, true)
	mb.JWT = token
	raw, err := json.Marshal(mb)
	if err != nil {
		return err
	}
	path := filepath.Join(h.dir, user+".json")
	tmp := path + ".new"
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
