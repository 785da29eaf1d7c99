// Command host is the smallest program that joins a mesh as a module instance: it reads the
// membership `meshctl credentials issue` printed (a password, an nkey seed, or a seed and its
// user JWT; one server or a cluster's), joins the bus through whichever server answers, prints
// and acknowledges every event the module follows (with -follow, or without -seat) and, with
// -seat, takes the seat's work as its holder, keeping work that lasts -work in progress at the
// worker's own ack wait. Ctrl-C lets the work in hand finish, then leaves. With -publish it
// publishes one message as the module instead (an event it emits, work it sends) and exits.
//
//	meshctl credentials issue beta.postman -f examples/quickstart -o /tmp/m.json
//	go run ./examples/host -membership /tmp/m.json -follow -seat mailer -emit sent
//
// See README.md beside it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// opTimeout bounds each acknowledgement and publish: a bus that does not answer in this long is
// reported, and the message comes back after its ack wait.
const opTimeout = 5 * time.Second

// run is the program; it returns when ctx ends (Ctrl-C) or joining fails. Deliveries are printed
// to stdout, one line each; everything else goes to stderr.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	o, ok := parseOptions(args, stderr)
	if !ok {
		return 2
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, "host: "+format+"\n", a...) }

	m, err := readMembership(o.membership, stdin)
	if err != nil {
		logf("%v", err)
		return 1
	}
	inst, ok := host.InstanceOf(m.User)
	if !ok {
		logf("%s is not a module instance (<node>.<module>); issue the membership of one, e.g. `meshctl credentials issue beta.postman`", m.User)
		return 1
	}
	h, err := join(ctx, o.membership, m, logf)
	if err != nil {
		logf("%v", err)
		return 1
	}
	// The server it reached, not the membership's address: on a cluster that may be down, and
	// the connection started at another of its servers.
	logf("joined %s as %s", h.Conn().ConnectedUrlRedacted(), h.User())
	if o.publish != "" {
		defer h.Close()
		return publishOnce(ctx, h, o.publish, o.message, logf)
	}

	d := &deliveries{h: h, stdout: stdout, logf: logf}
	var taking []jetstream.ConsumeContext
	if o.following {
		events, err := d.followEvents(ctx, inst)
		if err != nil {
			logf("%v", err)
			h.Close()
			return 1
		}
		taking = append(taking, events)
		logf("following its events on consumer %s", render.InstanceConsumer(inst))
	}
	if o.seat != "" {
		work, r, err := d.holdSeat(ctx, o.seat, o.emit, o.work)
		if err != nil {
			logf("%v", err)
			for _, cc := range taking {
				cc.Stop()
			}
			h.Close()
			return 1
		}
		taking = append(taking, work)
		logf("holding seat %s: %s", o.seat, describeRedelivery(r))
	}

	<-ctx.Done()
	return leave(h, taking, logf)
}

// options are the program's flags: where the membership is, and what the host does.
type options struct {
	membership string
	// following is -follow, or no -seat: the module's events are followed.
	following        bool
	seat, emit       string
	work             time.Duration
	publish, message string
}

// parseOptions reads the flags, refusing on stderr the combinations that make no sense.
func parseOptions(args []string, stderr io.Writer) (options, bool) {
	flags := flag.NewFlagSet("host", flag.ContinueOnError)
	flags.SetOutput(stderr)
	membershipFile := flags.String("membership", "", "the membership file `meshctl credentials issue` wrote (default: read it from stdin)")
	follow := flags.Bool("follow", false, "follow the module's events, on its consumer <node>_<module> (what it does without -seat)")
	seat := flags.String("seat", "", "take this seat's work, as its holder; with -follow, follow the module's events as well")
	emit := flags.String("emit", "", "with -seat: after each piece of work, report this seat event (one the seat emits, e.g. sent)")
	work := flags.Duration("work", 0, "with -seat: how long each piece of work takes, a stand-in for real work; kept from redelivery at the worker's own ack wait")
	publish := flags.String("publish", "", "instead: publish -message on this subject (an event the module emits, work it sends) and exit")
	message := flags.String("message", "", "with -publish: what to publish")
	if err := flags.Parse(args); err != nil {
		return options{}, false
	}
	if *publish != "" && (*seat != "" || *emit != "" || *follow) {
		fmt.Fprintln(stderr, "host: -publish publishes once and exits; it does not take -follow, -seat or -emit")
		return options{}, false
	}
	if *emit != "" && *seat == "" {
		fmt.Fprintln(stderr, "host: -emit reports a seat's event, so it needs -seat")
		return options{}, false
	}
	if *work != 0 && *seat == "" {
		fmt.Fprintln(stderr, "host: -work is how long a seat's work takes, so it needs -seat")
		return options{}, false
	}
	return options{
		membership: *membershipFile,
		// A module that only holds a seat has no events consumer, and no grant to ask about
		// one: asking would be a refusal in the bus's log for every start. So it follows only
		// when told to, or when following is the only job left.
		following: *follow || *seat == "",
		seat:      *seat,
		emit:      *emit,
		work:      *work,
		publish:   *publish,
		message:   *message,
	}, true
}

// join joins the bus with membership m, read from the file at path unless path is empty or
// "-" (stdin), logging each disconnection and reconnection. A membership file is read again
// at every reconnect (host.JoinFile): in operator mode (bus.auth: jwt) a credential written
// over it, by the node's agent or by hand, is taken with no restart.
func join(ctx context.Context, path string, m host.Membership, logf func(format string, a ...any)) (*host.Host, error) {
	opts := []nats.Option{
		// A host outlives a restart of the bus (a `meshctl watch` restarted): it reconnects
		// for ever and says so.
		nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				logf("disconnected: %v", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { logf("reconnected to %s", nc.ConnectedUrlRedacted()) }),
	}
	if path == "" || path == "-" {
		return host.Join(ctx, m, opts...)
	}
	return host.JoinFile(ctx, path, opts...)
}

// publishOnce publishes message on subject as the module and logs which stream keeps it.
func publishOnce(ctx context.Context, h *host.Host, subject, message string, logf func(format string, a ...any)) int {
	ack, err := h.Publish(ctx, subject, []byte(message))
	if err != nil {
		logf("%v", err)
		return 1
	}
	logf("published to %s: stream %s keeps it as message %d", subject, ack.Stream, ack.Sequence)
	return 0
}

// deliveries prints and acknowledges what the host takes, one line each on stdout; the lock
// keeps the lines of two handlers running at once from interleaving.
type deliveries struct {
	h      *host.Host
	mu     sync.Mutex
	stdout io.Writer
	logf   func(format string, a ...any)
}

// printf prints one line on stdout.
func (d *deliveries) printf(format string, a ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.stdout, format+"\n", a...)
}

// ack acknowledges msg, logging a failure.
func (d *deliveries) ack(msg jetstream.Msg) {
	// Acks and publishes get a context of their own: after Ctrl-C, the work in hand still
	// finishes and is acknowledged.
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := d.h.Ack(ctx, msg); err != nil {
		d.logf("%v", err)
	}
}

// followEvents prints and acknowledges every event the module instance follows.
func (d *deliveries) followEvents(ctx context.Context, inst model.Instance) (jetstream.ConsumeContext, error) {
	events, err := d.h.Events(ctx, inst, func(msg jetstream.Msg) {
		d.printf("event %s %s", msg.Subject(), msg.Data())
		d.ack(msg)
	})
	if err != nil {
		// A module that follows nothing has no consumer, and no grant to ask about one:
		// the refusal names the consumer's subject rather than timing out.
		var refused *busclient.PermissionError
		if errors.As(err, &refused) {
			err = fmt.Errorf("%w\n(a module that follows nothing has no consumer: give -seat to hold a seat, or -publish)", err)
		}
		return nil, err
	}
	return events, nil
}

// holdSeat takes the seat's work as its holder: it prints each piece, works on it for work,
// reports the seat event emit after it when emit is set, and acknowledges it. It returns what
// the worker's info says of redelivery.
func (d *deliveries) holdSeat(ctx context.Context, seat, emit string, work time.Duration) (jetstream.ConsumeContext, host.Redelivery, error) {
	return d.h.WorkJobs(ctx, seat, func(j host.Job) {
		d.printf("work %s %s", j.Subject(), j.Data())
		if j.Delivery > 1 {
			d.logf("%s is delivery %d of it", j.Subject(), j.Delivery)
		}
		if work > 0 {
			// Work that may outlast the worker's ack wait says it is in progress, at the pace
			// the worker's info set, not the server's default: the description may have
			// shortened it.
			working := d.h.Working(j)
			time.Sleep(work) // the stand-in for real work
			if err := working(); err != nil {
				d.logf("%v", err)
			}
		}
		if emit != "" {
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			defer cancel()
			if _, err := d.h.Publish(ctx, render.SeatEvent(seat, emit), j.Data()); err != nil {
				d.logf("%v", err)
				d.unacknowledged(j)
				return
			}
		}
		d.ack(j)
	})
}

// unacknowledged says what becomes of a piece of work left unacknowledged: it comes back after
// the wait in force, or, on its last delivery, it is a dead letter.
func (d *deliveries) unacknowledged(j host.Job) {
	if j.Last() {
		d.logf("%s is left unacknowledged on its last delivery (%d of %d): a dead letter, never delivered again (meshctl status counts it)",
			j.Subject(), j.Delivery, j.MaxDeliver)
		return
	}
	d.logf("%s is left unacknowledged: it comes back in %s", j.Subject(), j.Wait(j.Delivery))
}

// describeRedelivery says what the worker's info says of redelivery, for the log.
func describeRedelivery(r host.Redelivery) string {
	deliveries := "deliveries unlimited"
	if r.MaxDeliver > 0 {
		deliveries = fmt.Sprintf("at most %d deliveries", r.MaxDeliver)
	}
	if len(r.Backoff) > 0 {
		return fmt.Sprintf("redelivered after %v, %s", r.Backoff, deliveries)
	}
	return fmt.Sprintf("ack wait %s, %s", r.AckWait, deliveries)
}

// leave stops taking deliveries, lets the handlers finish the work in hand, and drains the
// connection, bounded by twice opTimeout.
func leave(h *host.Host, taking []jetstream.ConsumeContext, logf func(format string, a ...any)) int {
	logf("leaving: finishing the work in hand")
	bounded, cancel := context.WithTimeout(context.Background(), 2*opTimeout)
	defer cancel()
	// Stop taking deliveries and let the handlers finish those received, while the connection
	// is still whole for their acks; then drain the connection itself.
	for _, cc := range taking {
		cc.Drain()
	}
	for _, cc := range taking {
		select {
		case <-cc.Closed():
		case <-bounded.Done():
		}
	}
	if err := h.Drain(bounded); err != nil {
		logf("%v", err)
		return 1
	}
	return 0
}

// readMembership reads the membership from path, or from stdin when path is empty or "-".
func readMembership(path string, stdin io.Reader) (host.Membership, error) {
	if path == "" || path == "-" {
		return host.ReadMembership(stdin)
	}
	return host.ReadMembershipFile(path)
}
