package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/bus/bustest"
	"github.com/meshbus/meshctl/controller"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/lockedbuf"
	"github.com/meshbus/meshctl/internal/testnats"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
	"github.com/meshbus/meshctl/watch"
	"github.com/meshbus/meshctl/wire"
)

// waitLimit is a failsafe, not a measurement: every wait ends as soon as its condition holds.
const waitLimit = testwait.Limit

const mesh = `bus:
  listen: 127.0.0.1:0
nodes:
  - name: one
  - name: two
seats:
  - name: mailer
    accepts: [send]
    emits: [sent]
modules:
  - name: shop
    on: [one]
    emits: [order.placed]
    sends: [mailer/send]
  - name: postman
    on: [two]
    claims: [mailer]
    follows: [shop/order.placed]
`

// world is watch on a description of two nodes, and the agents of the nodes.
type world struct {
	t        *testing.T
	dir      string
	stateDir string
	hup      chan os.Signal
	logs     *lockedbuf.Buffer
	metrics  string // host:port of watch's metrics, when served

	mu      sync.Mutex
	cycles  []watch.Cycle
	applied []Applied
	more    chan struct{}
}

func (w *world) changed() {
	close(w.more)
	w.more = make(chan struct{})
}

// wait waits until cond holds, looking again at every cycle and every applied declaration.
func (w *world) wait(what string, cond func() bool) {
	w.t.Helper()
	deadline := time.After(waitLimit)
	for {
		w.mu.Lock()
		ok, more := cond(), w.more
		w.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-more:
		case <-time.After(100 * time.Millisecond): // a file on disk or a login changes without telling
		case <-deadline:
			w.t.Fatalf("%s: not within %s; the log:\n%s", what, waitLimit, w.logs.String())
		}
	}
}

func startWorld(t *testing.T, description string) *world {
	t.Helper()
	w := &world{t: t, dir: t.TempDir(), stateDir: t.TempDir(), hup: make(chan os.Signal, 1), logs: &lockedbuf.Buffer{},
		more: make(chan struct{}), metrics: "127.0.0.1:" + strconv.Itoa(freePort(t))}
	w.write(description)
	stop := w.startWatch()
	t.Cleanup(stop)
	return w
}

// worldOnAPort is a world, and its description, whose embedded bus listens on a port of its own, the same across
// watch's restarts, with the mesh described but no watch started: for the tests that stop and
// start the control host.
func worldOnAPort(t *testing.T) (w *world, description string) {
	t.Helper()
	description = strings.Replace(mesh, "listen: 127.0.0.1:0", "listen: 127.0.0.1:"+strconv.Itoa(freePort(t)), 1)
	w = &world{t: t, dir: t.TempDir(), stateDir: t.TempDir(), hup: make(chan os.Signal, 1), logs: &lockedbuf.Buffer{}, more: make(chan struct{})}
	w.write(description)
	return w, description
}

// freePort is a port nothing listened on a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	return testnats.FreePort(t)
}

// scrape is watch's /metrics.
func (w *world) scrape() string {
	w.t.Helper()
	resp, err := http.Get("http://" + w.metrics + "/metrics")
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		w.t.Fatal(err)
	}
	return string(body)
}

// startWatch runs watch on the world's directories until stop is called, and waits for its first
// reconcile to apply or find the bus in sync.
func (w *world) startWatch() (stop func()) {
	t := w.t
	t.Helper()
	log := slog.New(slog.NewTextHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	w.mu.Lock()
	from := len(w.cycles)
	w.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- watch.Run(ctx, watch.Config{Dir: w.dir, StateDir: w.stateDir, Cost: bcrypt.MinCost,
			Debounce: 100 * time.Millisecond, Resync: time.Hour, RetryMin: 50 * time.Millisecond, RetryMax: 400 * time.Millisecond,
			Logger: log, Hup: w.hup, ControllerRetry: 200 * time.Millisecond, MetricsAddr: w.metrics,
			OnCycle: func(c watch.Cycle) {
				w.mu.Lock()
				defer w.mu.Unlock()
				w.cycles = append(w.cycles, c)
				w.changed()
			}})
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("watch: %v", err)
			}
		})
	}
	w.wait("the first reconcile", func() bool {
		return len(w.cycles) > from && (w.cycles[from].Outcome == watch.OutcomeOK || w.cycles[from].Outcome == watch.OutcomeNoop)
	})
	return stop
}

func (w *world) write(description string) {
	w.t.Helper()
	if err := os.WriteFile(filepath.Join(w.dir, "mesh.yaml"), []byte(description), 0o600); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) busURL() string {
	w.t.Helper()
	url, ok := bus.RunningEmbedded(w.stateDir)
	if !ok {
		w.t.Fatal("watch serves no embedded bus")
	}
	return url
}

// issueEnrolments does what `meshctl credentials issue enrol.<node>` does against a running
// watch: mint in the store, have watch reload and reconcile, and write the membership.
func (w *world) issueEnrolments(nodes ...string) map[string]string {
	w.t.Helper()
	var users []string
	for _, n := range nodes {
		users = append(users, render.EnrolUser(n))
	}
	passwords := w.issue(users...)
	files := map[string]string{}
	for _, n := range nodes {
		path := filepath.Join(w.t.TempDir(), "enrol.json")
		data, _ := json.Marshal(host.Membership{Address: w.busURL(), User: render.EnrolUser(n), Password: passwords[render.EnrolUser(n)]})
		if err := os.WriteFile(path, data, 0o600); err != nil {
			w.t.Fatal(err)
		}
		files[n] = path
	}
	return files
}

// issue does what `meshctl credentials issue` does for users against a running watch: mint in
// the store and have watch reload and reconcile. It returns the passwords.
func (w *world) issue(users ...string) map[string]string {
	w.t.Helper()
	ctx := context.Background()
	st, err := state.Open(w.stateDir)
	if err != nil {
		w.t.Fatal(err)
	}
	defer st.Close()
	passwords, err := st.Mint(ctx, users, bcrypt.MinCost, "credentials issue")
	if err != nil {
		w.t.Fatal(err)
	}
	w.mu.Lock()
	from := len(w.cycles)
	w.mu.Unlock()
	w.hup <- os.Interrupt // any signal value: watch reads the channel, not the signal
	w.wait("the reconcile after issuing", func() bool {
		for _, c := range w.cycles[from:] {
			if c.Outcome == watch.OutcomeOK {
				return true
			}
		}
		return false
	})
	return passwords
}

// runAgent runs an agent until the test ends and returns its directory.
func (w *world) runAgent(enrolment string) string {
	w.t.Helper()
	return w.startAgent(enrolment).dir
}

// running is an agent started by startAgent.
type running struct {
	dir    string
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned, with err
	err    error
	looked bool // the test took err with exit: the cleanup leaves it to the test
}

// exited reports whether Run returned.
func (r *running) exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// exit waits for Run to return by itself and returns what it did.
func (r *running) exit(t *testing.T) error {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(waitLimit):
		t.Fatalf("the agent still runs after %s", waitLimit)
	}
	r.looked = true
	return r.err
}

// startAgent runs an agent until the test ends, or until it returns by itself.
func (w *world) startAgent(enrolment string) *running {
	w.t.Helper()
	return w.startAgentIn(filepath.Join(w.t.TempDir(), "agent"), enrolment)
}

// startAgentIn is startAgent with the node's directory dir.
func (w *world) startAgentIn(dir, enrolment string) *running {
	w.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{dir: dir, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = Run(ctx, Config{Dir: r.dir, Enrolment: enrolment, Heartbeat: 200 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(w.logs, nil)),
			Observe: func(a Applied) {
				w.mu.Lock()
				defer w.mu.Unlock()
				w.applied = append(w.applied, a)
				w.changed()
			}})
	}()
	w.t.Cleanup(func() {
		cancel()
		<-r.done
		if r.err != nil && !r.looked {
			w.t.Errorf("agent: %v", r.err)
		}
	})
	return r
}

// membership reads a membership file, checking it is the owner's alone.
func (w *world) membership(path string) host.Membership {
	w.t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		w.t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		w.t.Errorf("%s has mode %v, want 0600", path, info.Mode().Perm())
	}
	m, err := host.ReadMembershipFile(path)
	if err != nil {
		w.t.Fatal(err)
	}
	return m
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func join(t *testing.T, m host.Membership) *host.Host {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := host.Join(ctx, m)
	if err != nil {
		t.Fatalf("joining as %s: %v", m.User, err)
	}
	t.Cleanup(h.Close)
	return h
}

// The issue's end-to-end test: two nodes handed only an enrolment credential each enrol, receive
// their declarations and write every module membership; each module joins with its file and does
// its job; the store has both nodes at the declared generation. A module moved in the YAML leaves
// the first node (its file gone, its credential refused) and arrives on the second (its file
// there, working). A replayed enrolment is refused. No password is in any log.
func TestTwoNodesEnrolReceiveTheirModulesAndFollowAMove(t *testing.T) {
	t.Parallel()
	w := startWorld(t, mesh)
	enrol := w.issueEnrolments("one", "two")
	dirOne, dirTwo := w.runAgent(enrol["one"]), w.runAgent(enrol["two"])

	shopFile, postmanFile := filepath.Join(dirOne, "one.shop.json"), filepath.Join(dirTwo, "two.postman.json")
	w.wait("both nodes write their modules' memberships", func() bool { return exists(shopFile) && exists(postmanFile) })
	for _, p := range []string{filepath.Join(dirOne, "node.key"), filepath.Join(dirOne, "node.one.json")} {
		if info, err := os.Stat(p); err != nil || info.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want 0600", p, info, err)
		}
	}
	shop, postman := w.membership(shopFile), w.membership(postmanFile)

	// Each module does its job with the file its agent wrote.
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	ph := join(t, postman)
	events, work := make(chan string, 4), make(chan string, 4)
	ecc, err := ph.Events(ctx, model.Instance{Node: "two", Module: "postman"}, func(m jetstream.Msg) { events <- m.Subject(); _ = m.Ack() })
	if err != nil {
		t.Fatal(err)
	}
	defer ecc.Stop()
	wcc, err := ph.Work(ctx, "mailer", func(m jetstream.Msg) { work <- m.Subject(); _ = m.Ack() })
	if err != nil {
		t.Fatal(err)
	}
	defer wcc.Stop()
	sh := join(t, shop)
	if _, err := sh.Publish(ctx, render.ModuleEvent("shop", "order.placed"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if _, err := sh.Publish(ctx, render.AcceptSubject("mailer", "send"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []chan string{events, work} {
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatal("the postman did not hear the shop's order and take its work")
		}
	}

	// The store has both nodes reporting the generation they were declared, and the metrics
	// have both nodes' heartbeats and the seat's worker at work.
	w.wait("both nodes report their declared generation", func() bool { return atDeclared(t, w.stateDir, "one", "two") })
	w.wait("the metrics show both nodes' heartbeats and the seat at work", func() bool {
		m := w.scrape()
		return strings.Contains(m, `meshctl_controller_node_last_heartbeat_timestamp_seconds{node="one"}`) &&
			strings.Contains(m, `meshctl_controller_node_last_heartbeat_timestamp_seconds{node="two"}`) &&
			strings.Contains(m, `meshctl_controller_seat_worker_bound{seat="mailer"} 1`) &&
			strings.Contains(m, `meshctl_controller_seat_work_waiting{seat="mailer"} 0`)
	})

	// The shop moves to node two.
	w.write(strings.Replace(mesh, "    on: [one]\n    emits", "    on: [two]\n    emits", 1))
	movedFile := filepath.Join(dirTwo, "two.shop.json")
	w.wait("the shop's file leaves node one and arrives on node two", func() bool { return !exists(shopFile) && exists(movedFile) })
	w.wait("node one's shop credential is refused", func() bool {
		jctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		h, err := host.Join(jctx, shop)
		if err == nil {
			h.Close()
		}
		return errors.Is(err, nats.ErrAuthorization)
	})
	moved := w.membership(movedFile)
	if _, err := join(t, moved).Publish(ctx, render.ModuleEvent("shop", "order.placed"), []byte("{}")); err != nil {
		t.Fatalf("the shop on node two cannot emit: %v", err)
	}
	w.wait("both nodes report the moved generation", func() bool { return atDeclared(t, w.stateDir, "one", "two") })

	// The enrolment credential was spent: replaying it enrols nobody.
	err = Run(ctx, Config{Dir: filepath.Join(t.TempDir(), "again"), Enrolment: enrol["one"], EnrolTimeout: 5 * time.Second})
	if !errors.Is(err, ErrEnrolment) {
		t.Fatalf("a second enrolment with the spent credential: %v, want ErrEnrolment", err)
	}

	// No plaintext password in any log, in the store's files, or in the declarations kept on
	// the bus: there, only sealed.
	logs := w.logs.String()
	kept := w.declarationsKept("one", "two")
	var store []byte
	for _, f := range []string{"meshctl.db", "meshctl.db-wal"} {
		data, _ := os.ReadFile(filepath.Join(w.stateDir, f))
		store = append(store, data...)
	}
	for _, m := range []host.Membership{shop, postman, moved, w.membership(filepath.Join(dirOne, "node.one.json"))} {
		if strings.Contains(logs, m.Password) {
			t.Errorf("%s's password is in the log", m.User)
		}
		if bytes.Contains(store, []byte(m.Password)) {
			t.Errorf("%s's password is in the store", m.User)
		}
		if bytes.Contains(kept, []byte(m.Password)) {
			t.Errorf("%s's password is in a declaration on the bus", m.User)
		}
	}
}

// controllerJS is JetStream as the controller, with the password watch minted.
func (w *world) controllerJS() jetstream.JetStream {
	w.t.Helper()
	pw, err := os.ReadFile(filepath.Join(w.stateDir, "controller.password"))
	if err != nil {
		w.t.Fatal(err)
	}
	return join(w.t, host.Membership{Address: w.busURL(), User: render.ControllerUser, Password: strings.TrimSpace(string(pw))}).JetStream()
}

// declarationsKept is the last declaration NODES keeps for each node, read as the controller,
// with each instance's membership field as it is carried.
func (w *world) declarationsKept(nodes ...string) []byte {
	w.t.Helper()
	pw, err := os.ReadFile(filepath.Join(w.stateDir, "controller.password"))
	if err != nil {
		w.t.Fatal(err)
	}
	h := join(w.t, host.Membership{Address: w.busURL(), User: render.ControllerUser, Password: strings.TrimSpace(string(pw))})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := h.JetStream().Stream(ctx, render.StreamNodes)
	if err != nil {
		w.t.Fatal(err)
	}
	var all []byte
	for _, n := range nodes {
		m, err := s.GetLastMsgForSubject(ctx, render.DeclareSubject(n))
		if err != nil {
			w.t.Fatal(err)
		}
		var d wire.Declaration
		if err := json.Unmarshal(m.Data, &d); err != nil || d.Node != n {
			w.t.Fatalf("NODES keeps %q for node %s (%v)", m.Data, n, err)
		}
		// The memberships as they travel, not base64 of them: a plaintext one would show here.
		all = append(all, m.Data...)
		for _, in := range d.Instances {
			all = append(all, in.Membership...)
		}
	}
	return all
}

// atDeclared reports whether `meshctl status` shows every node at the generation it was last
// declared: its report of it recorded, with nothing it could not apply.
func atDeclared(t *testing.T, stateDir string, nodes ...string) bool {
	t.Helper()
	st, err := state.Open(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	status, err := controller.Nodes(context.Background(), st, state.Inventory{Nodes: nodes})
	if err != nil {
		return false
	}
	for _, n := range status {
		if !n.Converged() {
			return false
		}
	}
	return len(status) == len(nodes)
}

// An agent outlives its bus: the control host restarts (watch and its embedded bus stop and start
// again on the same store and port), and the agent reconnects, binds its declaration consumer
// again and applies what was declared meanwhile.
func TestAnAgentRejoinsAcrossABusRestart(t *testing.T) {
	t.Parallel()
	w, description := worldOnAPort(t)
	stop := w.startWatch()
	enrol := w.issueEnrolments("one")
	dir := w.runAgent(enrol["one"])
	w.wait("node one writes the shop's membership", func() bool { return exists(filepath.Join(dir, "one.shop.json")) })

	stop()
	w.write(description + "  - name: audit\n    on: [one]\n    emits: [checked]\n")
	t.Cleanup(w.startWatch())
	w.wait("node one, reconnected, writes the new module's membership", func() bool { return exists(filepath.Join(dir, "one.audit.json")) })
	join(t, w.membership(filepath.Join(dir, "one.audit.json")))
	if !strings.Contains(w.logs.String(), "agent: reconnected to the bus") {
		t.Errorf("the agent did not say it reconnected:\n%s", w.logs.String())
	}
}

// An agent keeps taking declarations when bus.consumers changes: watch replaces the node's
// declaration consumer with one of the other kind, and the agent, finding it so at a heartbeat,
// binds it again; a module added afterwards is written. Both ways, pull to push and back.
func TestAnAgentFollowsAChangeOfConsumerKind(t *testing.T) {
	t.Parallel()
	w := startWorld(t, mesh) // pull: the default
	enrol := w.issueEnrolments("one")
	dir := w.runAgent(enrol["one"])
	w.wait("node one writes the shop's membership", func() bool { return exists(filepath.Join(dir, "one.shop.json")) })

	js := w.controllerJS()
	var modules string
	for i, kind := range []string{model.ConsumersPush, model.ConsumersPull} {
		description := "bus:\n  consumers: " + kind + "\n" + strings.TrimPrefix(mesh, "bus:\n")
		w.write(description + modules)
		w.wait("the declaration consumer becomes "+kind, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			info, err := host.ConsumerInfo(ctx, js, render.StreamNodes, "one")
			return err == nil && (info.Config.DeliverSubject != "") == (kind == model.ConsumersPush)
		})
		module := "audit" + strconv.Itoa(i)
		modules += "  - name: " + module + "\n    on: [one]\n    emits: [checked]\n"
		w.write(description + modules)
		w.wait("node one writes the "+module+" membership after the change to "+kind, func() bool {
			return exists(filepath.Join(dir, "one."+module+".json"))
		})
	}
}

// A control host lost: its store restored on a new directory from the bus, the watch there
// declares the next generation to an agent that enrolled with the old one, and the agent takes
// it without enrolling again — its key is the one the restored store holds.
func TestAnEnrolledAgentTakesItsNextDeclarationFromARestoredStore(t *testing.T) {
	t.Parallel()
	srv := bustest.StartTestServer(t, t.TempDir())
	w := &world{t: t, dir: t.TempDir(), stateDir: t.TempDir(), hup: make(chan os.Signal, 1), logs: &lockedbuf.Buffer{}, more: make(chan struct{})}
	w.write(srv.Mesh())
	stop := w.startWatch()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()

	st, err := state.Open(w.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	passwords, err := st.Mint(ctx, []string{render.EnrolUser("alpha")}, bcrypt.MinCost, "credentials issue")
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	from := len(w.cycles)
	w.mu.Unlock()
	w.hup <- os.Interrupt
	w.wait("the reconcile after issuing", func() bool {
		return slices.ContainsFunc(w.cycles[from:], func(c watch.Cycle) bool { return c.Outcome == watch.OutcomeOK })
	})
	enrolment := filepath.Join(t.TempDir(), "enrol.json")
	data, _ := json.Marshal(host.Membership{Address: srv.URL, Fingerprint: srv.Fingerprint, User: render.EnrolUser("alpha"), Password: passwords[render.EnrolUser("alpha")]})
	if err := os.WriteFile(enrolment, data, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := w.runAgent(enrolment)
	shop := filepath.Join(dir, "alpha.shop.json")
	w.wait("the agent writes its module's membership", func() bool { return exists(shop) })
	before := w.enrolment(ctx, "alpha")

	// The control host is lost; a new one restores the store from the bus and watches.
	stop()
	password, err := os.ReadFile(filepath.Join(w.stateDir, "controller.password"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(w.dir)
	if err != nil {
		t.Fatal(err)
	}
	w.stateDir = filepath.Join(t.TempDir(), "restored")
	restored, _, err := reconcile.Restore(ctx, m, w.stateDir, strings.TrimSpace(string(password)), true)
	if err != nil {
		t.Fatal(err)
	}
	restored.Close()
	t.Cleanup(w.startWatch())

	w.write(srv.Mesh() + "  - name: audit\n    on: [alpha]\n    follows: [shop/order.placed]\n")
	audit := filepath.Join(dir, "alpha.audit.json")
	w.wait("the agent takes the restored watch's next declaration", func() bool { return exists(audit) })
	join(t, w.membership(audit))
	if after := w.enrolment(ctx, "alpha"); !bytes.Equal(after, before) {
		t.Errorf("the node's key changed across the restore: it enrolled again")
	}
	if strings.Count(w.logs.String(), "enrolled node alpha") > 1 {
		t.Errorf("the node enrolled more than once:\n%s", w.logs.String())
	}
}

// enrolment is the public key the world's store holds for node.
func (w *world) enrolment(ctx context.Context, node string) []byte {
	w.t.Helper()
	st, err := state.Open(w.stateDir)
	if err != nil {
		w.t.Fatal(err)
	}
	defer st.Close()
	all, err := st.Enrolments(ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	for _, e := range all {
		if e.Node == node {
			return e.PublicKey
		}
	}
	w.t.Fatalf("the store holds no enrolment of %s", node)
	return nil
}
