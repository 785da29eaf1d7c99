package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	// Password is the controller principal's password; unused where Creds is set.
	Password string
	// Creds, in a jwt mesh (bus.auth: jwt), is the controller's creds file (its user JWT and
	// seed), read again at every connection: a reissue rewrites it before the push that cuts
	// the connection.
	Creds string
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
	// byHand is the instances declared without a membership because their credential was
	// issued by hand, each logged once (sayByHand).
	byHand    map[string]bool
	redeclare *time.Timer  // the next attempt at a declaration that failed
	poll      *time.Ticker // the next read of the store's credential hashes
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
	conn, err := l.dial(sctx, l.connectionHandlers(lost)...)
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
	defer func() {
		// A binding anew that failed (described) leaves no consumer to stop.
		if inbox.cc != nil {
			inbox.cc.Stop()
		}
	}()
	beats := make(chan *nats.Msg, heartbeatBuffer)
	hsub, err := conn.ChanSubscribe(render.HeartbeatSubject("*"), beats)
	if err != nil {
		return fmt.Errorf("hearing the nodes' heartbeats: %w", err)
	}
	defer hsub.Unsubscribe()
	if err := conn.FlushTimeout(l.cfg.StoreTimeout); err != nil {
		return fmt.Errorf("subscribing as the controller at %s: %w", l.cfg.Target.Address(), err)
	}
	l.attach(conn, js)
	defer l.detach()
	l.readyOnce.Do(func() { close(l.ready) })
	l.log.Info("controller: taking reports and enrolment requests, hearing heartbeats",
		"bus", l.cfg.Target.Address(), "bound", l.cfg.Bound, "retry", l.cfg.Retry)
	if l.mesh != nil {
		// Joined again: what failed to go out while it was off the bus goes now.
		l.declarePass(sctx)
	}
	return l.serve(ctx, sctx, &inbox, deliveries, beats)
}

// connectionHandlers are the session's handlers of its connection's life: closing for good
// ends the session (lost, with why), a disconnect and a reconnect are logged.
func (l *loop) connectionHandlers(lost context.CancelCauseFunc) []nats.Option {
	return []nats.Option{nats.ClosedHandler(func(nc *nats.Conn) {
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
	})}
}

// attach makes conn and js the session's, and the Controller's for Health and SeatWork.
func (l *loop) attach(conn *busclient.Conn, js jetstream.JetStream) {
	l.conn, l.js = conn, js
	l.mu.Lock()
	l.Controller.conn, l.Controller.js, l.joined = conn, js, true
	l.mu.Unlock()
}

// detach takes the ended session's connection from the Controller: off the bus, Health says so
// and SeatWork reads nothing.
func (l *loop) detach() {
	l.mu.Lock()
	l.Controller.conn, l.Controller.js = nil, nil
	l.mu.Unlock()
}

// serve is the session's loop: it takes one delivery, heartbeat, description or timer at a time
// until sctx ends, and returns why it ended — nil when ctx did. inbox is the session's binding
// of CONTROL, bound anew here when a description changes the consumer's kind.
func (l *loop) serve(ctx, sctx context.Context, inbox *controlInbox, deliveries chan jetstream.Msg, beats <-chan *nats.Msg) error {
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
			if err := l.described(sctx, m, inbox, deliveries); err != nil {
				return err
			}
		case <-l.redeclare.C:
			l.declarePass(sctx)
		case <-l.poll.C:
			if l.credentialsChanged(sctx) {
				l.declarePass(sctx)
			}
		}
	}
}

// described takes m, the description the bus was last reconciled with: it binds CONTROL anew
// when m's consumer is of another kind than inbox's, and declares to the nodes.
func (l *loop) described(sctx context.Context, m *model.Mesh, inbox *controlInbox, deliveries chan<- jetstream.Msg) error {
	l.mesh = m
	if push := m.Bus.Consumers == model.ConsumersPush; push != (inbox.kind == model.ConsumersPush) {
		// The reconcile that handed m over replaced the CONTROL consumer with one of the
		// other kind (the server turns neither into the other): a push subscription would
		// wait on a deliver subject nothing delivers to, a puller would ask a consumer that
		// no longer pulls.
		inbox.cc.Stop()
		var err error
		if *inbox, err = l.bindControl(sctx, l.js, deliveries); err != nil {
			return err
		}
	}
	l.mu.Lock()
	l.Controller.mesh = m
	l.mu.Unlock()
	l.declarePass(sctx)
	return nil
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
	cred := busclient.Credential{User: render.ControllerUser, Password: c.cfg.Password}
	if c.cfg.Creds != "" {
		cred.Password = ""
		opts = append(opts, nats.UserCredentials(c.cfg.Creds))
	}
	for {
		conn, err := busclient.Dial(ctx, c.cfg.Target, cred, opts...)
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
// made the store equal to its copy on the bus again, which the controller asks for now and
// waits for on the loop, at most SyncTimeout, as for every Sync.
func (l *loop) kept(ctx context.Context, err error) error {
	if errors.Is(err, state.ErrReplicaBehind) {
		l.log.Warn("controller: the store took a change its copy on the bus did not yet", "error", err)
		return nil
	}
	if errors.Is(err, state.ErrFenced) {
		l.log.Warn("controller: another meshctl writes the store on the bus now; the change is taken again once this store is equal to it", "error", err)
		if serr := l.sync(ctx); serr != nil {
			l.log.Warn("controller: the reconcile that makes the store equal to its copy on the bus did not finish", "error", serr)
		}
	}
	return err
}

// storeCtx bounds one store operation.
func (l *loop) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, l.cfg.StoreTimeout)
}
