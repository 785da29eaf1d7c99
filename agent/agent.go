package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/controller"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/atomicfile"
	"github.com/meshbus/meshctl/render"
)

// Defaults for the zero values of Config.
const (
	DefaultHeartbeat    = 10 * time.Second
	DefaultEnrolTimeout = 30 * time.Second
)

// keyFileName holds the node's key pair; a node's membership is node.<node>.json beside it.
const keyFileName = "node.key"

// Config says where the agent keeps its node's files and how it enrols.
type Config struct {
	// Dir is the node's directory: its key, its membership, its instances' memberships.
	Dir string
	// Enrolment is the file holding the one-time enrolment membership, read only when Dir holds
	// no node membership yet.
	Enrolment string
	// Heartbeat is how often the agent says it is alive.
	Heartbeat time.Duration
	// EnrolTimeout bounds the wait for the controller's enrolment answer.
	EnrolTimeout time.Duration
	// Logger receives what the agent did; nil discards it.
	Logger *slog.Logger
	// Observe, when set, is told each declaration the agent applied, on its goroutine (tests).
	Observe func(Applied)
}

// Applied is one declaration as the agent applied it: what it reported.
type Applied struct {
	Node   string
	Report controller.Report
	// Removed are the membership files of instances no longer declared, deleted.
	Removed []string
}

// ErrEnrolment is returned (wrapped) when the node could not enrol: the controller refused, or
// the enrolment credential no longer joins.
var ErrEnrolment = errors.New("the node could not enrol")

// Run enrols the node if it has not, then applies its declarations and heartbeats until ctx
// ends. It returns an error when it cannot start: the directory, the key or the enrolment fail.
func Run(ctx context.Context, c Config) error {
	if c.Heartbeat <= 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.EnrolTimeout <= 0 {
		c.EnrolTimeout = DefaultEnrolTimeout
	}
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if c.Dir == "" {
		return errors.New("the agent needs a directory for the node's key and memberships")
	}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return fmt.Errorf("making the node's directory: %w", err)
	}
	if err := os.Chmod(c.Dir, 0o700); err != nil {
		return fmt.Errorf("restricting the node's directory: %w", err)
	}
	k, err := loadOrMakeKey(c.Dir)
	if err != nil {
		return err
	}
	node, m, enrolled, err := nodeMembership(ctx, c, k, log)
	if err != nil {
		return err
	}
	a := &agent{cfg: c, log: log.With("node", node), node: node, key: k}
	if enrolled {
		a.enrolledAt = time.Now()
	}
	return a.run(ctx, m)
}

// key is the node's key pair.
type key struct {
	Public  []byte `json:"public"`
	Private []byte `json:"private"`
}

// loadOrMakeKey reads the node's key pair, making it (0600) on first start.
func loadOrMakeKey(dir string) (key, error) {
	path := filepath.Join(dir, keyFileName)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		pub, priv, err := controller.GenerateKey()
		if err != nil {
			return key{}, err
		}
		k := key{Public: pub, Private: priv}
		data, _ := json.Marshal(k)
		if err := atomicfile.Write(path, data); err != nil {
			return key{}, fmt.Errorf("keeping the node's key in %s: %w", path, err)
		}
		return k, nil
	}
	if err != nil {
		return key{}, fmt.Errorf("reading the node's key: %w", err)
	}
	var k key
	if err := json.Unmarshal(data, &k); err != nil || len(k.Public) != controller.KeySize || len(k.Private) != controller.KeySize {
		return key{}, fmt.Errorf("the node's key in %s is not a key pair; move it aside to enrol anew with a fresh enrolment credential", path)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return key{}, fmt.Errorf("restricting the node's key: %w", err)
	}
	return k, nil
}

func readMembership(path string) (host.Membership, error) {
	f, err := os.Open(path)
	if err != nil {
		return host.Membership{}, err
	}
	defer f.Close()
	m, err := host.ReadMembership(f)
	if err != nil {
		return host.Membership{}, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// nodeMembership is the node's own membership: the one in the directory, or the one enrolment
// brings (enrolled then says so).
func nodeMembership(ctx context.Context, c Config, k key, log *slog.Logger) (string, host.Membership, bool, error) {
	have, err := filepath.Glob(filepath.Join(c.Dir, render.NodeUser("*")+".json"))
	if err != nil {
		return "", host.Membership{}, false, err
	}
	switch len(have) {
	case 0:
	case 1:
		m, err := readMembership(have[0])
		if err != nil {
			return "", host.Membership{}, false, err
		}
		node := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(have[0]), render.NodeUser("")), ".json")
		if m.User != render.NodeUser(node) {
			return "", host.Membership{}, false, fmt.Errorf("%s holds %s's membership, not node %s's", have[0], m.User, node)
		}
		return node, m, false, nil
	default:
		return "", host.Membership{}, false, fmt.Errorf("%s holds the memberships of %d nodes; an agent runs one", c.Dir, len(have))
	}
	if c.Enrolment == "" {
		return "", host.Membership{}, false, fmt.Errorf("%s holds no node membership yet: enrol with --membership, the file `meshctl credentials issue enrol.<node>` wrote", c.Dir)
	}
	em, err := readMembership(c.Enrolment)
	if err != nil {
		return "", host.Membership{}, false, err
	}
	node, ok := strings.CutPrefix(em.User, render.EnrolUser(""))
	if !ok || node == "" {
		return "", host.Membership{}, false, fmt.Errorf("%s is %s's membership, not a node's enrolment identity (enrol.<node>)", c.Enrolment, em.User)
	}
	m, err := enrol(ctx, c, node, em, k)
	if err != nil {
		return "", host.Membership{}, false, err
	}
	path := filepath.Join(c.Dir, m.User+".json")
	data, _ := json.Marshal(m)
	if err := atomicfile.Write(path, data); err != nil {
		return "", host.Membership{}, false, fmt.Errorf("keeping the node's membership: %w", err)
	}
	log.Info("enrolled: the node's membership is kept", "node", node, "file", path)
	return node, m, true, nil
}

// enrol asks the controller to enrol node, as its enrolment identity, and opens the answer.
func enrol(ctx context.Context, c Config, node string, em host.Membership, k key) (host.Membership, error) {
	ctx, cancel := context.WithTimeout(ctx, c.EnrolTimeout)
	defer cancel()
	ident, err := host.Join(ctx, em)
	if errors.Is(err, nats.ErrAuthorization) {
		return host.Membership{}, fmt.Errorf("%w: the bus refuses %s: an enrolment credential enrols once; issue a fresh one with `meshctl credentials issue %s`",
			ErrEnrolment, em.User, em.User)
	}
	if err != nil {
		return host.Membership{}, fmt.Errorf("enrolling node %s: %w", node, err)
	}
	defer ident.Close()
	msg, err := ident.Enrol(ctx, node, k.Public)
	if err != nil {
		return host.Membership{}, err
	}
	var a controller.EnrolAnswer
	if err := json.Unmarshal(msg.Data, &a); err != nil {
		return host.Membership{}, fmt.Errorf("enrolling node %s: the answer is not JSON: %w", node, err)
	}
	if a.Refused != "" {
		return host.Membership{}, fmt.Errorf("%w: the controller refused: %s", ErrEnrolment, a.Refused)
	}
	opened, err := controller.Open(k.Public, k.Private, a.Membership)
	if err != nil {
		return host.Membership{}, fmt.Errorf("enrolling node %s: %w", node, err)
	}
	m, err := host.ReadMembership(bytes.NewReader(opened))
	if err != nil {
		return host.Membership{}, fmt.Errorf("enrolling node %s: %w", node, err)
	}
	if m.User != render.NodeUser(node) {
		return host.Membership{}, fmt.Errorf("%w: the answer is %s's membership, not %s's", ErrEnrolment, m.User, render.NodeUser(node))
	}
	return m, nil
}

// agent is the state of the node's loop, owned by its goroutine.
type agent struct {
	cfg        Config
	log        *slog.Logger
	node       string
	key        key
	h          *host.Host
	generation uint64
	// enrolledAt is when this run enrolled the node; zero when it was enrolled before.
	enrolledAt time.Time
}

// run joins as the node and runs the loop until ctx ends.
func (a *agent) run(ctx context.Context, m host.Membership) error {
	h, err := a.join(ctx, m)
	if err != nil {
		return nil // ctx ended while the bus was not letting the node in
	}
	defer h.Close()
	a.h = h
	// The library hands deliveries over on its goroutine; the loop takes them here, one at a
	// time, beside the heartbeat.
	decls := make(chan jetstream.Msg)
	cc, push := a.bind(ctx, decls)
	if cc == nil {
		return nil // ctx ended
	}
	defer func() { cc.Stop() }()
	a.log.Info("agent: taking declarations", "bus", h.Address(), "dir", a.cfg.Dir, "heartbeat", a.cfg.Heartbeat)

	beat := time.NewTicker(a.cfg.Heartbeat)
	defer beat.Stop()
	a.heartbeat(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case msg := <-decls:
			a.apply(ctx, msg)
		case <-beat.C:
			a.heartbeat(ctx)
			if a.kindChanged(ctx, push) {
				// bus.consumers changed and the controller replaced the consumer with one of
				// the other kind: the binding it had takes nothing from the new one.
				a.log.Info("agent: the declaration consumer changed kind; binding it again")
				cc.Stop()
				if cc, push = a.bind(ctx, decls); cc == nil {
					return nil
				}
			}
		}
	}
}

// reloadGrace is how long after enrolling a refused login is the expected wait for the
// controller's reload rather than a problem: the controller waits that long for the reload,
// and past it the refusal is a warning again.
const reloadGrace = controller.DefaultSyncTimeout

// bind binds the node's declaration consumer, trying again until it can or ctx ends (nil), and
// says whether it is a push consumer.
func (a *agent) bind(ctx context.Context, decls chan<- jetstream.Msg) (jetstream.ConsumeContext, bool) {
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		info, err := host.ConsumerInfo(ctx, a.h.JetStream(), render.StreamNodes, a.node)
		var cc jetstream.ConsumeContext
		if err == nil {
			cc, err = a.h.Declarations(ctx, a.node, func(msg jetstream.Msg) {
				select {
				case decls <- msg:
				case <-ctx.Done():
				}
			})
		}
		if err == nil {
			return cc, info.Config.DeliverSubject != ""
		}
		a.log.Warn("agent: the declaration consumer cannot be bound yet; trying again", "error", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return nil, false
		case <-time.After(wait):
		}
	}
}

// kindChanged reports whether the declaration consumer is no longer of the kind bound (push or
// not). A consumer that cannot be read now is left bound: the next heartbeat asks again.
func (a *agent) kindChanged(ctx context.Context, push bool) bool {
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	info, err := host.ConsumerInfo(ictx, a.h.JetStream(), render.StreamNodes, a.node)
	return err == nil && (info.Config.DeliverSubject != "") != push
}

// join joins as the node, reconnecting for as long as it takes: right after enrolment the
// node's credential goes live a moment after the answer, and later the bus restarts and reloads.
func (a *agent) join(ctx context.Context, m host.Membership) (*host.Host, error) {
	opts := []nats.Option{
		nats.MaxReconnects(-1), nats.IgnoreAuthErrorAbort(), nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			a.log.Warn("agent: disconnected from the bus; reconnecting", "bus", m.Address, "error", err)
		}),
		nats.ReconnectHandler(func(*nats.Conn) { a.log.Info("agent: reconnected to the bus", "bus", m.Address) }),
	}
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		jctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		h, err := host.Join(jctx, m, opts...)
		cancel()
		if err == nil {
			return h, nil
		}
		if errors.Is(err, nats.ErrAuthorization) && !a.enrolledAt.IsZero() && time.Since(a.enrolledAt) < reloadGrace {
			// Expected: the controller answered first and makes the credential live with the
			// reload that follows (answering after it would cut the enrolment identity off).
			a.log.Info("agent: waiting for the controller's reload to make the node's credential live", "retry_in", wait)
		} else {
			a.log.Warn("agent: the bus does not let the node in yet; trying again", "error", err, "retry_in", wait)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

func (a *agent) heartbeat(ctx context.Context) {
	data, _ := json.Marshal(controller.Heartbeat{At: time.Now(), Generation: a.generation})
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := a.h.Heartbeat(hctx, a.node, data); err != nil && ctx.Err() == nil {
		a.log.Warn("agent: a heartbeat was not sent", "error", err)
	}
}

// apply writes what a declaration declares, removes what it no longer does, reports, and only
// then acknowledges: a declaration whose report did not reach the controller is delivered again
// and applied again, which changes nothing on disk.
func (a *agent) apply(ctx context.Context, msg jetstream.Msg) {
	var d controller.Declaration
	if err := json.Unmarshal(msg.Data(), &d); err != nil || d.Node != a.node {
		a.log.Error("agent: a declaration that is not this node's, let go", "subject", msg.Subject())
		_ = a.h.Term(ctx, msg)
		return
	}
	r := controller.Report{Generation: d.Generation, Failed: map[string]string{}}
	declared := map[string]bool{}
	for _, in := range d.Instances {
		if err := a.write(in); err != nil {
			r.Failed[in.User] = err.Error()
			continue
		}
		declared[in.User] = true
		r.Applied = append(r.Applied, in.User)
	}
	removed, err := a.removeUndeclared(declared)
	if err != nil {
		r.Failed["(removing)"] = err.Error()
	}
	data, _ := json.Marshal(r)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := a.h.Report(rctx, a.node, data); err != nil {
		a.log.Error("agent: applied a declaration but could not report it; it is delivered again", "generation", d.Generation, "error", err)
		return
	}
	if err := a.h.Ack(rctx, msg); err != nil {
		a.log.Warn("agent: the declaration was not acknowledged; it is delivered again", "error", err)
	}
	a.generation = d.Generation
	a.log.Info("agent: applied a declaration", "generation", d.Generation, "written", len(r.Applied), "failed", len(r.Failed), "removed", removed)
	if a.cfg.Observe != nil {
		a.cfg.Observe(Applied{Node: a.node, Report: r, Removed: removed})
	}
}

// write opens an instance's sealed membership and writes it to <user>.json, atomically, 0600.
func (a *agent) write(in controller.Instance) error {
	inst, ok := host.InstanceOf(in.User)
	if !ok || inst.Node != a.node {
		return fmt.Errorf("%q is not an instance of node %s", in.User, a.node)
	}
	opened, err := controller.Open(a.key.Public, a.key.Private, in.Membership)
	if err != nil {
		return err
	}
	m, err := host.ReadMembership(bytes.NewReader(opened))
	if err != nil {
		return err
	}
	if m.User != in.User {
		return fmt.Errorf("the sealed membership is %s's, not %s's", m.User, in.User)
	}
	if err := atomicfile.Write(filepath.Join(a.cfg.Dir, in.User+".json"), opened); err != nil {
		return fmt.Errorf("writing %s's membership: %w", in.User, err)
	}
	return nil
}

// removeUndeclared deletes the membership files of this node's instances that are not declared.
// Only <node>.<module>.json files are its to remove; the key, the node's own membership and
// anything else in the directory are left alone.
func (a *agent) removeUndeclared(declared map[string]bool) ([]string, error) {
	entries, err := os.ReadDir(a.cfg.Dir)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		user, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || e.IsDir() {
			continue
		}
		inst, isInstance := host.InstanceOf(user)
		if !isInstance || inst.Node != a.node || declared[user] {
			continue
		}
		if err := os.Remove(filepath.Join(a.cfg.Dir, e.Name())); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, user)
	}
	slices.Sort(removed)
	return removed, errors.Join(errs...)
}
