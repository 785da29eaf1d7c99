package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/backoff"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
	"github.com/meshbus/meshctl/wire"
)

// Defaults for the zero values of Config.
const (
	DefaultBound        = 5 * time.Minute
	DefaultRetry        = 5 * time.Second
	DefaultStoreTimeout = 5 * time.Second
	DefaultSyncTimeout  = wire.DefaultSyncTimeout
	// DefaultCredentialPoll reads a few thousand hashes every two seconds: milliseconds of a
	// read that takes no write lock, for a rotation declared within moments.
	DefaultCredentialPoll = 2 * time.Second
)

// deliveryBuffer is how many deliveries wait for the loop. It is above the CONTROL consumer's
// max_ack_pending (the server's default, 1,000), so the server never has more outstanding than
// the channel holds and the library's handler, which waits for room, seldom waits.
const deliveryBuffer = 1024

// heartbeatBuffer is how many heartbeats wait for the loop; one dropped is said again within an
// interval, and nothing is lost with it.
const heartbeatBuffer = 256

// Config is what the controller needs.
type Config struct {
	// Target is the bus, and the address every membership the controller seals names.
	Target busclient.Target
	// Password is the controller principal's password.
	Password string
	// Store is the state store: credentials, enrolments, declarations, reports.
	Store *state.Store
	// Cost is the bcrypt cost of the credentials the controller mints.
	Cost int
	// Sync makes the credentials in the store live on the bus and returns once they are: an
	// enrolled node's, an enrolment identity locked again, an instance's minted for a
	// declaration. Watch answers it with a reconcile.
	Sync func(ctx context.Context) error
	// SyncTimeout bounds the wait for Sync: the loop takes nothing else meanwhile, so a
	// reconcile held up (the store's lock, a bus not answering) must not keep it from the
	// nodes' reports and heartbeats for long. What is not live by then is made so by the next
	// reconcile, and a declaration that waited on it is tried again.
	SyncTimeout time.Duration
	// CredentialPoll is how often the loop reads the store's credential hashes to notice one
	// changed by another process (see credentialsChanged).
	CredentialPoll time.Duration
	// Bound is how long the store may fail before a message it cannot take is let go.
	Bound time.Duration
	// Retry is the delay of a nak while the store fails, and of the next attempt at a
	// declaration that failed.
	Retry time.Duration
	// StoreTimeout bounds one write to the store: a store whose write lock another process
	// holds must not hold the loop for longer.
	StoreTimeout time.Duration
	// Logger receives what the controller did; nil discards it.
	Logger *slog.Logger
	// Observe, when set, is told each message the loop settled, on the loop's goroutine: it
	// must not block. Tests wait on it instead of on time.
	Observe func(Event)
}

// Event is one thing the loop did: a delivery from CONTROL settled, a heartbeat heard, or a
// declaration pass over the enrolled nodes (Kind KindUnknown, Subject empty, Declared naming the
// nodes it published to and Err what failed).
type Event struct {
	Kind     Kind
	Node     string
	Subject  string
	Settle   Settle
	Declared []string
	Err      error
}

// Seen is the last heartbeat of a node: when it was heard, and the generation the node said it
// had applied.
type Seen struct {
	At         time.Time `json:"at"`
	Generation uint64    `json:"generation"`
}

// Controller is the controller loop. Run runs it; the other methods may be called from any
// goroutine.
type Controller struct {
	cfg    Config
	log    *slog.Logger
	meshes chan *model.Mesh

	mu        sync.Mutex
	beats     map[string]Seen
	conn      *busclient.Conn     // the loop's while it is joined, for Health
	js        jetstream.JetStream // the loop's while it is joined, for SeatWork
	mesh      *model.Mesh         // the description the loop last took, for SeatWork
	joined    bool                // it has been on the bus since it started
	lastTaken time.Time           // when the loop last took a delivery from CONTROL

	ready     chan struct{} // closed once the loop hears deliveries and heartbeats
	readyOnce sync.Once
}

// Health is the controller's own state, apart from the reconciles': whether it is on the bus
// and when it last took a message. A controller off the bus enrols nobody, records no report
// and declares nothing, however well the bus is reconciled.
type Health struct {
	// Joined is whether it has been on the bus since it started; until then it is joining.
	Joined bool
	// Connected is whether it is on the bus now.
	Connected bool
	// LastTaken is when it last took a message from CONTROL; zero before the first.
	LastTaken time.Time
}

// Health says how the controller is.
func (c *Controller) Health() Health {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Health{Joined: c.joined, Connected: c.conn != nil && c.conn.IsConnected(), LastTaken: c.lastTaken}
}

// Ready is closed once the controller has joined the bus and hears its deliveries and the
// nodes' heartbeats: a heartbeat said before then is heard by nobody, as core NATS intends.
func (c *Controller) Ready() <-chan struct{} { return c.ready }

// New makes a controller; Run starts it.
func New(c Config) *Controller {
	if c.Bound <= 0 {
		c.Bound = DefaultBound
	}
	if c.Retry <= 0 {
		c.Retry = DefaultRetry
	}
	if c.StoreTimeout <= 0 {
		c.StoreTimeout = DefaultStoreTimeout
	}
	if c.SyncTimeout <= 0 {
		c.SyncTimeout = DefaultSyncTimeout
	}
	if c.CredentialPoll <= 0 {
		c.CredentialPoll = DefaultCredentialPoll
	}
	if c.Cost == 0 {
		c.Cost = state.DefaultCost
	}
	if c.Sync == nil {
		c.Sync = func(context.Context) error { return nil }
	}
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Controller{cfg: c, log: log.With("part", "controller"), meshes: make(chan *model.Mesh, 1), beats: map[string]Seen{},
		ready: make(chan struct{})}
}

// Mesh hands the controller the description the bus was last reconciled with. It never blocks:
// a description not yet taken is replaced by the newer one.
func (c *Controller) Mesh(m *model.Mesh) {
	for {
		select {
		case c.meshes <- m:
			return
		default:
		}
		select {
		case <-c.meshes:
		default:
		}
	}
}

// Heartbeats is the last heartbeat heard from each node since the controller started. It is
// kept in memory only: a heartbeat is news, not a record.
func (c *Controller) Heartbeats() map[string]Seen {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]Seen, len(c.beats))
	for n, s := range c.beats {
		out[n] = s
	}
	return out
}

// SeatWork reads from the bus, on the controller's connection, the work queue and worker of each
// seat of the description it last took; nothing before it has joined and taken one.
func (c *Controller) SeatWork(ctx context.Context) ([]SeatWork, error) {
	c.mu.Lock()
	js, m := c.js, c.mesh
	c.mu.Unlock()
	if js == nil || m == nil {
		return nil, nil
	}
	seats := make([]string, 0, len(m.Seats))
	for _, s := range m.Seats {
		seats = append(seats, s.Name)
	}
	holders := map[string]string{}
	for _, h := range m.Holding {
		holders[h.Seat] = render.InstanceUser(h.Holder)
	}
	return Seats(ctx, js, seats, holders)
}

// loop is the state Run's goroutine owns. It outlives each connection: the store window, what
// was declared and the backoff of a failing declaration are about the mesh, not the socket.
type loop struct {
	*Controller
	conn     *busclient.Conn     // this session's
	js       jetstream.JetStream // this session's
	mesh     *model.Mesh
	window   Window
	declared map[string]uint64 // the generation last declared to each node, once read
	// failedPasses counts the declaration passes that failed in a row, for their backoff.
	failedPasses int
	// credentials is the digest of the store's credential hashes as the last declaration
	// pass left them; empty until one ran.
	credentials string
	redeclare   *time.Timer  // the next attempt at a declaration that failed
	poll        *time.Ticker // the next read of the store's credential hashes
}

// Run joins the bus as the controller and runs the loop until ctx ends. Whatever takes its
// connection — the server closing it (nats.go gives a connection up for good after some of the
// server's errors, an overlong protocol line among them), a slow consumer, a reload — it joins
// again with a capped backoff and binds its CONTROL consumer and heartbeat subscription anew.
// Nothing it took is lost: a delivery not yet settled is the server's, delivered again after
// the consumer's ack wait.
func (c *Controller) Run(ctx context.Context) {
	l := &loop{Controller: c, window: Window{Bound: c.cfg.Bound, Retry: c.cfg.Retry},
		redeclare: time.NewTimer(time.Hour), poll: time.NewTicker(c.cfg.CredentialPoll)}
	l.redeclare.Stop()
	defer l.redeclare.Stop()
	defer l.poll.Stop()
	rejoin := rejoining()
	for {
		began := time.Now()
		err := l.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) > maxBackoff {
			rejoin.Reset() // it held for a while: this is a new loss, not the same one again
		}
		wait := rejoin.Next()
		c.log.Warn("controller: off the bus; joining again", "error", err, "retry_in", wait)
		if !backoff.Sleep(ctx, wait) {
			return
		}
	}
}

// errClosed is why a session ended when the connection closed without saying why.
var errClosed = errors.New("the controller's connection closed")

// session is one connection's life: it joins, binds the CONTROL consumer, hears the heartbeats
// and runs the loop until ctx ends or the connection closes for good, and returns why it ended.
// A connection nats.go reconnects by itself (the server restarting, a network fault) is the
// same session: its subscriptions are made again by the library.
func (l *loop) session(ctx context.Context) error {
	// Ended when the connection closes for good, so that nothing waits on a connection that
	// will never answer: not the binding, not the library's handler, not the loop.
	sctx, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	conn, err := l.dial(sctx, nats.ClosedHandler(func(nc *nats.Conn) {
		why := nc.LastError()
		if why == nil {
			why = errClosed
		}
		lost(fmt.Errorf("%w: %w", errClosed, why))
	}), nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
		if err != nil { // nil: closed on purpose, at the session's end
			l.log.Warn("controller: disconnected from the bus; reconnecting", "error", err)
		}
	}), nats.ReconnectHandler(func(*nats.Conn) {
		l.log.Info("controller: reconnected to the bus")
	}))
	if err != nil {
		return err
	}
	defer conn.Close()
	js, err := jetstream.New(conn.Conn)
	if err != nil {
		return fmt.Errorf("the controller's JetStream: %w", err)
	}
	// Channels, not handlers: the library would run a handler on its own goroutine, and the
	// loop's state (the window above all) is owned by this one alone. Deliveries left in the
	// channel when the session ends are not settled, and come again.
	deliveries := make(chan jetstream.Msg, deliveryBuffer)
	inbox, err := l.bindControl(sctx, js, deliveries)
	if err != nil {
		return err
	}
	defer func() { inbox.cc.Stop() }()
	beats := make(chan *nats.Msg, heartbeatBuffer)
	hsub, err := conn.ChanSubscribe(render.HeartbeatSubject("*"), beats)
	if err != nil {
		return fmt.Errorf("hearing the nodes' heartbeats: %w", err)
	}
	defer hsub.Unsubscribe()
	if err := conn.FlushTimeout(l.cfg.StoreTimeout); err != nil {
		return fmt.Errorf("subscribing as the controller at %s: %w", l.cfg.Target.Address(), err)
	}
	l.conn, l.js = conn, js
	l.mu.Lock()
	l.Controller.conn, l.Controller.js, l.joined = conn, js, true
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.Controller.conn, l.Controller.js = nil, nil
		l.mu.Unlock()
	}()
	l.readyOnce.Do(func() { close(l.ready) })
	l.log.Info("controller: taking reports and enrolment requests, hearing heartbeats",
		"bus", l.cfg.Target.Address(), "bound", l.cfg.Bound, "retry", l.cfg.Retry)
	if l.mesh != nil {
		// Joined again: what failed to go out while it was off the bus goes now.
		l.declarePass(sctx)
	}
	for {
		select {
		case <-sctx.Done():
			if ctx.Err() != nil {
				return nil
			}
			return context.Cause(sctx)
		case m := <-deliveries:
			l.take(sctx, m)
		case m := <-beats:
			l.heard(m)
		case m := <-l.meshes:
			l.mesh = m
			if push := m.Bus.Consumers == model.ConsumersPush; push != (inbox.kind == model.ConsumersPush) {
				// The reconcile that handed m over replaced the CONTROL consumer with one of
				// the other kind (the server turns neither into the other): a push
				// subscription would wait on a deliver subject nothing delivers to, a puller
				// would ask a consumer that no longer pulls.
				inbox.cc.Stop()
				if inbox, err = l.bindControl(sctx, js, deliveries); err != nil {
					return err
				}
			}
			l.mu.Lock()
			l.Controller.mesh = m
			l.mu.Unlock()
			l.declarePass(sctx)
		case <-l.redeclare.C:
			l.declarePass(sctx)
		case <-l.poll.C:
			if l.credentialsChanged(sctx) {
				l.declarePass(sctx)
			}
		}
	}
}

// The backoff between attempts at joining the bus and binding the CONTROL consumer: from
// minBackoff, doubling, to maxBackoff. A bus restarting or reloading answers within moments;
// one that stays away is asked every few seconds, not hammered.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// rejoining is the backoff of a series of attempts at the bus.
func rejoining() backoff.Backoff { return backoff.Backoff{Min: minBackoff, Max: maxBackoff} }

// controlInbox is the controller's binding of its CONTROL consumer, and the kind of consumer it
// bound (model.ConsumersPull or model.ConsumersPush).
type controlInbox struct {
	cc   jetstream.ConsumeContext
	kind string
}

// bindControl binds the CONTROL consumer, whichever kind it is, handing its messages to
// deliveries. The library runs the handler on its own goroutine; the loop takes them from the
// channel on its own. A binding the bus cannot answer yet is tried again with the backoff until
// ctx ends: right after a reload of the accounts config the account's JetStream may answer "no
// responders" for a moment, and a controller that gave up then would take no report or
// enrolment until watch restarted.
func (c *Controller) bindControl(ctx context.Context, js jetstream.JetStream, deliveries chan<- jetstream.Msg) (controlInbox, error) {
	again := rejoining()
	for {
		cc, kind, err := host.Bind(ctx, js, render.StreamControl, render.ControllerUser, func(m jetstream.Msg) {
			select {
			case deliveries <- m:
			case <-ctx.Done():
			}
		})
		if err == nil {
			return controlInbox{cc: cc, kind: kind}, nil
		}
		wait := again.Next()
		c.log.Warn("controller: the CONTROL consumer cannot be bound yet; trying again", "error", err, "retry_in", wait)
		if !backoff.Sleep(ctx, wait) {
			return controlInbox{}, fmt.Errorf("taking the controller's CONTROL deliveries: %w (and then %w)", err, context.Cause(ctx))
		}
	}
}

// dial joins the bus as the controller, trying again with the backoff until it answers or ctx
// ends. The connection reconnects by itself for as long as it takes, through refusals too: a
// bus restarting or reloading must not leave the controller deaf. What closes it for good
// ends the session (Run).
func (c *Controller) dial(ctx context.Context, opts ...nats.Option) (*busclient.Conn, error) {
	again := rejoining()
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.IgnoreAuthErrorAbort(), nats.ReconnectWait(250 * time.Millisecond)}, opts...)
	for {
		conn, err := busclient.Dial(ctx, c.cfg.Target, busclient.Credential{User: render.ControllerUser, Password: c.cfg.Password}, opts...)
		if err == nil {
			return conn, nil
		}
		wait := again.Next()
		c.log.Warn("controller: the bus does not let the controller in yet; trying again", "error", err, "retry_in", wait)
		if !backoff.Sleep(ctx, wait) {
			return nil, fmt.Errorf("the controller joining the bus: %w", context.Cause(ctx))
		}
	}
}

// sync asks for the credentials in the store to be made live, waiting at most SyncTimeout.
func (l *loop) sync(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.SyncTimeout)
	defer cancel()
	if err := l.cfg.Sync(ctx); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("the reconcile did not finish within %s: %w", l.cfg.SyncTimeout, err)
		}
		return err
	}
	return nil
}

// kept takes a change the store committed but could not send to its copy on the bus
// (state.ErrReplicaBehind) for the change it is: the store has it, and sends its copy the whole
// store with its next change. Taken for a failure, an enrolment would be answered never and
// refused as a replay when delivered again, and a report held for the store window.
//
// A change the bus refused because another meshctl writes the store there now (state.ErrFenced:
// a one-shot apply holds the apply lock, or this watch no longer leads) is a failure: what the
// store committed is not the mesh's. The message is taken again later, once a reconcile has
// made the store equal to its copy on the bus again, which the controller asks for now.
func (l *loop) kept(ctx context.Context, err error) error {
	if errors.Is(err, state.ErrReplicaBehind) {
		l.log.Warn("controller: the store took a change its copy on the bus did not yet", "error", err)
		return nil
	}
	if errors.Is(err, state.ErrFenced) && l.cfg.Sync != nil {
		l.log.Warn("controller: another meshctl writes the store on the bus now; the change is taken again once this store is equal to it", "error", err)
		go l.cfg.Sync(ctx)
	}
	return err
}

// storeCtx bounds one store operation.
func (l *loop) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, l.cfg.StoreTimeout)
}

// take settles one delivery from CONTROL, and logs it once: a message let go says why, each
// value it carried quoted (model.Quote), so that what a node sent cannot forge a log line or
// fill the log.
func (l *loop) take(ctx context.Context, m jetstream.Msg) {
	kind, node := Classify(m.Subject())
	subject := m.Subject() // a subject Classify accepted is one render spells: safe to show
	var s Settle
	switch kind {
	case KindReport:
		s = l.report(ctx, node, m)
	case KindEnrol:
		s = l.enrol(ctx, node, m)
	default:
		subject = model.Quote(subject)
		s = Settle{Verb: Term, Reason: "not a subject the mesh derives for CONTROL"}
	}
	l.settle(ctx, m, s)
	l.mu.Lock()
	l.lastTaken = time.Now()
	l.mu.Unlock()
	ev := Event{Kind: kind, Node: node, Subject: m.Subject(), Settle: s}
	attrs := []any{"subject", subject, "settled", string(s.Verb), "why", s.Reason}
	switch s.Verb {
	case Term:
		l.log.Warn("controller: let a message go", attrs...)
	case Nak:
		l.log.Warn("controller: holding a message the store did not take", append(attrs, "again_in", s.Delay)...)
	default:
		l.log.Info("controller: took a message", attrs...)
	}
	if l.cfg.Observe != nil {
		l.cfg.Observe(ev)
	}
}

// settle tells the server what became of a delivery. An ack waits for the server's word, so
// that "recorded" means "left the work queue"; a failed one is delivered again and recorded
// again, which a report's last-per-node row takes without harm.
func (l *loop) settle(ctx context.Context, m jetstream.Msg, s Settle) {
	var err error
	switch s.Verb {
	case Ack:
		actx, cancel := context.WithTimeout(ctx, l.cfg.StoreTimeout)
		err = m.DoubleAck(actx)
		cancel()
	case Nak:
		err = m.NakWithDelay(s.Delay)
	case Term:
		err = m.Term()
	}
	if err != nil {
		l.log.Error("controller: settling a message failed; the server delivers it again after the ack wait",
			"subject", m.Subject(), "settle", string(s.Verb), "error", err)
	}
}

// published is when the bus took m, or now for a message without JetStream metadata.
func published(m jetstream.Msg) time.Time {
	if meta, err := m.Metadata(); err == nil {
		return meta.Timestamp
	}
	return time.Now()
}

// generation is the generation last declared to node, read from the store once.
func (l *loop) generation(ctx context.Context, node string) (uint64, error) {
	if l.declared == nil {
		sctx, cancel := l.storeCtx(ctx)
		defer cancel()
		g, err := l.cfg.Store.Generations(sctx)
		if err != nil {
			return 0, err
		}
		l.declared = g
	}
	return l.declared[node], nil
}

func (l *loop) report(ctx context.Context, node string, m jetstream.Msg) Settle {
	declared, err := l.generation(ctx, node)
	if err != nil {
		return l.window.After(err, published(m), time.Now())
	}
	r, err := JudgeReport(node, m.Data(), declared)
	switch {
	case errors.Is(err, ErrSuperseded):
		// Settled, not acted on: what it says is about what the node no longer runs.
		return Settle{Verb: Ack, Reason: err.Error()}
	case err != nil:
		return Settle{Verb: Term, Reason: err.Error()}
	}
	sctx, cancel := l.storeCtx(ctx)
	defer cancel()
	stored := l.kept(ctx, l.cfg.Store.RecordReport(sctx, state.Report{Node: node, Generation: r.Generation, Applied: r.Applied,
		Failed: r.Failed, ReportedAt: published(m)}))
	s := l.window.After(stored, published(m), time.Now())
	if s.Verb == Ack {
		s.Reason = fmt.Sprintf("recorded node %s's report of generation %d (%d applied, %d failed)", node, r.Generation, len(r.Applied), len(r.Failed))
	}
	return s
}

func (l *loop) heard(m *nats.Msg) {
	kind, node := Classify(m.Subject)
	if kind != KindHeartbeat {
		return
	}
	hb, err := JudgeHeartbeat(m.Data)
	if err != nil {
		l.log.Warn("controller: let a heartbeat go", "subject", m.Subject, "why", err.Error())
		if l.cfg.Observe != nil {
			l.cfg.Observe(Event{Kind: KindHeartbeat, Node: node, Subject: m.Subject, Settle: Settle{Verb: Term, Reason: err.Error()}})
		}
		return
	}
	l.mu.Lock()
	l.beats[node] = Seen{At: time.Now(), Generation: hb.Generation}
	l.mu.Unlock()
	if l.cfg.Observe != nil {
		l.cfg.Observe(Event{Kind: KindHeartbeat, Node: node, Subject: m.Subject, Settle: Settle{Reason: "heard"}})
	}
}

// enrol answers an enrolment request at the address its payload carries.
func (l *loop) enrol(ctx context.Context, node string, m jetstream.Msg) Settle {
	if l.mesh == nil {
		// Which nodes exist is the description's to say, and none was handed over yet.
		return Settle{Verb: Nak, Delay: l.cfg.Retry, Reason: "no description reconciled yet to check the node against"}
	}
	ask, err := JudgeEnrolment(l.mesh, m.Subject(), m.Data())
	if errors.Is(err, wire.ErrNotEnrolment) {
		// No address of the node's own to answer at: nothing can be said to anyone.
		return Settle{Verb: Term, Reason: err.Error()}
	}
	if err != nil {
		l.refuse(ask, err)
		return Settle{Verb: Ack, Reason: err.Error()}
	}
	sctx, cancel := l.storeCtx(ctx)
	password, err := l.cfg.Store.EnrolNode(sctx, state.NodeEnrolment{Node: node, EnrolPrincipal: render.EnrolUser(node),
		NodePrincipal: render.NodeUser(node), PublicKey: ask.Key, Nkey: l.mesh.Bus.Nkeys()}, l.cfg.Cost)
	cancel()
	err = l.kept(ctx, err)
	if errors.Is(err, state.ErrNoEnrolmentCredential) {
		err = fmt.Errorf("%w: a replayed or second enrolment of node %s: its enrolment credential was used already "+
			"or never issued; issue a fresh one with `meshctl credentials issue %s`", ErrRefused, node, render.EnrolUser(node))
		l.refuse(ask, err)
		return Settle{Verb: Ack, Reason: err.Error()}
	}
	if err != nil {
		return l.window.After(err, published(m), time.Now())
	}
	l.window.After(nil, published(m), time.Now())
	answer := wire.EnrolAnswer{Node: node}
	membership, _ := json.Marshal(l.membershipOf(render.NodeUser(node), password))
	if answer.Membership, err = wire.Seal(ask.Key, membership); err != nil {
		return Settle{Verb: Term, Reason: err.Error()}
	}
	// Answered before the credentials change on the bus: the reload that makes the node's
	// credential live also locks the enrolment identity out, and the server disconnects it,
	// answer unheard, if the answer comes after. So the node joins moments after it is told,
	// trying until its credential is live.
	answerErr := l.answer(ask.Reply, answer)
	if err := l.sync(ctx); err != nil {
		l.log.Error("controller: node enrolled, but its credential is not live yet; the next reconcile makes it so",
			"node", node, "error", err)
	}
	if answerErr != nil {
		// The credential is used: a redelivery would be refused as a second enrolment.
		return Settle{Verb: Ack, Reason: fmt.Sprintf("enrolled node %s, but the answer could not be sent (%v): issue a fresh enrolment credential", node, answerErr)}
	}
	l.Mesh(l.mesh) // declared to next, on this goroutine: the pass owns its retry
	return Settle{Verb: Ack, Reason: fmt.Sprintf("enrolled node %s and answered at the address its request carried", node)}
}

// refuse answers a refused enrolment, when there is an address to answer at, and logs it.
func (l *loop) refuse(ask EnrolAsk, why error) {
	l.log.Warn("controller: refused an enrolment", "node", ask.Node, "why", why.Error())
	if ask.Reply == "" {
		return
	}
	if err := l.answer(ask.Reply, wire.EnrolAnswer{Node: ask.Node, Refused: why.Error()}); err != nil {
		l.log.Error("controller: the refusal could not be sent", "node", ask.Node, "error", err)
	}
}

// answer sends an enrolment answer on core NATS and waits for the server to have it.
func (l *loop) answer(reply string, a wire.EnrolAnswer) error {
	data, _ := json.Marshal(a)
	if err := l.conn.Publish(reply, data); err != nil {
		return err
	}
	return l.conn.FlushTimeout(l.cfg.StoreTimeout)
}

// maxRedeclare caps the backoff between attempts at a declaration that keeps failing: each
// attempt may mint and ask for a reconcile, and a bus that refuses every plan (data at stake)
// must not be asked every few seconds for as long as it does.
const maxRedeclare = time.Minute

// declarePass declares to the enrolled nodes, arming the redeclare timer when a declaration
// failed: after Retry, doubling with each failure in a row up to maxRedeclare.
func (l *loop) declarePass(ctx context.Context) {
	// What the next polls compare the store with is the hashes as this pass found them, with
	// what it minted and revoked itself: its own doing is no change to act on, but another
	// process's is, even one made while the pass ran (a revocation between a node's
	// declaration going out and the pass's end), which a digest read after the pass would
	// take in as seen.
	sctx, cancel := l.storeCtx(ctx)
	found, ferr := l.cfg.Store.Hashes(sctx)
	cancel()
	own := map[string]string{}
	published, err := l.declareAll(ctx, own)
	if l.mesh != nil && ferr == nil {
		for u, h := range own {
			if h == "" {
				delete(found, u)
			} else {
				found[u] = h
			}
		}
		l.credentials = digestOf(found)
	}
	switch {
	case err != nil && ctx.Err() != nil:
		// Cut off by the session's end — watch stopping, or the connection lost, after which
		// the session that joins again declares anew: no failure to retry or alert on.
	case err != nil:
		l.failedPasses++
		wait := backoff.After(l.cfg.Retry, max(maxRedeclare, l.cfg.Retry), l.failedPasses)
		l.log.Error("controller: declaring to the nodes failed; trying again", "error", err, "retry_in", wait)
		l.redeclare.Reset(wait)
	default:
		l.failedPasses = 0
	}
	if l.cfg.Observe != nil {
		l.cfg.Observe(Event{Declared: published, Err: err})
	}
}

// credentialsChanged reports whether the store's credentials changed since the last declaration
// pass. Another process changes them without a word to this one — `credentials rotate` revokes
// an instance's credential and has the bus reloaded through its control socket — and the
// controller, the only carrier of an enrolled node's credentials, must declare the new one then,
// not at watch's next resync. A store it cannot read says nothing changed: the next poll asks
// again.
func (l *loop) credentialsChanged(ctx context.Context) bool {
	if l.mesh == nil || l.credentials == "" {
		return false
	}
	d, err := l.credentialDigest(ctx)
	return err == nil && d != l.credentials
}

// credentialDigest identifies every principal's hash in the store.
func (l *loop) credentialDigest(ctx context.Context) (string, error) {
	sctx, cancel := l.storeCtx(ctx)
	defer cancel()
	hashes, err := l.cfg.Store.Hashes(sctx)
	if err != nil {
		return "", err
	}
	return digestOf(hashes), nil
}

// digestOf identifies every principal's hash in hashes.
func digestOf(hashes map[string]string) string {
	users := make([]string, 0, len(hashes))
	for u := range hashes {
		users = append(users, u)
	}
	slices.Sort(users)
	sum := sha256.New()
	for _, u := range users {
		fmt.Fprintf(sum, "%s\x00%s\x00", u, hashes[u])
	}
	return hex.EncodeToString(sum.Sum(nil))
}

// errNotConnected is why a declaration pass did nothing while the controller was off the bus.
var errNotConnected = errors.New("the controller is not connected to the bus; the declarations wait for it")

// declareAll declares to every enrolled node in the description what it runs, where that
// changed, and returns the nodes it published to. A converged pass publishes nothing and mints
// nothing. What it minted and revoked goes into own (declare).
func (l *loop) declareAll(ctx context.Context, own map[string]string) ([]string, error) {
	if l.mesh == nil {
		return nil, nil
	}
	if !l.conn.IsConnected() {
		// Off the bus (nats.go reconnecting): a declaration would mint and have the bus
		// reloaded only to fail at its publish, and the retry would mint again. Nothing is
		// minted until it can go out.
		return nil, errNotConnected
	}
	sctx, cancel := l.storeCtx(ctx)
	enrolled, err := l.cfg.Store.Enrolments(sctx)
	cancel()
	if err != nil {
		return nil, err
	}
	var errs []error
	var published []string
	for _, e := range enrolled {
		if !slices.ContainsFunc(l.mesh.Nodes, func(n model.Node) bool { return n.Name == e.Node }) {
			continue
		}
		did, err := l.declare(ctx, e, own)
		if err != nil {
			errs = append(errs, fmt.Errorf("declaring to node %s: %w", e.Node, err))
		}
		if did {
			published = append(published, e.Node)
		}
	}
	return published, errors.Join(errs...)
}

// declare publishes node's declaration when it changed: a new generation carrying every
// instance's membership sealed to the node's key — the sealed copy kept from last time where the
// credential is unchanged, a fresh one minted where it is new or was minted again elsewhere.
// Credentials are made live before the node hears of them; those of instances that left the
// node are revoked. The hash of each credential it minted goes into own, and "" for each it
// revoked.
func (l *loop) declare(ctx context.Context, e state.Enrolment, own map[string]string) (published bool, err error) {
	d := DeclarationFor(l.mesh, e.Node)
	prev, err := l.cfg.Store.Declared(ctx, e.Node)
	if err != nil {
		return false, err
	}
	hashes, err := l.cfg.Store.Hashes(ctx)
	if err != nil {
		return false, err
	}
	declaredHash := map[string]string{}
	for u, c := range prev.Credentials {
		declaredHash[u] = c.Hash
	}
	keep, mint := Credentials(d, declaredHash, hashes)
	digest := d.Digest()
	var departed []string
	for u := range prev.Credentials {
		if !slices.ContainsFunc(d.Instances, func(in wire.Instance) bool { return in.User == u }) {
			departed = append(departed, u)
		}
	}
	if digest == prev.Digest && len(mint) == 0 && len(departed) == 0 {
		return false, nil
	}
	var passwords map[string]string
	if l.mesh.Bus.Nkeys() {
		passwords, err = l.cfg.Store.MintNkeys(ctx, mint, "declare")
	} else {
		passwords, err = l.cfg.Store.Mint(ctx, mint, l.cfg.Cost, "declare")
	}
	if err = l.kept(ctx, err); err != nil {
		return false, err
	}
	for _, u := range departed {
		if _, err := l.cfg.Store.Revoke(ctx, u); l.kept(ctx, err) != nil {
			return false, err
		}
	}
	if hashes, err = l.cfg.Store.Hashes(ctx); err != nil {
		return false, err
	}
	for _, u := range slices.Concat(mint, departed) {
		own[u] = hashes[u]
	}
	creds := map[string]state.DeclaredCredential{}
	for i := range d.Instances {
		in := &d.Instances[i]
		if slices.Contains(keep, in.User) {
			in.Membership = prev.Credentials[in.User].Sealed
		} else {
			membership, _ := json.Marshal(l.membershipOf(in.User, passwords[in.User]))
			if in.Membership, err = wire.Seal(e.PublicKey, membership); err != nil {
				return false, err
			}
		}
		creds[in.User] = state.DeclaredCredential{Hash: hashes[in.User], Sealed: in.Membership}
	}
	if len(mint) > 0 || len(departed) > 0 {
		if err := l.sync(ctx); err != nil {
			return false, fmt.Errorf("making the node's credentials live: %w", err)
		}
	}
	d.Generation = prev.Generation + 1
	data, err := json.Marshal(d)
	if err != nil {
		return false, err
	}
	if _, err := l.js.Publish(ctx, render.DeclareSubject(e.Node), data); err != nil {
		return false, fmt.Errorf("publishing generation %d: %w", d.Generation, err)
	}
	if err := l.kept(ctx, l.cfg.Store.RecordDeclaration(ctx, e.Node, state.Declared{Generation: d.Generation, Digest: digest,
		DeclaredAt: time.Now(), Credentials: creds})); err != nil {
		return false, err
	}
	if l.declared != nil {
		l.declared[e.Node] = d.Generation
	}
	l.log.Info("controller: declared to a node what it runs", "node", e.Node, "generation", d.Generation,
		"instances", len(d.Instances), "minted", len(mint), "kept", len(keep), "departed", len(departed))
	return true, nil
}

// membershipOf is user's membership with its freshly minted secret: a password, or where the
// mesh's hosts log in with nkeys (bus.auth: nkey) the seed of its nkey, sealed to the node
// like a password, and like it never logged or kept.
func (l *loop) membershipOf(user, secret string) host.Membership {
	if !l.mesh.Bus.Nkeys() {
		return host.NewMembership(l.cfg.Target, user, secret)
	}
	m := host.NewMembership(l.cfg.Target, user, "")
	m.Seed = secret
	return m
}
