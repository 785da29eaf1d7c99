package render

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/meshbus/meshctl/model"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

func mustLoad(tb testing.TB, dir string) *model.Mesh {
	tb.Helper()
	m, err := model.Load(dir)
	if err != nil {
		tb.Fatalf("loading %s: %v", dir, err)
	}
	return m
}

// parseUsers reads an accounts config with the server's own parser.
func parseUsers(tb testing.TB, conf string) map[string]*server.User {
	tb.Helper()
	opts := &server.Options{}
	if err := opts.ProcessConfigString(conf); err != nil {
		tb.Fatalf("the server's parser refused the config: %v\n%s", err, conf)
	}
	out := map[string]*server.User{}
	for _, u := range opts.Users {
		out[u.Username] = u
	}
	return out
}

// deviation is a difference from the reference accounts config's lists
// (testdata/seed002-composed.conf), with the reason it exists.
type deviation struct {
	user, list, subject string
	added               bool
	why                 string
}

// The reference is held line by line; every difference is listed here with what needs it.
// Additions are grants a live server proved necessary (the delivery subjects, the holder's
// worker grants and the module's consumer info, which host's TestEveryGrantIsNeeded
// confirms); removals are grants for consumers
// that do not exist, and the controller's grants that no job of its needs on a live bus
// (host's TestEveryGrantIsNeeded takes each grant away in turn). allow_responses is listed
// as the list "allow_responses" with no subject.
var seedDeviations = []deviation{
	{"controller", "subscribe", "_DELIVER.controller", true, "a push consumer delivers on _DELIVER.<name>; binding the CONTROL consumer subscribes it"},
	{"controller", "subscribe", "_DELIVER.controller.>", true, "the controller's EVENTS consumer delivers on _DELIVER.controller.events"},
	{"controller", "subscribe", "$JS.EVENT.ADVISORY.STREAM.DELETED.*", true, "watch heals a stream deleted by hand as the server announces it, not at the next resync"},
	{"controller", "subscribe", "$JS.EVENT.ADVISORY.STREAM.UPDATED.*", true, "watch heals a stream's config changed by hand as the server announces it"},
	{"controller", "subscribe", "$JS.EVENT.ADVISORY.CONSUMER.DELETED.*.*", true, "watch heals a consumer deleted by hand as the server announces it"},
	{"controller", "subscribe", "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.*.*", true, "watch counts each message that reached its consumer's max_deliver, a dead letter, as the server announces it"},
	{"controller", "publish", StateSubjects, true, "the store is kept on the bus, in a KV bucket only the controller may write (host's matrix refuses it to everybody else)"},
	{"controller", "publish", LeaseSubjects, true, "which watch leads and who holds the apply lock are leases in a KV bucket only the controller may write (host's matrix refuses it to everybody else)"},
	{"node.one", "subscribe", "_DELIVER.one", true, "binding the declaration consumer subscribes its deliver subject"},
	{"node.one", "publish", "mesh.control.one.>", false, "the wildcard also grants the enrolment subject, so a node's own credential could re-enrol with a key of its choosing and cut off its agent; re-enrolling is enrol.one's alone"},
	{"node.one", "publish", "mesh.control.one.report", true, "its reports, by name instead of mesh.control.one.> (host's TestEveryGrantIsNeeded)"},
	{"node.one", "publish", "mesh.control.one.heartbeat", true, "its heartbeats, by name instead of mesh.control.one.> (host's TestEveryGrantIsNeeded)"},
	{"one.telegram", "publish", "$JS.API.CONSUMER.INFO.SEAT_TELEGRAM_SENDER.SEAT_TELEGRAM_SENDER_worker", true, "binding the worker consumer asks about it"},
	{"one.telegram", "publish", "$JS.ACK.SEAT_TELEGRAM_SENDER.SEAT_TELEGRAM_SENDER_worker.>", true, "acknowledging the seat's work"},
	{"one.telegram", "subscribe", "_DELIVER.SEAT_TELEGRAM_SENDER_worker SEAT_TELEGRAM_SENDER_worker", true, "taking the seat's work, in the worker's queue group only (the reference granted the subject without the group)"},
	{"one.telegram", "publish", "$JS.ACK.EVENTS.one_telegram.>", false, "telegram follows nothing, so one_telegram does not exist: a grant no job needs"},
	{"two.audit", "publish", "$JS.API.CONSUMER.INFO.EVENTS.two_audit", true, "binding a push consumer asks for its info (the reference omits it; host's TestEveryGrantIsNeeded decides)"},
	{"two.audit", "subscribe", "_DELIVER.two_audit", true, "binding its EVENTS consumer subscribes its deliver subject"},
	{"two.shop", "publish", "$JS.ACK.EVENTS.two_shop.>", false, "shop follows nothing, so two_shop does not exist: a grant no job needs"},
	{"controller", "publish", "mesh.control.>", false, "no controller job publishes there (it hears nodes on it and answers elsewhere); taken away on a live bus, none of its jobs is refused (host's TestEveryGrantIsNeeded)"},
	{"controller", "subscribe", "$JS.API.>", false, "API answers come to its inbox; subscribing would only hear others' API requests; taken away on a live bus, none of its jobs is refused (host's TestEveryGrantIsNeeded)"},
	{"controller", "allow_responses", "", false, "it answers no request at its reply subject (enrolment goes to the payload's address, acks are granted by name); taken away on a live bus, none of its jobs is refused (host's TestEveryGrantIsNeeded)"},
}

func TestSeedUsersMatchTheReference(t *testing.T) {
	t.Parallel()
	ref, err := os.ReadFile("testdata/seed002-composed.conf")
	if err != nil {
		t.Fatal(err)
	}
	want := parseUsers(t, string(ref))
	d := Derive(mustLoad(t, "../examples/seed"))
	got := parseUsers(t, string(AccountsConfig(d.Principals, nil)))

	var found []deviation
	for user, w := range want {
		g, ok := got[user]
		if !ok {
			t.Errorf("user %q of the reference is not derived", user)
			continue
		}
		for _, list := range []struct {
			name      string
			want, got []string
		}{
			{"publish", w.Permissions.Publish.Allow, g.Permissions.Publish.Allow},
			{"subscribe", w.Permissions.Subscribe.Allow, g.Permissions.Subscribe.Allow},
		} {
			for _, s := range list.got {
				if !slices.Contains(list.want, s) {
					found = append(found, deviation{user: user, list: list.name, subject: s, added: true})
				}
			}
			for _, s := range list.want {
				if !slices.Contains(list.got, s) {
					found = append(found, deviation{user: user, list: list.name, subject: s})
				}
			}
		}
		if (w.Permissions.Response != nil) != (g.Permissions.Response != nil) {
			found = append(found, deviation{user: user, list: "allow_responses", added: g.Permissions.Response != nil})
		} else if w.Permissions.Response != nil && *w.Permissions.Response != *g.Permissions.Response {
			t.Errorf("%s: allow_responses %+v, the reference says %+v", user, *g.Permissions.Response, *w.Permissions.Response)
		}
	}
	key := func(d deviation) string {
		return d.user + " " + d.list + " " + d.subject + map[bool]string{true: " added", false: " removed"}[d.added]
	}
	var gotKeys, wantKeys []string
	for _, d := range found {
		gotKeys = append(gotKeys, key(d))
	}
	for _, d := range seedDeviations {
		if d.why == "" {
			t.Errorf("deviation %s has no reason", key(d))
		}
		wantKeys = append(wantKeys, key(d))
	}
	slices.Sort(gotKeys)
	slices.Sort(wantKeys)
	if diff := cmp.Diff(wantKeys, gotKeys); diff != "" {
		t.Errorf("the derivation differs from the reference accounts config other than by the documented deviations (-documented +found):\n%s", diff)
	}
}

func TestGolden(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"seed", "quickstart"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := Derive(mustLoad(t, filepath.Join("..", "examples", name)))
			hashes := map[string]string{ControllerUser: "$2a$11$" + strings.Repeat("c", 53)}
			conf := AccountsConfig(d.Principals, hashes)
			js, err := d.JSON()
			if err != nil {
				t.Fatal(err)
			}
			golden(t, filepath.Join("testdata", "golden", name+".conf"), conf)
			golden(t, filepath.Join("testdata", "golden", name+".json"), js)
		})
	}
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go test ./render -update` to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-want +got); rerun with -update if the change is meant:\n%s", path, diff)
	}
}

func TestDerivationIsDeterministic(t *testing.T) {
	t.Parallel()
	m := mustLoad(t, "../examples/seed")
	a := AccountsConfig(Derive(m).Principals, nil)
	for range 5 {
		if b := AccountsConfig(Derive(m).Principals, nil); string(a) != string(b) {
			t.Fatal("two derivations of one mesh rendered different configs")
		}
	}
}

func TestNames(t *testing.T) {
	t.Parallel()
	inst := model.Instance{Node: "one", Module: "telegram"}
	for _, c := range []struct{ got, want string }{
		{SeatStreamName("telegram-sender"), "SEAT_TELEGRAM_SENDER"},
		{WorkerConsumer("telegram-sender"), "SEAT_TELEGRAM_SENDER_worker"},
		{InstanceUser(inst), "one.telegram"},
		{InstanceConsumer(inst), "one_telegram"},
		{NodeUser("one"), "node.one"},
		{EnrolUser("one"), "enrol.one"},
		{DeliverSubject("one_telegram"), "_DELIVER.one_telegram"},
		{Inbox("one.telegram"), "_INBOX.one.telegram"},
		{EventSubject(model.EventRef{Owner: "shop", Event: "order.placed"}), "mesh.mod.shop.event.order.placed"},
		{EventSubject(model.EventRef{Seat: true, Owner: "mailer", Event: "sent"}), "mesh.seat.mailer.event.sent"},
		{ToolSubject(model.ToolRef{Owner: "shop", Tool: "status"}), "mesh.mod.shop.tool.status"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestMaxConsumersLeavesRoomAndMovesInSteps(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ n, want int }{{0, 2000}, {4, 2000}, {999, 2000}, {1000, 3000}, {5001, 7000}} {
		if got := maxConsumersFor(c.n); got != c.want {
			t.Errorf("maxConsumersFor(%d) = %d, want %d", c.n, got, c.want)
		}
		if got := maxConsumersFor(c.n); got < c.n+1000 {
			t.Errorf("maxConsumersFor(%d) = %d leaves less than 1,000 spare", c.n, got)
		}
	}
}

// An empty allow-list is written as a deny of everything: the server reads an empty
// subscribe allow-list as no restriction.
func TestAnEmptyListDeniesEverything(t *testing.T) {
	t.Parallel()
	conf := AccountsConfig([]Principal{{User: "x", Subscribe: []Grant{{Subject: "_INBOX.x.>"}}}}, nil)
	u := parseUsers(t, string(conf))["x"]
	if u == nil || u.Permissions.Publish == nil || !slices.Equal(u.Permissions.Publish.Deny, []string{">"}) || len(u.Permissions.Publish.Allow) != 0 {
		t.Fatalf("a principal with nothing to publish is not denied everything:\n%s", conf)
	}
}

// Every stream and consumer carries the ownership marker; every consumer's ack grant names
// exactly a consumer that exists on the stream it names.
func TestEveryObjectIsMarkedAndEveryAckNamesARealConsumer(t *testing.T) {
	t.Parallel()
	d := Derive(mustLoad(t, "../examples/seed"))
	exists := map[string]bool{}
	for _, s := range d.Streams {
		if s.Metadata[OwnerKey] != OwnerValue {
			t.Errorf("stream %s lacks the ownership marker", s.Name)
		}
	}
	for _, c := range d.Consumers {
		if c.Config.Metadata[OwnerKey] != OwnerValue {
			t.Errorf("consumer %s/%s lacks the ownership marker", c.Stream, c.Name())
		}
		if strings.Contains(c.Name(), ".") {
			t.Errorf("consumer name %q contains a dot, which the server refuses", c.Name())
		}
		exists[c.Stream+"."+c.Name()] = true
	}
	for _, p := range d.Principals {
		for _, g := range p.Publish {
			if rest, ok := strings.CutPrefix(g.Subject, "$JS.ACK."); ok {
				target := strings.TrimSuffix(rest, ".>")
				if !exists[target] {
					t.Errorf("%s may ack %s, which is no derived consumer", p.User, target)
				}
			}
		}
	}
}

// EntryOf finds one user's whole entry, and only that user's: not a user whose name the
// other's begins with, and nothing of the system user's account, which is laid out apart.
func TestEntryOfFindsOneUsersWholeEntry(t *testing.T) {
	t.Parallel()
	ps := []Principal{
		{User: SystemUser, Kind: KindSystem, Publish: []Grant{{Subject: ReloadRequests}}},
		{User: "a", Publish: []Grant{{Subject: "x.>"}}},
		{User: "a.b", Publish: []Grant{{Subject: "y.>"}}, AllowResponses: true},
	}
	conf := AccountsConfig(ps, map[string]string{"a": "$2a$04$aaaa", "a.b": "$2a$04$bbbb"})
	a, ab := EntryOf(conf, "a"), EntryOf(conf, "a.b")
	if !bytes.HasPrefix(a, []byte(`      { user: "a", password: "$2a$04$aaaa"`)) || !bytes.HasSuffix(a, []byte("      } }\n")) ||
		bytes.Contains(a, []byte("y.>")) || !bytes.Contains(a, []byte("x.>")) {
		t.Fatalf("the entry of a:\n%s", a)
	}
	if !bytes.Contains(ab, []byte("allow_responses")) || bytes.Contains(ab, []byte("x.>")) {
		t.Fatalf("the entry of a.b:\n%s", ab)
	}
	if EntryOf(conf, SystemUser) != nil || EntryOf(conf, "b") != nil {
		t.Fatal("EntryOf found an entry outside the mesh's users, or of a user with none")
	}
}
