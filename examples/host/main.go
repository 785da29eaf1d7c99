// Command host is the smallest program that joins a mesh as a module instance: it reads the
// membership `meshctl credentials issue` printed (a password or an nkey seed, one server or a
// cluster's), joins the bus through whichever server answers, prints and acknowledges every
// event the module follows (with -follow, or without -seat) and, with -seat, takes the seat's
// work as its holder. Ctrl-C lets the work in hand finish, then leaves. With -publish it publishes one message as the module instead
// (an event it emits, work it sends) and exits.
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
	flags := flag.NewFlagSet("host", flag.ContinueOnError)
	flags.SetOutput(stderr)
	membershipFile := flags.String("membership", "", "the membership file `meshctl credentials issue` wrote (default: read it from stdin)")
	follow := flags.Bool("follow", false, "follow the module's events, on its consumer <node>_<module> (what it does without -seat)")
	seat := flags.String("seat", "", "take this seat's work, as its holder; with -follow, follow the module's events as well")
	emit := flags.String("emit", "", "with -seat: after each piece of work, report this seat event (one the seat emits, e.g. sent)")
	publish := flags.String("publish", "", "instead: publish -message on this subject (an event the module emits, work it sends) and exit")
	message := flags.String("message", "", "with -publish: what to publish")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if *publish != "" && (*seat != "" || *emit != "" || *follow) {
		fmt.Fprintln(stderr, "host: -publish publishes once and exits; it does not take -follow, -seat or -emit")
		return 2
	}
	// A module that only holds a seat has no events consumer, and no grant to ask about one:
	// asking would be a refusal in the bus's log for every start. So it follows only when told
	// to, or when following is the only job left.
	following := *follow || *seat == ""
	if *emit != "" && *seat == "" {
		fmt.Fprintln(stderr, "host: -emit reports a seat's event, so it needs -seat")
		return 2
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, "host: "+format+"\n", a...) }

	m, err := readMembership(*membershipFile, stdin)
	if err != nil {
		logf("%v", err)
		return 1
	}
	inst, ok := host.InstanceOf(m.User)
	if !ok {
		logf("%s is not a module instance (<node>.<module>); issue the membership of one, e.g. `meshctl credentials issue beta.postman`", m.User)
		return 1
	}
	h, err := host.Join(ctx, m,
		// A host outlives a restart of the bus (a `meshctl watch` restarted): it reconnects
		// for ever and says so.
		nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				logf("disconnected: %v", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { logf("reconnected to %s", nc.ConnectedUrlRedacted()) }),
	)
	if err != nil {
		logf("%v", err)
		return 1
	}
	// The server it reached, not the membership's address: on a cluster that may be down, and
	// the connection started at another of its servers.
	logf("joined %s as %s", h.Conn().ConnectedUrlRedacted(), h.User())
	if *publish != "" {
		defer h.Close()
		ack, err := h.Publish(ctx, *publish, []byte(*message))
		if err != nil {
			logf("%v", err)
			return 1
		}
		logf("published to %s: stream %s keeps it as message %d", *publish, ack.Stream, ack.Sequence)
		return 0
	}

	var out sync.Mutex
	printf := func(format string, a ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Fprintf(stdout, format+"\n", a...)
	}
	// Acks and publishes get a context of their own: after Ctrl-C, the work in hand still
	// finishes and is acknowledged.
	ack := func(msg jetstream.Msg) {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if err := h.Ack(ctx, msg); err != nil {
			logf("%v", err)
		}
	}

	var taking []jetstream.ConsumeContext
	if following {
		events, err := h.Events(ctx, inst, func(msg jetstream.Msg) {
			printf("event %s %s", msg.Subject(), msg.Data())
			ack(msg)
		})
		if err != nil {
			// A module that follows nothing has no consumer, and no grant to ask about one:
			// the refusal names the consumer's subject rather than timing out.
			var refused *busclient.PermissionError
			if errors.As(err, &refused) {
				err = fmt.Errorf("%w\n(a module that follows nothing has no consumer: give -seat to hold a seat, or -publish)", err)
			}
			logf("%v", err)
			h.Close()
			return 1
		}
		taking = append(taking, events)
		logf("following its events on consumer %s", render.InstanceConsumer(inst))
	}
	if *seat != "" {
		work, err := h.Work(ctx, *seat, func(msg jetstream.Msg) {
			printf("work %s %s", msg.Subject(), msg.Data())
			if *emit != "" {
				ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
				defer cancel()
				if _, err := h.Publish(ctx, render.SeatEvent(*seat, *emit), msg.Data()); err != nil {
					// Not acknowledged: the work comes back after the ack wait.
					logf("%v", err)
					return
				}
			}
			ack(msg)
		})
		if err != nil {
			logf("%v", err)
			for _, cc := range taking {
				cc.Stop()
			}
			h.Close()
			return 1
		}
		taking = append(taking, work)
		logf("holding seat %s", *seat)
	}

	<-ctx.Done()
	logf("leaving: finishing the work in hand")
	leave, cancel := context.WithTimeout(context.Background(), 2*opTimeout)
	defer cancel()
	// Stop taking deliveries and let the handlers finish those received, while the connection
	// is still whole for their acks; then drain the connection itself.
	for _, cc := range taking {
		cc.Drain()
	}
	for _, cc := range taking {
		select {
		case <-cc.Closed():
		case <-leave.Done():
		}
	}
	if err := h.Drain(leave); err != nil {
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
	f, err := os.Open(path)
	if err != nil {
		return host.Membership{}, err
	}
	defer f.Close()
	m, err := host.ReadMembership(f)
	if err != nil {
		return m, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}
