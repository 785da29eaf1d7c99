package explain_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/explain"
	"github.com/meshbus/meshctl/explain/explaintest"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// description is the YAML of an example, with bus.consumers set to consumers unless "", and
// the mesh it loads as.
func description(t *testing.T, example, consumers string) ([]model.File, *model.Mesh) {
	t.Helper()
	files, err := model.ReadDir("../examples/" + example)
	if err != nil {
		t.Fatal(err)
	}
	if consumers != "" {
		files = withConsumers(files, consumers)
	}
	m, err := model.Parse(files)
	if err != nil {
		t.Fatal(err)
	}
	return files, m
}

// withConsumers is files with bus.consumers set: in the file with the bus section, or in one
// of its own.
func withConsumers(files []model.File, consumers string) []model.File {
	out := append([]model.File{}, files...)
	for i, f := range out {
		if data := string(f.Data); strings.HasPrefix(data, "bus:") || strings.Contains(data, "\nbus:") {
			out[i].Data = []byte(strings.Replace(data, "consumers: push", "consumers: "+consumers, 1))
			return out
		}
	}
	return append(out, model.File{Name: "zz-consumers.yaml", Data: []byte("bus:\n  consumers: " + consumers + "\n")})
}

func pub(user, subject string) busclient.PermissionError {
	return busclient.PermissionError{User: user, Op: busclient.OpPublish, Subject: subject}
}

func sub(user, subject string) busclient.PermissionError {
	return busclient.PermissionError{User: user, Op: busclient.OpSubscribe, Subject: subject}
}

// Each refusal is explained in the description's terms: the YAML that would grant it — all of
// it, where one declaration is not enough — or why none would.
func TestRefusalsAreExplainedInTheDescriptionsTerms(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		consumers string
		r         busclient.PermissionError
		want      explain.Advice
	}{
		// The issue's own example: a call not declared.
		{"", pub("two.shop", "mesh.mod.telegram.tool.status"), explain.Advice{Text: "module shop does not declare calls: [telegram/status]", Grantable: true}},
		{"", sub("two.shop", "mesh.mod.mesh-catalog.event.upgraded"), explain.Advice{Text: "module shop does not declare follows: [mesh-catalog/upgraded]", Grantable: true}},
		{"", pub("two.shop", "mesh.mod.shop.event.order.cancelled"), explain.Advice{Text: "module shop does not declare emits: [order.cancelled]", Grantable: true}},
		{"", sub("one.telegram", "mesh.mod.telegram.tool.restart"), explain.Advice{Text: "module telegram does not declare serves: [restart]", Grantable: true}},
		{"", pub("two.audit", "mesh.mod.shop.event.order.placed"), explain.Advice{Text: "only module shop's instances emit the events of shop/order.placed: no declaration grants it"}},
		{"", pub("two.audit", "mesh.seat.telegram-sender.accept.send"), explain.Advice{Text: "module audit does not declare sends: [telegram-sender/send]", Grantable: true}},
		{"", pub("one.telegram", "mesh.seat.telegram-sender.event.lost"), explain.Advice{Text: "seat telegram-sender does not declare emits: [lost]", Grantable: true}},
		{"", pub("controller", "mesh.mod.telegram.tool.status"), explain.Advice{Text: "the controller does not declare calls: [telegram/status]", Grantable: true}},
		{"", sub("controller", "mesh.mod.shop.event.order.placed"), explain.Advice{Text: "the controller does not declare follows: [shop/order.placed]", Grantable: true}},
		// One declaration is not enough: the callee must serve the tool, the seat must
		// accept the work, the module must claim the seat it is handed.
		{"", pub("two.shop", "mesh.mod.audit.tool.status"), explain.Advice{Text: "module audit would need `serves: [status]`, and module shop `calls: [audit/status]`", Grantable: true}},
		{"", sub("two.audit", "mesh.mod.shop.event.order.cancelled"), explain.Advice{Text: "module shop would need `emits: [order.cancelled]`, and module audit `follows: [shop/order.cancelled]`", Grantable: true}},
		{"", pub("two.shop", "mesh.seat.mesh-build-machine.accept.test"), explain.Advice{Text: "seat mesh-build-machine would need `accepts: [test]`, and module shop `sends: [mesh-build-machine/test]`", Grantable: true}},
		{"", pub("two.shop", "mesh.seat.telegram-sender.event.delivered"), explain.Advice{Text: "only seat telegram-sender's holder emits the events of seat:telegram-sender/delivered, and two.shop does not hold it; to hand it over: module shop would need `claims: [telegram-sender]`, and `holders: [{seat: telegram-sender, node: two, module: shop}]`", Grantable: true}},
		{"", pub("two.audit", "$JS.API.CONSUMER.INFO.SEAT_TELEGRAM_SENDER.SEAT_TELEGRAM_SENDER_worker"), explain.Advice{Text: "only seat telegram-sender's holder takes its work, and two.audit does not hold it; to hand it over: module audit would need `claims: [telegram-sender]`, and `holders: [{seat: telegram-sender, node: two, module: audit}]`", Grantable: true}},
		// What no declaration can grant.
		{"", sub("two.audit", "_INBOX.two.shop.>"), explain.Advice{Text: "inbox prefix not set: module audit subscribes to inboxes outside its own, _INBOX.two.audit.>; set the client's inbox prefix to _INBOX.two.audit (nats.CustomInboxPrefix, inboxPrefix): no declaration grants it"}},
		{"", pub("two.audit", "$JS.API.STREAM.INFO.EVENTS"), explain.Advice{Text: "$JS.API.STREAM.INFO.EVENTS is the JetStream API, which is the controller's: a host binds its own consumers by name (never js.Stream, which asks STREAM.INFO, or a create): no declaration grants it"}},
		{"", pub("two.audit", "$JS.API.CONSUMER.INFO.EVENTS.two_shop"), explain.Advice{Text: "consumer EVENTS/two_shop is two.shop's: no declaration grants it"}},
		{"", sub("two.audit", "mesh.mod.>"), explain.Advice{Text: "mesh.mod.> is a wildcard over other principals' traffic: no declaration grants it"}},
		{"", pub("nobody", "x"), explain.Advice{Text: `user "nobody" is no principal of this description: no declaration grants it`}},
		{"", pub("two.shop", "mesh.mod.ghost.tool.status"), explain.Advice{Text: "mesh.mod.ghost.tool.status is the traffic of module ghost, which the description does not declare: no declaration grants it"}},
		{"", pub("two.shop", "mesh.mod.audit.tool.bad$name"), explain.Advice{Text: "module audit `serves: [bad$name]`, module shop `calls: [audit/bad$name]` would be refused: tool \"bad$name\" must be subject tokens joined by dots (letters, digits, `-`, `_`), never a wildcard, a space or an empty token: no declaration grants it"}},
		// Consumers: a seat not held, a module with no consumer, the other kind of consumer.
		{"", pub("two.shop", "$JS.API.CONSUMER.INFO.SEAT_TELEGRAM_SENDER.SEAT_TELEGRAM_SENDER_worker"), explain.Advice{Text: "only seat telegram-sender's holder takes its work, and two.shop does not hold it; to hand it over: module shop would need `claims: [telegram-sender]`, and `holders: [{seat: telegram-sender, node: two, module: shop}]`", Grantable: true}},
		{"", pub("two.audit", "$JS.API.CONSUMER.MSG.NEXT.EVENTS.two_audit"), explain.Advice{Text: "the mesh's consumers are pushed, not pulled: take deliveries on _DELIVER.two_audit, or declare bus: {consumers: pull}", Grantable: true}},
		{model.ConsumersPull, sub("two.audit", "_DELIVER.two_audit"), explain.Advice{Text: "the mesh's consumers are pulled (bus.consumers: pull), so nothing delivers on _DELIVER.two_audit: bind the consumer as a pull consumer, or declare bus: {consumers: push}", Grantable: true}},
		// A module that follows nothing has no events consumer: a host that binds one is wrong,
		// however the module is meant to be used.
		{"", pub("two.shop", "$JS.API.CONSUMER.INFO.EVENTS.two_shop"), explain.Advice{Text: "module shop follows nothing, so it has no events consumer EVENTS/two_shop: its host should not bind one"}},
		{"", pub("one.telegram", "$JS.API.CONSUMER.INFO.EVENTS.one_telegram"), explain.Advice{Text: "module telegram follows nothing, so it has no events consumer EVENTS/one_telegram: its host should not bind one (it takes seat telegram-sender's work from SEAT_TELEGRAM_SENDER/SEAT_TELEGRAM_SENDER_worker)"}},
		{"", sub("one.telegram", "_DELIVER.one_telegram"), explain.Advice{Text: "module telegram follows nothing, so it has no events consumer EVENTS/one_telegram: its host should not bind one (it takes seat telegram-sender's work from SEAT_TELEGRAM_SENDER/SEAT_TELEGRAM_SENDER_worker)"}},
	} {
		t.Run(c.r.User+" "+c.r.Op+" "+c.r.Subject, func(t *testing.T) {
			t.Parallel()
			files, m := description(t, "seed", c.consumers)
			got := explain.Refusal(m, c.r)
			if got != c.want {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
			if got.Grantable {
				if err := explaintest.Check(files, c.r, got.Text); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// A module that declares nothing but its nodes was clearly meant to do something: binding an
// events consumer, it is told to declare what it follows, with an event the mesh emits.
func TestAnIdleModuleIsToldToFollow(t *testing.T) {
	t.Parallel()
	files, _ := description(t, "quickstart", "")
	files = append(files, model.File{Name: "idle.yaml", Data: []byte("modules:\n  - name: idle\n    on: [alpha]\n")})
	m, err := model.Parse(files)
	if err != nil {
		t.Fatal(err)
	}
	r := pub("alpha.idle", "$JS.API.CONSUMER.INFO.EVENTS.alpha_idle")
	got := explain.Refusal(m, r)
	if want := "module idle follows nothing, so it has no events consumer EVENTS/alpha_idle: declare what it follows, e.g. follows: [shop/order.placed]"; got.Text != want || !got.Grantable {
		t.Fatalf("got %+v, want %q", got, want)
	}
	if err := explaintest.Check(files, r, got.Text); err != nil {
		t.Error(err)
	}
}

// Every piece of advice explain gives, for any principal of the example meshes refused any of
// the subjects they derive or nearly do, validates when written into the YAML and grants what
// was refused.
func TestEveryAdviceValidatesAndGrants(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ example, consumers string }{
		{"seed", ""}, {"seed", model.ConsumersPull}, {"quickstart", ""}, {"quickstart", model.ConsumersPush},
	} {
		t.Run(c.example+" "+c.consumers, func(t *testing.T) {
			t.Parallel()
			files, m := description(t, c.example, c.consumers)
			d := render.Derive(m)
			var refused, advised int
			for _, r := range refusals(m, d) {
				if explain.Granted(d, r) {
					continue // not a refusal
				}
				refused++
				a := explain.Refusal(m, r)
				if !a.Grantable {
					continue
				}
				advised++
				if err := explaintest.Check(files, r, a.Text); err != nil {
					t.Errorf("%s %s %s: %v", r.User, r.Op, r.Subject, err)
				}
			}
			t.Logf("%d refusals, %d with advice, each checked", refused, advised)
			if advised < 40 {
				t.Errorf("only %d pieces of advice checked: the table no longer covers the mesh", advised)
			}
		})
	}
}

// refusals are what any principal of m (and one it does not know) might be refused: every
// subject the mesh derives or nearly does, published and subscribed.
func refusals(m *model.Mesh, d *render.Desired) []busclient.PermissionError {
	var subjects []string
	add := func(s ...string) { subjects = append(subjects, s...) }
	for _, mod := range m.Modules {
		for _, e := range append(append([]string{}, mod.Emits...), "never.emitted") {
			add(render.ModuleEvent(mod.Name, e))
		}
		for _, tool := range append(append([]string{}, mod.Serves...), "status", "restart") {
			add(render.ModuleTool(mod.Name, tool))
		}
		add("mesh.mod."+mod.Name+".accept.x", "mesh.mod."+mod.Name+".other.x")
	}
	for _, s := range m.Seats {
		for _, a := range append(append([]string{}, s.Accepts...), "unaccepted") {
			add(render.AcceptSubject(s.Name, a))
		}
		for _, e := range append(append([]string{}, s.Emits...), "lost") {
			add(render.SeatEvent(s.Name, e))
		}
		for _, tool := range append(append([]string{}, s.Serves...), "status") {
			add(render.SeatTool(s.Name, tool))
		}
		worker := render.WorkerConsumer(s.Name)
		add(consumerSubjects(render.SeatStreamName(s.Name), worker)...)
	}
	for _, inst := range m.Instances() {
		add(consumerSubjects(render.StreamEvents, render.InstanceConsumer(inst))...)
	}
	for _, c := range d.Consumers {
		add(consumerSubjects(c.Stream, c.Name())...)
	}
	add("mesh.mod.ghost.event.x", "mesh.seat.ghost.accept.x", "mesh.mod.>", "$JS.API.STREAM.INFO.EVENTS", "x.y",
		"_INBOX.Xy7Rb2kQ9mN4pL1sT6vW8z.*", "_DELIVER.ghost")
	users := append(d.Users(), "nobody")
	for _, u := range users {
		add(render.Inbox(u)+".x", render.ReportSubject(strings.TrimPrefix(u, "node.")))
	}
	var out []busclient.PermissionError
	for _, u := range users {
		for _, s := range subjects {
			out = append(out, pub(u, s), sub(u, s))
			if strings.HasPrefix(s, "_DELIVER.") {
				q := sub(u, s)
				q.Queue = strings.TrimPrefix(s, "_DELIVER.")
				out = append(out, q)
			}
		}
	}
	return out
}

func consumerSubjects(stream, consumer string) []string {
	return []string{
		"$JS.API.CONSUMER.INFO." + stream + "." + consumer,
		render.PullSubject(stream, consumer),
		fmt.Sprintf("$JS.ACK.%s.%s.1.7.7.1765000000000000000.0", stream, consumer),
		render.DeliverSubject(consumer),
	}
}

// Every subject of one rule is explained alike, so watch may log and record a group of them
// under one piece of advice.
func TestRulesGroupWhatChangesPerConnection(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		r    busclient.PermissionError
		rule string
	}{
		{sub("two.audit", "_INBOX.Xy7Rb2kQ9mN4pL1sT6vW8z.*"), "_INBOX.>"},
		{sub("two.audit", "_INBOX.Ab3Cd4Ef5Gh6Ij7Kl8Mn9o"), "_INBOX.>"},
		{sub("two.audit", "_INBOX.two.shop.>"), "_INBOX.>"},
		{sub("two.audit", "_INBOX.two.audit.q7.*"), "_INBOX.two.audit.>"},
		{pub("two.audit", "$JS.ACK.EVENTS.two_shop.1.2.3.4.5"), "$JS.ACK.EVENTS.two_shop.>"},
		{pub("two.audit", "mesh.mod.shop.event.order.placed"), "mesh.mod.shop.event.order.placed"},
	} {
		if got := explain.Rule(c.r); got != c.rule {
			t.Errorf("Rule(%s %s) = %q, want %q", c.r.Op, c.r.Subject, got, c.rule)
		}
	}
	_, m := description(t, "seed", "")
	for _, group := range [][]busclient.PermissionError{
		{sub("two.audit", "_INBOX.Xy7Rb2kQ9mN4pL1sT6vW8z.*"), sub("two.audit", "_INBOX.Ab3Cd4Ef5Gh6Ij7Kl8Mn9o.*"), sub("two.audit", "_INBOX.two.shop.>")},
		{pub("two.audit", "$JS.ACK.EVENTS.two_shop.1.2.3.4.5"), pub("two.audit", "$JS.ACK.EVENTS.two_shop.2.9.9.4.0")},
	} {
		want := explain.Refusal(m, group[0])
		for _, r := range group[1:] {
			if explain.GroupOf(r) != explain.GroupOf(group[0]) {
				t.Errorf("%s and %s are in different groups", r.Subject, group[0].Subject)
			}
			if got := explain.Refusal(m, r); got != want {
				t.Errorf("%s is explained %q, %s %q", r.Subject, got.Text, group[0].Subject, want.Text)
			}
		}
	}
}

// An observer is told it only looks, whatever it was refused beyond that: no declaration
// grants an observer more. A refused inbox is the inbox prefix, as for any principal.
func TestAnObserverIsToldItOnlyLooks(t *testing.T) {
	t.Parallel()
	files, _ := description(t, "seed", "")
	files = append(files, model.File{Name: "observers.yaml", Data: []byte("observers:\n  - name: alice\n")})
	m, err := model.Parse(files)
	if err != nil {
		t.Fatal(err)
	}
	const (
		publishing  = "observer alice only looks: of the JetStream API it asks only what reads the mesh's streams and consumers (their info, names and lists), and it publishes nothing else: no declaration grants it"
		subscribing = "observer alice only looks: it hears its own inbox and the nodes' heartbeats (mesh.control.*.heartbeat), nothing else: no declaration grants it"
	)
	for _, c := range []struct {
		r    busclient.PermissionError
		want string
	}{
		{pub("observer.alice", "mesh.mod.shop.event.order.placed"), publishing},
		{pub("observer.alice", "mesh.control.one.heartbeat"), publishing},
		{pub("observer.alice", "$JS.API.CONSUMER.CREATE.EVENTS.peek"), publishing},
		{pub("observer.alice", "$JS.API.CONSUMER.MSG.NEXT.EVENTS.two_audit"), publishing},
		{pub("observer.alice", "$JS.ACK.EVENTS.two_audit.1.1.1.1.0"), publishing},
		{sub("observer.alice", "mesh.mod.shop.event.order.placed"), subscribing},
		{sub("observer.alice", "_DELIVER.two_audit"), subscribing},
		{sub("observer.alice", "_INBOX.two.shop.>"), "inbox prefix not set: observer alice subscribes to inboxes outside its own, _INBOX.observer.alice.>; set the client's inbox prefix to _INBOX.observer.alice (the nats CLI's --inbox-prefix, nats.CustomInboxPrefix): no declaration grants it"},
		{pub("observer.bob", "$JS.API.INFO"), `user "observer.bob" is no principal of this description: no declaration grants it`},
	} {
		if got := explain.Refusal(m, c.r); got.Text != c.want || got.Grantable {
			t.Errorf("%s %s %s:\ngot  %+v\nwant %q", c.r.User, c.r.Op, c.r.Subject, got, c.want)
		}
	}
}
