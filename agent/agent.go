package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/atomicfile"
	"github.com/meshbus/meshctl/internal/backoff"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/wire"
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
	Report wire.Report
	// Removed are the membership files of instances no longer declared, deleted.
	Removed []string
	// ByHand are the instances declared with a credential issued by hand, left alone.
	ByHand []string
}

// ErrEnrolment is returned (wrapped) when the node could not enrol: the controller refused, or
// the bus refuses the enrolment credential.
var ErrEnrolment = errors.New("the node could not enrol")

// ErrRemoved is returned (wrapped) when the bus refuses the node's credential after it let the
// node in with it: the node left the description, or its credential was revoked.
var ErrRemoved = errors.New("the node was removed")

// Run enrols the node if it has not, then applies its declarations and heartbeats until ctx
// ends, waiting for the bus whenever it is down. It returns an error when it cannot start (the
// directory, the key or the enrolment fail) and when the node was removed (ErrRemoved); an end
// of ctx is no error, whatever the agent was doing.
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
	if ctx.Err() != nil {
		return nil // stopped while enrolling
	}
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
		pub, priv, err := wire.GenerateKey()
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
	if err := json.Unmarshal(data, &k); err != nil || len(k.Public) != wire.KeySize || len(k.Private) != wire.KeySize {
		return key{}, fmt.Errorf("the node's key in %s is not a key pair; move it aside to enrol anew with a fresh enrolment credential", path)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return key{}, fmt.Errorf("restricting the node's key: %w", err)
	}
	return k, nil
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
		m, err := host.ReadMembershipFile(have[0])
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
	em, err := host.ReadMembershipFile(c.Enrolment)
	if err != nil {
		return "", host.Membership{}, false, err
	}
	node, ok := strings.CutPrefix(em.User, render.EnrolUser(""))
	if !ok || node == "" {
		return "", host.Membership{}, false, fmt.Errorf("%s is %s's membership, not a node's enrolment identity (enrol.<node>)", c.Enrolment, em.User)
	}
	m, err := enrol(ctx, c, node, em, k, log)
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

// enrol asks the controller to enrol node, as its enrolment identity, and opens the answer. It
// waits for the bus as long as it is down; EnrolTimeout bounds only the wait for the answer.
func enrol(ctx context.Context, c Config, node string, em host.Membership, k key, log *slog.Logger) (host.Membership, error) {
	ident, err := connect(ctx, log, em, func(*waiting, error) error {
		// Nothing to wait for: the controller makes an enrolment credential live when it is
		// issued, so the bus refusing it is final.
		return fmt.Errorf("%w: the bus refuses %s: the credential was used already (an enrolment credential enrols once) or revoked, "+
			"or node %s is not in the description; issue a fresh one with `meshctl credentials issue %s`", ErrEnrolment, em.User, node, em.User)
	})
	if err != nil {
		return host.Membership{}, err
	}
	defer ident.Close()
	ctx, cancel := context.WithTimeout(ctx, c.EnrolTimeout)
	defer cancel()
	msg, err := ident.Enrol(ctx, node, k.Public)
	if err != nil {
		return host.Membership{}, err
	}
	var a wire.EnrolAnswer
	if err := json.Unmarshal(msg.Data, &a); err != nil {
		return host.Membership{}, fmt.Errorf("enrolling node %s: the answer is not JSON: %w", node, err)
	}
	if a.Refused != "" {
		return host.Membership{}, fmt.Errorf("%w: the controller refused: %s", ErrEnrolment, a.Refused)
	}
	opened, err := wire.Open(k.Public, k.Private, a.Membership)
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

// run joins as the node and runs the loop until ctx ends or the node is found removed.
//
// Removed means the bus refuses the node's credential after it let the node in with it in this
// run: nothing but the controller dropping the node (it left the description) or an operator
// revoking or reissuing its credential takes a live credential away, and a bus restarting or
// reloading keeps it. A refusal before that is not taken for removal, however long it lasts:
// right after enrolment the credential is live only once the controller's reload follows its
// answer, and a controller whose reload fails makes it live at its next reconcile, with no
// bound an agent could wait out and be sure.
func (a *agent) run(ctx context.Context, m host.Membership) error {
	ctx, refused := context.WithCancelCause(ctx)
	defer refused(nil)
	a.serve(ctx, m, refused)
	if !errors.Is(context.Cause(ctx), errRefusedOnceIn) {
		return nil // ctx ended
	}
	removed, err := a.removeUndeclared(nil)
	gone := "none"
	if len(removed) > 0 {
		gone = strings.Join(removed, ", ")
	}
	if err != nil {
		gone += fmt.Sprintf(" (and could not remove the others: %v)", err)
	}
	return fmt.Errorf("%w: the bus refuses %s, which it let in before: node %s is not in the description, or its credential was revoked. "+
		"Its modules' memberships, whose credentials are dead, are removed: %s. To bring it back, re-enrol: issue `meshctl credentials issue %s` "+
		"on the control host, move %s aside and start the agent with --membership",
		ErrRemoved, m.User, a.node, gone, render.EnrolUser(a.node), filepath.Join(a.cfg.Dir, m.User+".json"))
}

// errRefusedOnceIn is the cause run's context ends with when the bus refused the node's
// credential on a reconnect, after it had let the node in with it.
var errRefusedOnceIn = errors.New("the node's credential was refused after it was let in")

// serve joins as the node and runs the loop until ctx ends. refused ends ctx when the bus
// refuses the node's credential once it has let the node in.
func (a *agent) serve(ctx context.Context, m host.Membership, refused context.CancelCauseFunc) {
	// The handlers run on the connection's one callback goroutine, which alone touches down.
	down := &waiting{log: a.log}
	h, err := a.join(ctx, m,
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			down.failed(slog.LevelWarn, "agent: disconnected from the bus; reconnecting", err, "bus", m.Address)
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			down.failed(slog.LevelWarn, "agent: disconnected from the bus; reconnecting", err, "bus", m.Address)
		}),
		nats.ReconnectHandler(func(*nats.Conn) {
			down.reset()
			a.log.Info("agent: reconnected to the bus", "bus", m.Address)
		}),
		// nats.go reports a refused login to this handler only on a reconnect (or a live
		// connection the server drops as unauthorised), never on the first connect: so a
		// refusal here is one of a credential the bus let in before.
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrAuthorization) {
				refused(errRefusedOnceIn)
			}
		}),
	)
	if err != nil {
		return // ctx ended while the bus was not letting the node in
	}
	defer h.Close()
	a.h = h
	// The library hands deliveries over on its goroutine; the loop takes them here, one at a
	// time, beside the heartbeat.
	decls := make(chan jetstream.Msg)
	cc, push := a.bind(ctx, decls)
	if cc == nil {
		return // ctx ended
	}
	defer func() { cc.Stop() }()
	a.log.Info("agent: taking declarations", "bus", h.Address(), "dir", a.cfg.Dir, "heartbeat", a.cfg.Heartbeat)

	beat := time.NewTicker(a.cfg.Heartbeat)
	defer beat.Stop()
	a.heartbeat(ctx)
	for {
		select {
		case <-ctx.Done():
			return
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
					return
				}
			}
		}
	}
}

// reloadGrace is how long after enrolling a refused login is the expected wait for the
// controller's reload rather than a problem: the controller waits that long for the reload,
// and past it the refusal is a warning again.
const reloadGrace = wire.DefaultSyncTimeout

// bind binds the node's declaration consumer, trying again until it can or ctx ends (nil), and
// says whether it is a push consumer.
func (a *agent) bind(ctx context.Context, decls chan<- jetstream.Msg) (jetstream.ConsumeContext, bool) {
	var cc jetstream.ConsumeContext
	var push bool
	w := &waiting{log: a.log}
	retry(ctx, func() bool {
		info, err := host.ConsumerInfo(ctx, a.h.JetStream(), render.StreamNodes, a.node)
		if err == nil {
			cc, err = a.h.Declarations(ctx, a.node, func(msg jetstream.Msg) {
				select {
				case decls <- msg:
				case <-ctx.Done():
				}
			})
		}
		if err != nil {
			w.failed(slog.LevelWarn, "agent: the declaration consumer cannot be bound yet; trying again", err)
			return false
		}
		push = info.Config.DeliverSubject != ""
		return true
	})
	return cc, push
}

// kindChanged reports whether the declaration consumer is no longer of the kind bound (push or
// not). A consumer that cannot be read now is left bound: the next heartbeat asks again.
func (a *agent) kindChanged(ctx context.Context, push bool) bool {
	ictx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	info, err := host.ConsumerInfo(ictx, a.h.JetStream(), render.StreamNodes, a.node)
	return err == nil && (info.Config.DeliverSubject != "") != push
}

// join joins as the node, with opts, and reconnects for as long as it takes: right after
// enrolment the node's credential goes live a moment after the answer, and later the bus
// restarts and reloads. A refusal before the first join is waited out (see run).
func (a *agent) join(ctx context.Context, m host.Membership, opts ...nats.Option) (*host.Host, error) {
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.IgnoreAuthErrorAbort(), nats.ReconnectWait(250 * time.Millisecond)}, opts...)
	return connect(ctx, a.log, m, func(w *waiting, err error) error {
		if !a.enrolledAt.IsZero() && time.Since(a.enrolledAt) < reloadGrace {
			// Expected: the controller answered first and makes the credential live with the
			// reload that follows (answering after it would cut the enrolment identity off).
			w.failed(slog.LevelInfo, "agent: waiting for the controller's reload to make the node's credential live", err)
			return nil
		}
		w.failed(slog.LevelWarn, "agent: the bus refuses the node's credential; trying again", err, "if_it_goes_on",
			fmt.Sprintf("node %s is not in the description, or its credential was revoked: re-enrol with `meshctl credentials issue %s`",
				a.node, render.EnrolUser(a.node)))
		return nil
	}, opts...)
}

// Waiting for the bus. Every loop that tries again — connecting as the enrolment identity or
// the node, binding the declaration consumer — waits between attempts as retry does, and says
// so through a waiting, so a bus down for an hour is a line a minute or so, not one per attempt.
const (
	firstWait = 100 * time.Millisecond
	maxWait   = 5 * time.Second
	// noticeEvery is how often a wait that goes on is said again.
	noticeEvery = 30 * time.Second
	// attemptTimeout bounds one attempt at the bus: a connect, a question to the server.
	attemptTimeout = 5 * time.Second
)

// retry calls attempt until it reports done or ctx ends, waiting firstWait after the first
// failure and twice as long after each next one, up to maxWait. It reports whether attempt
// succeeded.
func retry(ctx context.Context, attempt func() (done bool)) bool {
	return backoff.Retry(ctx, backoff.Backoff{Min: firstWait, Max: maxWait}, attempt)
}

// waiting says what a wait is for: its first failure at once, and then, while the failures go
// on saying the same, one line every noticeEvery with how many tries and how long so far.
type waiting struct {
	log   *slog.Logger
	since time.Time // the first failure of this wait
	said  time.Time // the last line
	msg   string    // what the last line said
	tries int
}

func (w *waiting) failed(level slog.Level, msg string, err error, attrs ...any) {
	now := time.Now()
	if w.tries == 0 {
		w.since = now
	}
	w.tries++
	if w.tries > 1 && msg == w.msg && now.Sub(w.said) < noticeEvery {
		return
	}
	w.said, w.msg = now, msg
	w.log.Log(context.Background(), level, msg, append(attrs, "error", err, "tries", w.tries, "for", now.Sub(w.since).Round(time.Second))...)
}

// reset starts a new wait: the wait before it ended.
func (w *waiting) reset() { *w = waiting{log: w.log} }

// connect joins the bus as m.User, with opts, trying again as retry does while the bus is down
// or cuts the connection off (an EOF under load). A refusal of the credential is told apart and
// handed to refused, which logs the wait and returns nil to go on trying, or returns the error
// to stop with. It returns ctx's error when ctx ends first.
func connect(ctx context.Context, log *slog.Logger, m host.Membership, refused func(*waiting, error) error, opts ...nats.Option) (*host.Host, error) {
	opts = append(opts, nats.SetCustomDialer(contextDialer{ctx}))
	w := &waiting{log: log}
	var h *host.Host
	var stop error
	retry(ctx, func() bool {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		defer cancel()
		var err error
		if h, err = host.Join(actx, m, opts...); err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if errors.Is(err, nats.ErrAuthorization) {
			stop = refused(w, err)
			return stop != nil
		}
		w.failed(slog.LevelWarn, "agent: waiting for the bus", err, "user", m.User)
		return false
	})
	switch {
	case h != nil:
		return h, nil
	case stop != nil:
		return nil, stop
	}
	return nil, ctx.Err()
}

// contextDialer dials each of a connection's sockets and closes it when ctx ends. nats.go's
// connect and its reconnect loop watch no context: on a bus that takes the socket and never
// answers they wait out their timeout holding the connection's lock, so that neither a stop
// nor Close could end them; a socket closed under them ends the wait at once.
type contextDialer struct{ ctx context.Context }

func (d contextDialer) Dial(network, address string) (net.Conn, error) {
	c, err := (&net.Dialer{Timeout: attemptTimeout}).DialContext(d.ctx, network, address)
	if err != nil {
		return nil, err
	}
	return &stoppingConn{Conn: c, stop: context.AfterFunc(d.ctx, func() { c.Close() })}, nil
}

// stoppingConn is a socket that, closed, no longer waits for ctx to close it: a connection
// reconnecting for weeks leaves nothing behind per socket. A pointer, as nats.go compares
// connections.
type stoppingConn struct {
	net.Conn
	stop func() bool
}

func (c *stoppingConn) Close() error {
	c.stop()
	return c.Conn.Close()
}

func (a *agent) heartbeat(ctx context.Context) {
	data, _ := json.Marshal(wire.Heartbeat{At: time.Now(), Generation: a.generation})
	hctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	if err := a.h.Heartbeat(hctx, a.node, data); err != nil && ctx.Err() == nil {
		a.log.Warn("agent: a heartbeat was not sent", "error", err)
	}
}

// apply writes what a declaration declares, removes what it no longer does, reports, and only
// then acknowledges: a declaration whose report did not reach the controller is delivered again
// and applied again, which changes nothing on disk.
func (a *agent) apply(ctx context.Context, msg jetstream.Msg) {
	var d wire.Declaration
	if err := json.Unmarshal(msg.Data(), &d); err != nil || d.Node != a.node {
		a.log.Error("agent: a declaration that is not this node's, let go", "subject", msg.Subject())
		_ = a.h.Term(ctx, msg)
		return
	}
	r := wire.Report{Generation: d.Generation, Failed: map[string]string{}}
	declared := map[string]bool{}
	var byHand []string
	for _, in := range d.Instances {
		if in.ByHand {
			// An operator issued its credential by hand, to a host that is using it: the
			// controller kept it and sealed nothing for it. Its file here, if the operator
			// keeps one, is theirs: neither written nor removed.
			declared[in.User] = true
			byHand = append(byHand, in.User)
			continue
		}
		if err := a.write(in); err != nil {
			r.Failed[in.User] = err.Error()
			continue
		}
		declared[in.User] = true
		r.Applied = append(r.Applied, in.User)
	}
	removed, err := a.removeUndeclared(declared)
	if err != nil {
		r.Failed[wire.ReportRemoval] = err.Error()
	}
	data, _ := json.Marshal(r)
	rctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	if _, err := a.h.Report(rctx, a.node, data); err != nil {
		a.log.Error("agent: applied a declaration but could not report it; it is delivered again", "generation", d.Generation, "error", err)
		return
	}
	if err := a.h.Ack(rctx, msg); err != nil {
		a.log.Warn("agent: the declaration was not acknowledged; it is delivered again", "error", err)
	}
	a.generation = d.Generation
	attrs := []any{"generation", d.Generation, "written", len(r.Applied), "failed", len(r.Failed), "removed", removed}
	if len(byHand) > 0 {
		attrs = append(attrs, "left_alone_issued_by_hand", byHand)
	}
	a.log.Info("agent: applied a declaration", attrs...)
	if a.cfg.Observe != nil {
		a.cfg.Observe(Applied{Node: a.node, Report: r, Removed: removed, ByHand: byHand})
	}
}

// write opens an instance's sealed membership and writes it to <user>.json, atomically, 0600,
// with the user JWT the declaration carries, when it carries one, in place of its own.
func (a *agent) write(in wire.Instance) error {
	inst, ok := host.InstanceOf(in.User)
	if !ok || inst.Node != a.node {
		return fmt.Errorf("%q is not an instance of node %s", in.User, a.node)
	}
	opened, err := wire.Open(a.key.Public, a.key.Private, in.Membership)
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
	if in.JWT != "" && in.JWT != m.JWT {
		// Operator mode: a JWT issued since for the key whose seed the membership holds (its
		// grants changed). Read back as a file is, so a JWT of another key is refused here
		// rather than as a login the host keeps trying.
		m.JWT = in.JWT
		opened, _ = json.Marshal(m)
		if _, err := host.ReadMembership(bytes.NewReader(opened)); err != nil {
			return fmt.Errorf("the user JWT declared for %s: %w", in.User, err)
		}
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
