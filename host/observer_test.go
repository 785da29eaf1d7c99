package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/host/hosttest"
	"github.com/meshbus/meshctl/render"
)

// alice is the matrix mesh's observer.
const alice = "observer.alice"

// observerJobs are what an observer exists to do: read, through the JetStream API, the account
// and every stream and consumer the mesh derives, as `nats account info`, `stream ls`, `stream
// report`, `stream info`, `consumer ls`, `consumer report` and `consumer info` ask it; and hear
// the nodes' heartbeats. host_test's TestAnObserverRunsTheNatsCLI runs those commands
// themselves.
func observerJobs() []job {
	read := func(name string, do func(ctx context.Context, b *hosttest.Mesh, js jetstream.JetStream) error) job {
		return job{user: alice, name: name, do: func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
			return as.Check(ctx, func(ctx context.Context) error { return do(ctx, b, as.JetStream()) })
		}}
	}
	return []job{
		read("read the account's JetStream use (nats account info)", func(ctx context.Context, b *hosttest.Mesh, js jetstream.JetStream) error {
			info, err := js.AccountInfo(ctx)
			if err != nil {
				return err
			}
			if info.Streams < len(b.Desired.Streams) {
				return fmt.Errorf("the account holds %d streams, fewer than the mesh's %d", info.Streams, len(b.Desired.Streams))
			}
			return nil
		}),
		{user: alice, name: "read its own permissions (nats account info)", do: func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
			reply, err := as.Request(ctx, render.UserInfoRequest, nil)
			if err != nil {
				return err
			}
			var info struct {
				Data struct {
					User        string          `json:"user"`
					UserName    string          `json:"user_name"`
					Permissions json.RawMessage `json:"permissions"`
				} `json:"data"`
			}
			err = json.Unmarshal(reply.Data, &info)
			name := info.Data.User
			if b.JWT != nil {
				// In operator mode the user is its public key, and its name is its JWT's.
				name = info.Data.UserName
			}
			if err != nil || name != alice || len(info.Data.Permissions) == 0 {
				return fmt.Errorf("the server answered %q (%v), not observer.alice's permissions", reply.Data, err)
			}
			return nil
		}},
		read("list the streams by name (nats stream ls --names)", func(ctx context.Context, b *hosttest.Mesh, js jetstream.JetStream) error {
			l := js.StreamNames(ctx)
			var got []string
			for name := range l.Name() {
				got = append(got, name)
			}
			if err := l.Err(); err != nil {
				return err
			}
			return everyStream(b, got)
		}),
		read("list the streams with their state (nats stream report)", func(ctx context.Context, b *hosttest.Mesh, js jetstream.JetStream) error {
			l := js.ListStreams(ctx)
			var got []string
			for info := range l.Info() {
				got = append(got, info.Config.Name)
			}
			if err := l.Err(); err != nil {
				return err
			}
			return everyStream(b, got)
		}),
		read("read each stream's config and state (nats stream info)", func(ctx context.Context, b *hosttest.Mesh, js jetstream.JetStream) error {
			for _, s := range b.Desired.Streams {
				if _, err := js.Stream(ctx, s.Name); err != nil {
					return err
				}
			}
			return nil
		}),
		read("list each stream's consumers by name (nats consumer ls)", func(ctx context.Context, b *hosttest.Mesh, js jetstream.JetStream) error {
			return eachStreamsConsumers(ctx, b, js, func(s jetstream.Stream) ([]string, error) {
				l := s.ConsumerNames(ctx)
				var got []string
				for name := range l.Name() {
					got = append(got, name)
				}
				return got, l.Err()
			})
		}),
		read("list each stream's consumers with their state (nats consumer report)", func(ctx context.Context, b *hosttest.Mesh, js jetstream.JetStream) error {
			return eachStreamsConsumers(ctx, b, js, func(s jetstream.Stream) ([]string, error) {
				l := s.ListConsumers(ctx)
				var got []string
				for info := range l.Info() {
					got = append(got, info.Name)
				}
				return got, l.Err()
			})
		}),
		read("read each consumer's backlog, redeliveries and waiting pulls (nats consumer info)", func(ctx context.Context, b *hosttest.Mesh, js jetstream.JetStream) error {
			for _, c := range b.Desired.Consumers {
				if _, err := host.ConsumerInfo(ctx, js, c.Stream, c.Name()); err != nil {
					return err
				}
			}
			return nil
		}),
		{user: alice, name: "hear every node's heartbeat on one subscription", do: func(ctx context.Context, b *hosttest.Mesh, as *host.Host) error {
			heard := newMessages()
			sub, err := as.Subscribe(ctx, render.HeartbeatSubjects, heard.handle)
			if err != nil {
				return err
			}
			defer unsubscribe(as, sub)
			if err := b.WaitRouted(ctx, as); err != nil {
				return err
			}
			for _, n := range []string{"one", "two"} {
				node, err := b.Join(render.NodeUser(n))
				if err != nil {
					return helper(render.NodeUser(n), err)
				}
				beat := token("alive")
				if err := node.Heartbeat(ctx, n, beat); err != nil {
					return helper(render.NodeUser(n), err)
				}
				if err := heard.await(ctx, render.HeartbeatSubject(n), beat); err != nil {
					return err
				}
			}
			return nil
		}},
	}
}

// everyStream says which of the mesh's streams got lacks.
func everyStream(b *hosttest.Mesh, got []string) error {
	for _, s := range b.Desired.Streams {
		if !slices.Contains(got, s.Name) {
			return fmt.Errorf("stream %s is not listed (got %v)", s.Name, got)
		}
	}
	return nil
}

// eachStreamsConsumers lists each of the mesh's streams' consumers with list, and says which
// of the mesh's consumers a list lacks.
func eachStreamsConsumers(ctx context.Context, b *hosttest.Mesh, js jetstream.JetStream, list func(jetstream.Stream) ([]string, error)) error {
	for _, s := range b.Desired.Streams {
		stream, err := js.Stream(ctx, s.Name)
		if err != nil {
			return err
		}
		got, err := list(stream)
		if err != nil {
			return err
		}
		for _, c := range b.Desired.Consumers {
			if c.Stream == s.Name && !slices.Contains(got, c.Name()) {
				return fmt.Errorf("consumer %s/%s is not listed (got %v)", s.Name, c.Name(), got)
			}
		}
	}
	return nil
}

// observerRefusals are what an observer must be refused: anything a host would act on — a
// mesh subject, an ack, a request for a consumer's messages, its deliveries — every JetStream
// request that changes something or reads a message, another principal's inbox, and the
// store's bucket.
func observerRefusals() []refusal {
	ack := "$JS.ACK." + render.StreamEvents + ".two_audit.1.1.1.1.0"
	events := func(ctx context.Context, js jetstream.JetStream) (jetstream.Stream, error) {
		return js.Stream(ctx, render.StreamEvents)
	}
	rs := []refusal{
		persisting(alice, "emit a module's event", orderPlaced),
		persisting(alice, "report a seat's event", delivered),
		persisting(alice, "send work to a seat", sendWork),
		persisting(alice, "report as a node", render.ReportSubject("one")),
		persisting(alice, "ask to enrol a node", render.EnrolSubject("one")),
		persisting(alice, "declare to a node", render.DeclareSubject("one")),
		publishing(alice, "heartbeat as a node", render.HeartbeatSubject("one")),
		publishing(alice, "call a module's tool", status),
		publishing(alice, "pull a module's consumer", render.PullSubject(render.StreamEvents, "two_audit")),
		publishing(alice, "pull a seat's work", render.PullSubject(render.SeatStreamName(telegramSender), render.WorkerConsumer(telegramSender))),
		publishing(alice, "ack a module's delivery", ack),
		subscribing(alice, "take a module's pushed deliveries", render.DeliverSubject("two_audit")),
		subscribing(alice, "hear every event", "mesh.mod.>"),
		subscribing(alice, "hear a seat's work", sendWork),
		subscribing(alice, "hear nodes' reports", "mesh.control.>"),
		subscribing(alice, "hear a node's declaration", render.DeclareSubject("one")),
		subscribing(alice, "hear a module's tool calls", status),
		subscribing(alice, "hear a module's inbox", "_INBOX.two.shop.>"),
		subscribing(alice, "hear the controller's inbox", "_INBOX.controller.>"),
		subscribing(alice, "hear every inbox", "_INBOX.>"),
		subscribing(alice, "hear the JetStream API", "$JS.API.>"),
		asking(alice, "create a consumer", "$JS.API.CONSUMER.CREATE."+render.StreamEvents+".peek", func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.CreateConsumer(ctx, render.StreamEvents, jetstream.ConsumerConfig{Name: "peek", AckPolicy: jetstream.AckNonePolicy})
			return err
		}),
		asking(alice, "delete a consumer", "$JS.API.CONSUMER.DELETE."+render.StreamEvents+".two_audit", func(ctx context.Context, js jetstream.JetStream) error {
			return js.DeleteConsumer(ctx, render.StreamEvents, "two_audit")
		}),
		asking(alice, "delete a stream", "$JS.API.STREAM.DELETE."+render.StreamEvents, func(ctx context.Context, js jetstream.JetStream) error {
			return js.DeleteStream(ctx, render.StreamEvents)
		}),
		asking(alice, "purge a stream", "$JS.API.STREAM.PURGE."+render.StreamEvents, func(ctx context.Context, js jetstream.JetStream) error {
			s, err := events(ctx, js)
			if err == nil {
				err = s.Purge(ctx)
			}
			return err
		}),
		asking(alice, "change a stream", "$JS.API.STREAM.UPDATE."+render.StreamEvents, func(ctx context.Context, js jetstream.JetStream) error {
			s, err := events(ctx, js)
			if err == nil {
				_, err = js.UpdateStream(ctx, s.CachedInfo().Config)
			}
			return err
		}),
		asking(alice, "create a stream", "$JS.API.STREAM.CREATE.MINE", func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "MINE", Subjects: []string{"mine.>"}})
			return err
		}),
		asking(alice, "read an event (stream msg get)", "$JS.API.STREAM.MSG.GET."+render.StreamEvents, func(ctx context.Context, js jetstream.JetStream) error {
			s, err := events(ctx, js)
			if err == nil {
				_, err = s.GetMsg(ctx, 1)
			}
			return err
		}),
		asking(alice, "read an event (direct get)", "$JS.API.DIRECT.GET."+render.StreamEvents, func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.Conn().RequestWithContext(ctx, "$JS.API.DIRECT.GET."+render.StreamEvents, []byte(`{"seq":1}`))
			return err
		}),
	}
	return append(rs, bucketRefusals(alice)...)
}
