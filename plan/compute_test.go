package plan

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

func target(tb testing.TB, dir string, hashes map[string]string) Target {
	tb.Helper()
	m, err := model.Load(dir)
	if err != nil {
		tb.Fatal(err)
	}
	return TargetOf(render.Derive(m), hashes)
}

// serverView fills in what a server reports beyond what meshctl sent: its defaults and its
// own metadata.
func serverView(l Live) Live {
	for i := range l.Streams {
		c := NormalizeStream(l.Streams[i].Config)
		c.Metadata = withNats(c.Metadata)
		l.Streams[i].Config = c
	}
	for i := range l.Consumers {
		c := l.Consumers[i].Config
		c.AckWait, c.MaxAckPending = 30*time.Second, 1000
		c.Metadata = withNats(c.Metadata)
		l.Consumers[i].Config = c
	}
	return l
}

func withNats(m map[string]string) map[string]string {
	out := map[string]string{"_nats.req.level": "0", "_nats.ver": "2.15.2", "_nats.level": "2"}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func TestAConvergedBusPlansNothing(t *testing.T) {
	t.Parallel()
	tg := target(t, "../examples/seed", nil)
	p := Compute(tg, serverView(LiveOf(tg)), Options{})
	if !p.Empty() {
		var b strings.Builder
		_ = p.Text(&b, false)
		t.Fatalf("a converged bus plans changes:\n%s", b.String())
	}
}

func TestAnEmptyBusPlansEverythingInOrder(t *testing.T) {
	t.Parallel()
	tg := target(t, "../examples/seed", nil)
	p := Compute(tg, Live{}, Options{})
	s := p.Summary()
	if s.Create != len(tg.Bus.Streams)+len(tg.Bus.Consumers)+1 || s.Update+s.Replace+s.Delete != 0 {
		t.Fatalf("summary %+v", s)
	}
	// Streams, then consumers, then the accounts config.
	var order []Kind
	for _, c := range p.Changes {
		if len(order) == 0 || order[len(order)-1] != c.Kind {
			order = append(order, c.Kind)
		}
	}
	if diff := cmp.Diff([]Kind{KindStream, KindConsumer, KindAccounts}, order); diff != "" {
		t.Fatalf("order (-want +got):\n%s", diff)
	}
}

func TestAMutableFieldIsUpdatedAndAnImmutableOneReplaced(t *testing.T) {
	t.Parallel()
	tg := target(t, "../examples/seed", nil)
	live := serverView(LiveOf(tg))
	for i := range live.Streams {
		switch live.Streams[i].Config.Name {
		case "EVENTS":
			live.Streams[i].Config.MaxAge = time.Hour
		case "SEAT_TELEGRAM_SENDER":
			live.Streams[i].Config.Storage = jetstream.MemoryStorage
			live.Streams[i].Messages = 7
		}
	}
	for i := range live.Consumers {
		if live.Consumers[i].Config.Durable == "two_audit" {
			live.Consumers[i].Config.DeliverPolicy = jetstream.DeliverNewPolicy
			live.Consumers[i].AckPending = 2
		}
	}
	p := Compute(tg, live, Options{})
	got := map[string]Change{}
	for _, c := range p.Changes {
		got[c.ID()] = c
	}
	if c := got["stream EVENTS"]; c.Action != Update || len(c.Fields) != 1 || c.Fields[0].Field != "max_age" {
		t.Errorf("EVENTS: %+v", c)
	}
	c := got["stream SEAT_TELEGRAM_SENDER"]
	if c.Action != Replace || c.Risk != RiskDataLoss || !strings.Contains(c.Refused, "7 stored messages") {
		t.Errorf("a storage change holding 7 messages: %+v", c)
	}
	if w := got["consumer SEAT_TELEGRAM_SENDER/SEAT_TELEGRAM_SENDER_worker"]; w.Action != Create || w.Reason != "its stream is replaced" {
		t.Errorf("the worker of a replaced stream is not recreated: %+v", w)
	}
	if a := got["consumer EVENTS/two_audit"]; a.Action != Replace || !strings.Contains(a.Refused, "2 unacknowledged deliveries") {
		t.Errorf("an immutable consumer change with work pending: %+v", a)
	}
	if !p.Blocked() {
		t.Error("a plan with refused changes is not blocked")
	}
	if p := Compute(tg, live, Options{AllowDataLoss: true}); p.Blocked() {
		t.Error("--allow-data-loss still blocks")
	}
}

func TestForeignObjectsAreConflictsAndNeverDeleted(t *testing.T) {
	t.Parallel()
	tg := target(t, "../examples/seed", nil)
	live := serverView(LiveOf(tg))
	for i := range live.Streams {
		if live.Streams[i].Config.Name == "NODES" {
			delete(live.Streams[i].Config.Metadata, render.OwnerKey)
		}
	}
	live.Streams = append(live.Streams,
		LiveStream{Config: jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}, Messages: 10},
		LiveStream{Config: jetstream.StreamConfig{Name: "SEAT_OLD", Metadata: map[string]string{render.OwnerKey: render.OwnerValue}}})
	p := Compute(tg, live, Options{})
	var ids []string
	for _, c := range p.Changes {
		ids = append(ids, string(c.Action)+" "+c.ID())
	}
	want := []string{"conflict stream NODES", "delete stream SEAT_OLD"}
	if diff := cmp.Diff(want, ids); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

func TestAccountsAreDiffedUserByUserWithoutSecrets(t *testing.T) {
	t.Parallel()
	hash := "$2a$11$" + strings.Repeat("h", 53)
	old := target(t, "../examples/seed", nil)
	tg := target(t, "../examples/quickstart", map[string]string{"node.alpha": hash})
	p := Compute(tg, serverView(LiveOf(old)), Options{AllowDataLoss: true})
	var acc *Change
	for i := range p.Changes {
		if p.Changes[i].Kind == KindAccounts {
			acc = &p.Changes[i]
		}
	}
	if acc == nil {
		t.Fatal("no accounts change")
	}
	users := map[string]UserChange{}
	for _, u := range acc.Users {
		users[u.User] = u
	}
	if u := users["node.alpha"]; u.Action != Create || u.Credential != "issued" {
		t.Errorf("node.alpha: %+v", u)
	}
	if u := users["two.shop"]; u.Action != Delete || len(u.PublishRemoved) == 0 {
		t.Errorf("two.shop: %+v", u)
	}
	if u := users["controller"]; u.Action != Update || len(u.SubscribeRemoved) == 0 {
		t.Errorf("controller: %+v", u)
	}
	var text, js strings.Builder
	_ = p.Text(&text, false)
	_ = p.JSON(&js)
	for _, out := range []string{text.String(), js.String()} {
		if strings.Contains(out, hash) || strings.Contains(out, "$2a$") {
			t.Fatalf("a plan shows a hash:\n%s", out)
		}
	}
}

// meshctl's system user sits in its own account ahead of the mesh's users: a change to one
// mesh user is that one change, read block by block, with the system user neither created nor
// deleted; turning reload by request off takes the system user out. (The same read through the
// server's parser: reconcile's TestTheServerReadsTheSystemUserBesideTheMesh.)
func TestTheSystemUserIsDiffedBesideTheMesh(t *testing.T) {
	t.Parallel()
	m, err := model.Load("../examples/quickstart")
	if err != nil {
		t.Fatal(err)
	}
	m.Bus.URL, m.Bus.AccountsFile = "nats://10.0.0.1:4222", "/etc/nats/mesh.conf"
	m.Bus.Servers = []model.Server{{URL: m.Bus.URL, AccountsFile: m.Bus.AccountsFile, Reload: model.Reload{System: true}}}
	hashes := map[string]string{render.SystemUser: "$2a$11$" + strings.Repeat("s", 53)}
	before := TargetOf(render.Derive(m), hashes)
	if !strings.Contains(string(before.Accounts), `"$SYS" { users: [`) {
		t.Fatalf("the rendering has no system account:\n%s", before.Accounts)
	}
	inUse := LiveOf(before) // before renders with hashes as they are now
	hashes["node.alpha"] = "$2a$11$" + strings.Repeat("h", 53)
	after := TargetOf(render.Derive(m), hashes)
	c, changed := diffAccounts(after, inUse)
	if !changed || len(c.Users) != 1 || c.Users[0].User != "node.alpha" || c.Users[0].Credential != "issued" {
		t.Fatalf("one credential issued beside the system user: %+v", c)
	}

	m.Bus.Servers[0].Reload = model.Reload{PIDFile: "/run/nats.pid"}
	off := TargetOf(render.Derive(m), hashes)
	c, changed = diffAccounts(off, LiveOf(after))
	if !changed || len(c.Users) != 1 || c.Users[0].User != render.SystemUser || c.Users[0].Action != Delete {
		t.Fatalf("reload by request turned off does not delete the system user: %+v", c)
	}
}

// Two meshes on one bus: a store's plan never changes or deletes an object that another mesh's
// store marked as its own (render.MeshKey), and says whose it is; an object meshctl marked
// before it named meshes is claimed, once, by an update of its metadata alone.
func TestAnotherMeshsObjectsAreLeftAloneAndUnnamedOnesClaimed(t *testing.T) {
	t.Parallel()
	first := target(t, "../examples/seed", nil).ForMesh("mesh-a")
	live := serverView(LiveOf(first))
	second := target(t, "../examples/quickstart", nil).ForMesh("mesh-b")
	p := Compute(second, live, Options{})
	conflicts := 0
	for _, c := range p.Changes {
		switch c.Action {
		case Delete, Update, Replace:
			if c.Kind != KindAccounts {
				t.Errorf("the second mesh plans to %s %s, the first mesh's", c.Action, c.ID())
			}
		case Conflict:
			conflicts++
			if !strings.Contains(c.Reason, "belongs to another mesh") || !strings.Contains(c.Reason, "mesh-a") {
				t.Errorf("the conflict on %s does not say whose it is: %s", c.ID(), c.Reason)
			}
		}
	}
	if conflicts == 0 {
		t.Error("the streams both meshes derive are not conflicts")
	}

	unnamed := serverView(LiveOf(target(t, "../examples/seed", nil)))
	p = Compute(first, unnamed, Options{})
	if len(p.Changes) == 0 {
		t.Fatal("objects marked before meshes were named are not claimed")
	}
	for _, c := range p.Changes {
		if c.Action != Update || len(c.Fields) != 1 || c.Fields[0].Field != "metadata" {
			t.Fatalf("claiming %s plans %s of %v, want an update of its metadata alone", c.ID(), c.Action, c.Fields)
		}
	}
	if p := Compute(first, serverView(LiveOf(first)), Options{}); !p.Empty() {
		t.Fatalf("a claimed bus is not converged: %d changes", len(p.Changes))
	}
}
