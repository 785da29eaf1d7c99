package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/meshbus/meshctl/bench/meshgen"
	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/internal/testnats"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
	"github.com/meshbus/meshctl/wire"
)

// What a change costs with the mesh's hosts connected. At each reload nats-server re-checks
// every connected client's credential and subscriptions against the new config: for a
// password user a bcrypt comparison, for an nkey user a check of its signature (ed25519). So
// every change meshctl makes live (an apply that changes a user, an issue, a rotation, an
// enrolment) costs the server in proportion to the hosts connected, on every server of a
// cluster.
//
// Each mesh runs with `watch` serving the embedded bus, as in production. Its instances but
// those of two nodes held aside are issued credentials and joined by the load process
// (load.go), one connection each; one node held aside is issued and rotated, the other
// enrolled by `meshctl agent`. Every row runs -runs times with the hosts connected and as
// many with none, interleaved, and with each run the CPU the watch process (which serves the
// bus) spent while it ran. The hosts must stay connected throughout: the load process counts
// every drop.

// The rows of the connected table, in the order they are measured and reported.
var connectedRows = []struct{ id, title string }{
	{"apply", "converged apply (nothing to change: no reload)"},
	{"one-change", "one change applied and proven: one module follows one more event (and back)"},
	{"issue", "`credentials issue` of another principal (one reload, proven)"},
	{"rotate", "`credentials rotate` of the same principal"},
	{"enrol", "a node enrolling: `meshctl agent` started to its modules' memberships written"},
}

// connectedResult is one mesh's connected rows.
type connectedResult struct {
	auth        string
	size        int // module instances
	hosts       int // connected by the load process
	connect     series
	disconnects int64 // of hosts whose permissions no row changed
	// In operator mode: the servers of the cluster, the principals whose permissions the one
	// change alters, the one changes made with the hosts connected, and of those the ones
	// that disconnected exactly those principals' hosts.
	servers      int
	reissued     []string
	changes, cut int
	// rows are keyed by row id and phase, "apply/hosts" or "apply/none"; cpu likewise, the
	// CPU of the process serving the bus during each run.
	rows, cpu map[string]*series
}

func (c *connectedResult) row(m map[string]*series, id, phase string) *series {
	k := id + "/" + phase
	if m[k] == nil {
		m[k] = &series{}
	}
	return m[k]
}

// measureConnected runs the connected rows for each size and each kind of credential.
func measureConnected(ctx context.Context, sizes []int, auths []string, runs int, meshctl, tmp string, log io.Writer, out *[]*connectedResult) error {
	if len(sizes) > 0 && slices.Contains(auths, "jwt") {
		// nats-server is built from the module's pinned version for the operator-mode
		// clusters, once for every size.
		defer testnats.RemoveBuiltServer()
	}
	for _, n := range sizes {
		for _, auth := range auths {
			res := &connectedResult{auth: auth, size: n, rows: map[string]*series{}, cpu: map[string]*series{}}
			r, err := newWaitRunner(ctx, meshctl, tmp, fmt.Sprintf("connected-%s-%d", auth, n), runs, log, &waitResult{size: n, rows: map[string]*series{}})
			if err != nil {
				return err
			}
			run := r.runConnected
			if auth == "jwt" {
				run = r.runConnectedJWT
			}
			if err := run(n, auth, res); err != nil {
				return fmt.Errorf("with hosts connected, %s principals, at %d instances: %w", auth, n, err)
			}
			*out = append(*out, res)
		}
	}
	return nil
}

// runConnected measures the connected rows of a mesh of n instances whose principals have
// credentials of kind auth into res: every run with the hosts connected and with none, in
// turn, watch serving the bus.
func (r *waitRunner) runConnected(n int, auth string, res *connectedResult) error {
	x, err := r.onFreePort(n, func(g *meshgen.Mesh) { g.Auth = auth })
	if err != nil {
		return err
	}
	held, err := holdAside(x.m)
	if err != nil {
		return err
	}
	res.hosts = len(held.hosts)
	fmt.Fprintf(r.log, "with hosts connected: %s principals, %s instances, %s hosts, %d runs each\n", auth, num(n), num(len(held.hosts)), r.runs)

	c := &connectedMesh{res: res, g: x.g, desc: x.desc, state: filepath.Join(r.dir, "state"), held: held}
	if c.w, err = r.startWatch(c.desc, c.state); err != nil {
		return err
	}
	c.serverCPU = func() time.Duration { return cpuOf(c.w.cmd.Process.Pid) }
	defer func() { c.w.kill() }()
	members := filepath.Join(r.dir, "hosts.jsonl")
	if err := mintHosts(r.ctx, c.state, x.m, held.hosts, members); err != nil {
		return err
	}
	// The credentials minted straight into the store are made live by one apply.
	if _, err := r.checkedApply(c.desc, c.state, "applied ", nil); err != nil {
		return err
	}
	if c.l, err = r.startLoad(members); err != nil {
		return err
	}
	defer c.l.stop()
	syscall.Sync()

	touched := 0
	for i := range r.runs {
		// The phases alternate which goes first, so that neither always follows the other.
		phases := []string{"hosts", "none"}
		if i%2 == 1 {
			slices.Reverse(phases)
		}
		for _, phase := range phases {
			touched = 1 - touched
			if err := r.connectedPhase(c, phase, i, touched); err != nil {
				return err
			}
		}
	}
	return nil
}

// heldAside is who the connected rows hold aside from the hosts the load process connects.
type heldAside struct {
	hosts         []string // the users of every other instance: the hosts connected
	rotated       string   // the user of an instance of the node issued, issued and rotated
	enrolled      string   // the node enrolled by `meshctl agent`
	enrolledUsers []string // the users of its instances and of the node itself
}

// holdAside holds the last node of m aside to issue and rotate a credential of one of its
// instances, and the node before it to enrol; every other instance is a host.
func holdAside(m *model.Mesh) (heldAside, error) {
	if len(m.Nodes) < 3 {
		return heldAside{}, fmt.Errorf("a mesh of %d nodes: the connected rows hold two aside", len(m.Nodes))
	}
	issued, enrolled := m.Nodes[len(m.Nodes)-1].Name, m.Nodes[len(m.Nodes)-2].Name
	h := heldAside{enrolled: enrolled}
	for _, in := range m.Instances() {
		switch in.Node {
		case issued:
			h.rotated = render.InstanceUser(in)
		case enrolled:
			h.enrolledUsers = append(h.enrolledUsers, render.InstanceUser(in))
		default:
			h.hosts = append(h.hosts, render.InstanceUser(in))
		}
	}
	if h.rotated == "" || len(h.enrolledUsers) == 0 {
		return heldAside{}, fmt.Errorf("nodes %s and %s, held aside, run no module", issued, enrolled)
	}
	h.enrolledUsers = append(h.enrolledUsers, render.NodeUser(enrolled))
	return h, nil
}

// connectedMesh is what every run of the connected rows of one mesh shares.
type connectedMesh struct {
	res         *connectedResult
	g           meshgen.Mesh
	desc, state string
	held        heldAside
	w           *watchProc // serving the bus
	l           *loadProc  // connecting the hosts
	// serverCPU is the CPU the processes serving the bus have spent: watch's, or the
	// servers' of a cluster, between them.
	serverCPU func() time.Duration
}

// connectedPhase runs every connected row once in phase ("hosts" or "none") of run i, the
// one change writing the mesh with touched modules.
func (r *waitRunner) connectedPhase(c *connectedMesh, phase string, i, touched int) error {
	if err := r.enterPhase(c, phase); err != nil {
		return err
	}
	desc, state := c.desc, c.state
	if err := r.timedRow(c, "apply", phase, i, "apply", "-f", desc, "--state", state); err != nil {
		return err
	}
	next := c.g
	next.Touched = touched
	if err := next.Write(desc); err != nil {
		return err
	}
	if err := r.timedRow(c, "one-change", phase, i, "apply", "-f", desc, "--state", state); err != nil {
		return err
	}
	out := filepath.Join(r.dir, "issued.json")
	if err := r.timedRow(c, "issue", phase, i, "credentials", "issue", c.held.rotated, "-f", desc, "--state", state, "-o", out, "--force"); err != nil {
		return err
	}
	if err := r.timedRow(c, "rotate", phase, i, "credentials", "rotate", c.held.rotated, "-f", desc, "--state", state, "-o", out, "--force"); err != nil {
		return err
	}
	if err := r.enrolment(c.res, phase, i, c.w, desc, state, c.held.enrolled, c.held.enrolledUsers); err != nil {
		return err
	}
	if phase != "hosts" {
		return nil
	}
	a, err := c.l.ask("stats")
	if err != nil {
		return err
	}
	c.res.disconnects = a.Disconnects
	if a.Connected != len(c.held.hosts) {
		return fmt.Errorf("after the rows %d of %d hosts were connected", a.Connected, len(c.held.hosts))
	}
	return nil
}

// enterPhase has the load process connect every host for phase "hosts", recording how long
// they took when they were not up already, or disconnect them all for "none".
func (r *waitRunner) enterPhase(c *connectedMesh, phase string) error {
	if phase != "hosts" {
		_, err := c.l.ask("down")
		return err
	}
	a, err := c.l.ask("up")
	if err != nil {
		return err
	}
	if a.Connected != len(c.held.hosts) {
		return fmt.Errorf("%d of %d hosts connected", a.Connected, len(c.held.hosts))
	}
	if a.Joined > 0 { // not up already, from the run before
		c.res.connect.add(time.Duration(a.NS), 0)
		fmt.Fprintf(r.log, "  %s hosts connected in %s\n", num(a.Connected), time.Duration(a.NS).Round(time.Millisecond))
	}
	return nil
}

// timedRow runs meshctl with args once into row id of phase, with the CPU the process
// serving the bus spent meanwhile.
func (r *waitRunner) timedRow(c *connectedMesh, id, phase string, i int, args ...string) error {
	return r.timedRowSaying(c, id, phase, i, "", args...)
}

// timedRowSaying is timedRow of a process that must print a line starting with want (if
// any) on stderr.
func (r *waitRunner) timedRowSaying(c *connectedMesh, id, phase string, i int, want string, args ...string) error {
	before := c.serverCPU()
	p, err := r.meshctlRun(args...)
	if err != nil {
		return err
	}
	cpu := c.serverCPU() - before
	if _, ok := p.lineAt(want); want != "" && !ok {
		return fmt.Errorf("meshctl %s printed no line starting %q:\n%s", strings.Join(args, " "), want, p.stderr)
	}
	c.res.row(c.res.rows, id, phase).add(p.wall, p.peak)
	c.res.row(c.res.cpu, id, phase).add(cpu, 0)
	r.progress(id+"/"+phase, i, p.wall, p.peak, fmt.Sprintf("(server CPU %s)", cpu.Round(time.Millisecond)))
	return nil
}

// enrolment times one node enrolling: the agent started with a fresh enrolment credential and
// an empty directory, to the memberships of its node and every module written.
func (r *waitRunner) enrolment(res *connectedResult, phase string, i int, w *watchProc, desc, state, node string, users []string) error {
	enrol := filepath.Join(r.dir, "enrol.json")
	if _, err := r.meshctlRun("credentials", "issue", render.EnrolUser(node), "-f", desc, "--state", state, "-o", enrol, "--force"); err != nil {
		return err
	}
	dir := filepath.Join(r.dir, "agent")
	before := cpuOf(w.cmd.Process.Pid)
	start := time.Now()
	ctx, cancel := context.WithTimeout(r.ctx, waitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.meshctl, "agent", "--membership", enrol, "--dir", dir, "--log-format", "json")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	peak := watchPeakRSS(cmd.Process.Pid)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for !allExist(dir, users) {
		select {
		case err := <-exited:
			peak()
			return fmt.Errorf("the agent exited before its memberships were written (%v):\n%s", err, stderr.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	took := time.Since(start)
	cpu := cpuOf(w.cmd.Process.Pid) - before
	rss := peak()
	_ = cmd.Process.Kill()
	<-exited
	res.row(res.rows, "enrol", phase).add(took, rss)
	res.row(res.cpu, "enrol", phase).add(cpu, 0)
	r.progress("enrol/"+phase, i, took, rss, fmt.Sprintf("(server CPU %s)", cpu.Round(time.Millisecond)))
	return r.spend(dir)
}

func allExist(dir string, users []string) bool {
	for _, u := range users {
		if _, err := os.Stat(filepath.Join(dir, u+".json")); err != nil {
			return false
		}
	}
	return true
}

// mintHosts issues a credential to every host straight into the store, as one batch of
// `credentials issue`, and writes their memberships to file (0600), one a line.
func mintHosts(ctx context.Context, dir string, m *model.Mesh, users []string, file string) error {
	st, err := state.Open(dir)
	if err != nil {
		return err
	}
	defer st.Close()
	var secrets map[string]string
	if m.Bus.Nkeys() {
		secrets, err = st.MintNkeys(ctx, users, "issue")
	} else {
		secrets, err = st.Mint(ctx, users, state.DefaultCost, "issue")
	}
	if err != nil {
		return err
	}
	url, _, ok := bus.RunningEmbeddedProcess(dir)
	if !ok {
		return errors.New("no meshctl process serves the bus")
	}
	f, err := os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, u := range users {
		mb := wire.NewMembership([]string{url}, "", u, secrets[u], m.Bus.Nkeys())
		if err := enc.Encode(mb); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// loadProc is the running load process.
type loadProc struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	stderr *strings.Builder
}

func (r *waitRunner) startLoad(members string) (*loadProc, error) {
	cmd := exec.CommandContext(r.ctx, r.self, "-load="+members)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	l := &loadProc{cmd: cmd, in: in, out: bufio.NewScanner(out), stderr: &strings.Builder{}}
	cmd.Stderr = l.stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *loadProc) ask(cmd string) (loadAnswer, error) {
	var a loadAnswer
	if _, err := fmt.Fprintln(l.in, cmd); err != nil {
		return a, fmt.Errorf("the load process: %w\n%s", err, l.stderr)
	}
	if !l.out.Scan() {
		return a, fmt.Errorf("the load process answered nothing to %s:\n%s", cmd, l.stderr)
	}
	if err := json.Unmarshal(l.out.Bytes(), &a); err != nil {
		return a, err
	}
	if a.Error != "" {
		return a, fmt.Errorf("the load process, %s: %s", cmd, a.Error)
	}
	return a, nil
}

func (l *loadProc) stop() {
	_ = l.in.Close()
	_ = l.cmd.Process.Kill()
	_ = l.cmd.Wait()
}

// cpuOf is the user and system CPU process pid has spent, from /proc/PID/stat; 0 when it
// cannot be read.
func cpuOf(pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: the fields count from after it.
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0
	}
	var ticks int64
	for _, f := range fields[11:13] { // utime, stime: fields 14 and 15 of stat(5)
		v, _ := strconv.ParseInt(f, 10, 64)
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every Linux this runs on.
const clockTicks = 100
