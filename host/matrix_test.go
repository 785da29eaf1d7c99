package host_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/host/hosttest"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// jobTimeout bounds one job. A job that is done takes milliseconds; one that is refused is told
// so by Check at once; only a job whose message never comes waits this long.
const jobTimeout = 5 * time.Second

// Every principal of the matrix mesh does every one of its jobs, end to end, on one bus the
// controller created through the product's own plan and apply, with pull and with push consumers.
func TestEveryPrincipalDoesItsJobs(t *testing.T) {
	eachKind(t, func(t *testing.T, kind string) { everyPrincipalDoesItsJobs(t, hosttest.StartConsumers, kind) })
}

// The same on a cluster of three operator-mode servers (bus.auth: jwt), every stream of three
// replicas: every principal is a user of the mesh's account, holding a user JWT with exactly
// its grants (accounts.GrantsOf) and its seed, and joined to a server of its own in turn, so
// that a job and its counterparts meet across the cluster's routes.
func TestEveryPrincipalDoesItsJobsAsAJWTUser(t *testing.T) {
	eachKind(t, func(t *testing.T, kind string) { everyPrincipalDoesItsJobs(t, startJWTCluster, kind) })
}

// startMesh starts the matrix mesh's bus with consumers of kind: hosttest.StartConsumers, its
// principals password users, or startJWTCluster, operator-mode users.
type startMesh func(t testing.TB, dir, kind string) *hosttest.Mesh

// startJWTCluster is the matrix mesh on three operator-mode servers.
func startJWTCluster(t testing.TB, dir, kind string) *hosttest.Mesh {
	return hosttest.StartJWTCluster(t, dir, kind, 3)
}

func everyPrincipalDoesItsJobs(t *testing.T, start startMesh, kind string) {
	t.Parallel()
	b := start(t, matrixMesh, kind)
	all := jobs()
	for _, user := range b.Desired.Users() {
		if !slices.ContainsFunc(all, func(j job) bool { return j.user == user }) {
			t.Errorf("principal %s has no job in the matrix", user)
		}
	}
	for _, j := range all {
		if _, ok := b.Desired.Principal(j.user); !ok {
			t.Errorf("job %q names %s, which the matrix mesh does not derive", j.name, j.user)
			continue
		}
		t.Run(j.user+"/"+j.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), jobTimeout)
			defer cancel()
			if err := j.do(ctx, b, b.MustJoin(t, j.user)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// refusal is something a principal is not for, and the refusal the server must answer it with.
type refusal struct {
	user, what string
	do         func(ctx context.Context, b *hosttest.Mesh, h *host.Host) error
	op         string // busclient.OpPublish or busclient.OpSubscribe
	subject    string
	queue      string
}

func publishing(user, what, subject string) refusal {
	return refusal{user: user, what: what, op: busclient.OpPublish, subject: subject,
		do: func(ctx context.Context, _ *hosttest.Mesh, h *host.Host) error {
			return h.Send(ctx, subject, []byte("x"))
		}}
}

func persisting(user, what, subject string) refusal {
	return refusal{user: user, what: what, op: busclient.OpPublish, subject: subject,
		do: func(ctx context.Context, _ *hosttest.Mesh, h *host.Host) error {
			_, err := h.Publish(ctx, subject, []byte("x"))
			return err
		}}
}

func subscribing(user, what, subject string) refusal {
	return refusal{user: user, what: what, op: busclient.OpSubscribe, subject: subject,
		do: func(ctx context.Context, _ *hosttest.Mesh, h *host.Host) error {
			_, err := h.Subscribe(ctx, subject, func(*nats.Msg) {})
			return err
		}}
}

func queueing(user, what, subject, queue string) refusal {
	return refusal{user: user, what: what, op: busclient.OpSubscribe, subject: subject, queue: queue,
		do: func(ctx context.Context, _ *hosttest.Mesh, h *host.Host) error {
			_, err := h.QueueSubscribe(ctx, subject, queue, func(*nats.Msg) {})
			return err
		}}
}

func binding(user, what, stream, consumer string) refusal {
	return refusal{user: user, what: what, op: busclient.OpPublish, subject: "$JS.API.CONSUMER.INFO." + stream + "." + consumer,
		do: func(ctx context.Context, _ *hosttest.Mesh, h *host.Host) error {
			_, err := h.Consume(ctx, stream, consumer, func(jetstream.Msg) {})
			return err
		}}
}

func asking(user, what, subject string, ask func(ctx context.Context, js jetstream.JetStream) error) refusal {
	return refusal{user: user, what: what, op: busclient.OpPublish, subject: subject,
		do: func(ctx context.Context, _ *hosttest.Mesh, h *host.Host) error {
			return h.Check(ctx, func(ctx context.Context) error { return ask(ctx, h.JetStream()) })
		}}
}

// refusals is what each principal of the matrix mesh must be refused: another's events, inbox,
// consumer and acks; another node's declarations; a seat it does not hold; the JetStream API;
// other inboxes.
func refusals() []refusal {
	const (
		audit, shop, telegram, catalog, builder = "two.audit", "two.shop", "one.telegram", "one.mesh-catalog", "two.builder"
		nodeOne, enrolOne                       = "node.one", "enrol.one"
	)
	ack := func(stream, consumer string) string { return "$JS.ACK." + stream + "." + consumer + ".1.1.1.1.0" }
	seatStream, seatWorker := render.SeatStreamName(telegramSender), render.WorkerConsumer(telegramSender)
	buildStream, buildWorker := render.SeatStreamName(buildMachine), render.WorkerConsumer(buildMachine)
	streamInfo := func(ctx context.Context, js jetstream.JetStream) error {
		_, err := js.Stream(ctx, render.StreamEvents)
		return err
	}
	rs := []refusal{
		// A module: another module's events, inbox, consumer and acks.
		subscribing(audit, "hear an event it does not follow", upgraded),
		persisting(audit, "emit another module's event", orderPlaced),
		subscribing(audit, "hear another module's inbox", "_INBOX.two.shop.>"),
		binding(audit, "bind another module's consumer", render.StreamEvents, "two_shop"),
		subscribing(audit, "take another module's deliveries", render.DeliverSubject("two_shop")),
		publishing(audit, "pull another module's consumer", render.PullSubject(render.StreamEvents, "two_shop")),
		publishing(audit, "ack another module's deliveries", ack(render.StreamEvents, "two_shop")),
		binding(audit, "bind the controller's events consumer", render.StreamEvents, ctl),
		subscribing(audit, "serve another module's tool", status),
		publishing(audit, "call a tool it does not call", status),
		publishing(audit, "report a seat's event it does not hold", failed),
		subscribing(shop, "hear an event it does not follow", orderPlaced),
		subscribing(shop, "hear another module's inbox", "_INBOX.two.audit.>"),
		binding(shop, "bind another module's consumer", render.StreamEvents, "two_audit"),
		publishing(shop, "ack another module's deliveries", ack(render.StreamEvents, "two_audit")),
		publishing(catalog, "call a module's tool it does not call", status),
		persisting(catalog, "emit another module's event", orderPlaced),
		subscribing(catalog, "hear every event", "mesh.mod.>"),
		// A seat it does not hold, and a seat's work outside the worker's queue group.
		binding(shop, "bind the worker of a seat it does not hold", seatStream, seatWorker),
		queueing(shop, "take work of a seat it does not hold", render.DeliverSubject(seatWorker), seatWorker),
		subscribing(shop, "hear work it only sends", sendWork),
		binding(telegram, "bind the worker of a seat it does not hold", buildStream, buildWorker),
		queueing(telegram, "take work of a seat it does not hold", render.DeliverSubject(buildWorker), buildWorker),
		publishing(telegram, "ack work of a seat it does not hold", ack(buildStream, buildWorker)),
		persisting(telegram, "report an event of a seat it does not hold", built),
		persisting(telegram, "send itself work", sendWork),
		subscribing(telegram, "take its seat's work outside the queue group", render.DeliverSubject(seatWorker)),
		queueing(telegram, "take its seat's work in another queue group", render.DeliverSubject(seatWorker), "elsewhere"),
		publishing(shop, "pull the worker of a seat it does not hold", render.PullSubject(seatStream, seatWorker)),
		persisting(builder, "send its own seat work", buildWork),
		binding(builder, "bind another seat's worker", seatStream, seatWorker),
		// The JetStream API.
		asking(audit, "ask about a stream (js.Stream)", "$JS.API.STREAM.INFO."+render.StreamEvents, streamInfo),
		asking(shop, "ask about the account", "$JS.API.INFO", func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.AccountInfo(ctx)
			return err
		}),
		asking(telegram, "delete its worker consumer", "$JS.API.CONSUMER.DELETE."+seatStream+"."+seatWorker, func(ctx context.Context, js jetstream.JetStream) error {
			return js.DeleteConsumer(ctx, seatStream, seatWorker)
		}),
		asking(builder, "create a stream", "$JS.API.STREAM.CREATE.MINE", func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "MINE", Subjects: []string{"mine.>"}})
			return err
		}),
		asking(nodeOne, "ask about a stream (js.Stream)", "$JS.API.STREAM.INFO."+render.StreamEvents, streamInfo),
		asking(enrolOne, "ask about a stream (js.Stream)", "$JS.API.STREAM.INFO."+render.StreamEvents, streamInfo),
		subscribing(audit, "hear the JetStream API", "$JS.API.>"),
		// A node: another node's declarations, inbox and control subjects.
		binding(nodeOne, "bind another node's declarations", render.StreamNodes, "two"),
		subscribing(nodeOne, "take another node's declarations", render.DeliverSubject("two")),
		publishing(nodeOne, "pull another node's declarations", render.PullSubject(render.StreamNodes, "two")),
		subscribing(nodeOne, "hear another node's declaration live", render.DeclareSubject("two")),
		publishing(nodeOne, "ack another node's declarations", ack(render.StreamNodes, "two")),
		persisting(nodeOne, "report as another node", render.ReportSubject("two")),
		// Re-enrolling is the enrolment identity's alone: a node's own credential asking to
		// enrol could replace its key and cut off its agent (issue 22).
		persisting(nodeOne, "ask to enrol itself", render.EnrolSubject("one")),
		persisting(nodeOne, "ask to enrol another node", render.EnrolSubject("two")),
		publishing(nodeOne, "speak on a control subject no job of its needs", "mesh.control.one.other"),
		persisting(nodeOne, "declare to itself", render.DeclareSubject("one")),
		subscribing(nodeOne, "hear another node's inbox", "_INBOX.node.two.>"),
		subscribing(nodeOne, "hear the other nodes' reports", "mesh.control.>"),
		binding(nodeOne, "bind the controller's consumer", render.StreamControl, ctl),
		persisting(nodeOne, "emit a module's event", orderPlaced),
		// An enrolment identity: nothing but asking to enrol and hearing the answer.
		persisting(enrolOne, "report as its node", render.ReportSubject("one")),
		persisting(enrolOne, "enrol another node", render.EnrolSubject("two")),
		subscribing(enrolOne, "hear another node's enrolment answer", "_INBOX.enrol.two.>"),
		subscribing(enrolOne, "hear its node's inbox", "_INBOX.node.one.>"),
		subscribing(enrolOne, "hear its node's declaration", render.DeclareSubject("one")),
		binding(enrolOne, "bind its node's declarations", render.StreamNodes, "one"),
		// The controller, too, only what its jobs need.
		subscribing(ctl, "hear an enrolment answer it sends", "_INBOX.enrol.one.>"),
		subscribing(ctl, "hear a module's inbox", "_INBOX.two.shop.>"),
		subscribing(ctl, "hear an event it does not follow", orderPlaced),
		persisting(ctl, "emit a module's event", orderPlaced),
		persisting(ctl, "send work to a seat it does not send to", sendWork),
		subscribing(ctl, "take a module's deliveries", render.DeliverSubject("two_audit")),
		publishing(ctl, "ack a module's deliveries", ack(render.StreamEvents, "two_audit")),
		subscribing(ctl, "hear a seat's work", buildWork),
		persisting(ctl, "forge a node's report", render.ReportSubject("one")),
		subscribing(ctl, "hear other principals' JetStream API requests", "$JS.API.>"),
		subscribing(ctl, "hear every JetStream advisory, not only the ones watch heals from", "$JS.EVENT.ADVISORY.>"),
		subscribing(ctl, "hear the objects created, which heal nothing", "$JS.EVENT.ADVISORY.CONSUMER.CREATED.*.*"),
		{user: ctl, what: "answer a node's request at its reply subject", op: busclient.OpPublish, subject: "_INBOX.node.one.answer",
			do: func(ctx context.Context, b *hosttest.Mesh, h *host.Host) error {
				// No allow_responses: the controller answers enrolment at the address in the
				// request's payload, and nothing at a reply subject.
				sub, err := h.Subscribe(ctx, render.HeartbeatSubject("one"), func(m *nats.Msg) { _ = m.Respond([]byte("no")) })
				if err != nil {
					return err
				}
				defer unsubscribe(h, sub)
				if err := b.WaitRouted(ctx, h); err != nil {
					return err
				}
				nodeHost, err := b.Join("node.one")
				if err != nil {
					return helper("node.one", err)
				}
				node := nodeHost.Conn()
				answers, err := node.SubscribeSync("_INBOX.node.one.answer")
				if err != nil {
					return helper("node.one", err)
				}
				defer answers.Unsubscribe()
				return h.Check(ctx, func(ctx context.Context) error {
					if err := node.PublishRequest(render.HeartbeatSubject("one"), "_INBOX.node.one.answer", nil); err != nil {
						return helper("node.one", err)
					}
					_, err := answers.NextMsgWithContext(ctx)
					return helper("node.one", err)
				})
			}},
		// Other inboxes: the client's default random prefix is refused for everybody.
		subscribing(audit, "hear every inbox", "_INBOX.>"),
		subscribing(catalog, "use the client's default inbox", "_INBOX.abcdefghijklmnopqrstuv.*"),
		subscribing(telegram, "hear the controller's inbox", "_INBOX.controller.>"),
	}
	// The store kept on the bus is the controller's alone: a module, a node and an enrolment
	// identity may neither read it (every way nats.go reads a bucket is an API request) nor
	// write it.
	for _, user := range []string{audit, nodeOne, enrolOne} {
		rs = append(rs, bucketRefusals(user)...)
	}
	return append(rs, observerRefusals()...)
}

// bucketRefusals is user refused every way of reading and writing the store's bucket.
func bucketRefusals(user string) []refusal {
	const key = "credential.two.shop"
	direct := "$JS.API.DIRECT.GET." + render.StateStream + "." + strings.TrimSuffix(render.StateSubjects, ">") + key
	return []refusal{
		asking(user, "bind the store's bucket (kv get)", "$JS.API.STREAM.INFO."+render.StateStream, func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.KeyValue(ctx, render.StateBucket)
			return err
		}),
		asking(user, "read a row of the store (direct get)", direct, func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.Conn().RequestWithContext(ctx, direct, []byte(`{"last_by_subj":"`+key+`"}`))
			return err
		}),
		asking(user, "read the store through a consumer of its own", "$JS.API.CONSUMER.CREATE."+render.StateStream+".peek", func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.CreateConsumer(ctx, render.StateStream, jetstream.ConsumerConfig{Name: "peek", AckPolicy: jetstream.AckNonePolicy})
			return err
		}),
		persisting(user, "write a row of the store", strings.TrimSuffix(render.StateSubjects, ">")+key),
		asking(user, "read who leads the mesh (kv get)", "$JS.API.STREAM.INFO."+render.LeaseStream, func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.KeyValue(ctx, render.LeaseBucket)
			return err
		}),
		persisting(user, "take the apply lock", strings.TrimSuffix(render.LeaseSubjects, ">")+"lock"),
	}
}

// byKind is what a principal is refused with one kind of consumer and not the other: the
// other kind's way of taking the same messages.
func byKind(kind string) []refusal {
	seatStream, seatWorker := render.SeatStreamName(telegramSender), render.WorkerConsumer(telegramSender)
	if kind == model.ConsumersPush {
		return []refusal{
			publishing("one.telegram", "pull its seat's work instead of taking deliveries", render.PullSubject(seatStream, seatWorker)),
			publishing("node.one", "pull its declarations instead of taking deliveries", render.PullSubject(render.StreamNodes, "one")),
		}
	}
	return []refusal{
		queueing("one.telegram", "take its seat's work as pushed deliveries", render.DeliverSubject(seatWorker), seatWorker),
		subscribing("node.one", "take its declarations as pushed deliveries", render.DeliverSubject("one")),
		subscribing("two.audit", "take its events as pushed deliveries", render.DeliverSubject("two_audit")),
		subscribing(ctl, "take CONTROL as pushed deliveries", render.DeliverSubject(ctl)),
	}
}

// Every principal is refused what is not its job, and the refusal is a *busclient.PermissionError
// naming the subject — reported by Check, not a timeout — with pull and with push consumers.
func TestEveryPrincipalIsRefusedWhatIsNotItsJob(t *testing.T) {
	eachKind(t, func(t *testing.T, kind string) {
		everyPrincipalIsRefusedWhatIsNotItsJob(t, hosttest.StartConsumers, kind)
	})
}

// The same on three operator-mode servers, every principal refused by its user JWT's grants.
func TestEveryPrincipalIsRefusedWhatIsNotItsJobAsAJWTUser(t *testing.T) {
	eachKind(t, func(t *testing.T, kind string) { everyPrincipalIsRefusedWhatIsNotItsJob(t, startJWTCluster, kind) })
}

func everyPrincipalIsRefusedWhatIsNotItsJob(t *testing.T, start startMesh, kind string) {
	t.Parallel()
	b := start(t, matrixMesh, kind)
	rs := append(refusals(), byKind(kind)...)
	if len(rs) < 40 {
		t.Errorf("only %d refusals; the matrix asks for at least 40", len(rs))
	}
	for _, r := range rs {
		t.Run(r.user+"/"+r.what, func(t *testing.T) {
			// Bounded by a minute, not jobTimeout: a refusal reported only when the operation
			// gives up then takes that minute, far from the moments one reported as it arrives
			// takes on any machine.
			ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit)
			defer cancel()
			start := time.Now()
			err := r.do(ctx, b, b.MustJoin(t, r.user))
			var v *busclient.PermissionError
			if !errors.As(err, &v) {
				t.Fatalf("got %v, want a permission error naming %s", err, r.subject)
			}
			want := busclient.PermissionError{User: r.user, Op: r.op, Subject: r.subject, Queue: r.queue}
			if *v != want {
				t.Fatalf("refused %+v, want %+v", *v, want)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", r.subject)) {
				t.Errorf("the error does not name the subject: %v", err)
			}
			// A refusal is reported as it arrives, not when the operation gives up.
			if d := time.Since(start); d > testwait.Limit/2 {
				t.Errorf("the refusal took %s to report: it came when the operation gave up", d)
			}
		})
	}
}
