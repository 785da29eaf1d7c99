package plan

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ with what the code produces")

// TestDiffGolden plans each case under testdata/diff/ as `meshctl diff --from old -f new`
// does (both rendered without hashes, the older one taken as the bus) and compares the
// text, JSON and Markdown with want.txt, want.json and want.md: those outputs are what a
// reviewer and a CI script read, so a change to them is reviewed in the diff of the files.
func TestDiffGolden(t *testing.T) {
	t.Parallel()
	dirs, err := filepath.Glob("testdata/diff/*")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no cases under testdata/diff: %v", err)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			t.Parallel()
			p := Between(description(t, filepath.Join(dir, "old")), description(t, filepath.Join(dir, "new")))
			if p.Baseline != BaselineDescription {
				t.Errorf("baseline %q, want %q", p.Baseline, BaselineDescription)
			}
			for _, c := range p.Changes {
				if c.AtStake != nil || c.Refused != "" {
					t.Errorf("%s: nothing was counted, yet at stake %+v, refused %q", c.ID(), c.AtStake, c.Refused)
				}
				if losesWhatItHolds(c) && c.Risk != RiskDisruptive {
					t.Errorf("%s: risk %q, want %q", c.ID(), c.Risk, RiskDisruptive)
				}
			}
			checkGolden(t, dir, p)
		})
	}
}

// TestDiffGoldenCases pins what each case is about, so a golden file rewritten with
// -update cannot quietly lose the point of its case.
func TestDiffGoldenCases(t *testing.T) {
	t.Parallel()
	plans := map[string]*Plan{}
	for _, c := range []string{"module-added", "module-follows-event", "seat-handover", "node-removed", "seat-renamed", "in-sync", "fleet-grown"} {
		dir := filepath.Join("testdata/diff", c)
		plans[c] = Between(description(t, filepath.Join(dir, "old")), description(t, filepath.Join(dir, "new")))
	}
	ids := func(p *Plan) []string {
		var out []string
		for _, c := range p.Changes {
			out = append(out, string(c.Action)+" "+c.ID())
		}
		return out
	}
	users := func(p *Plan) map[string]UserChange {
		out := map[string]UserChange{}
		for _, c := range p.Changes {
			for _, u := range c.Users {
				out[u.User] = u
			}
		}
		return out
	}
	for name, want := range map[string][]string{
		"module-added":         {"create consumer EVENTS/alpha_ledger", "create consumer EVENTS/beta_ledger", "update accounts config"},
		"module-follows-event": {"update consumer EVENTS/beta_postman", "update accounts config"},
		"seat-handover":        {"update accounts config"},
		"node-removed":         {"update accounts config", "delete consumer EVENTS/gamma_postman", "delete consumer NODES/gamma"},
		"seat-renamed":         {"create stream SEAT_POSTBOX", "update consumer EVENTS/controller", "create consumer SEAT_POSTBOX/SEAT_POSTBOX_worker", "update accounts config", "delete stream SEAT_MAILER"},
		"in-sync":              nil,
	} {
		if diff := cmp.Diff(want, ids(plans[name])); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	if u := users(plans["module-follows-event"])["beta.postman"]; !cmp.Equal(u.SubscribeAdded, []string{"mesh.mod.shop.event.order.cancelled"}) || len(u.SubscribeRemoved) > 0 {
		t.Errorf("following one more event: %+v", u)
	}
	if h := plans["seat-handover"].Holders; len(h) != 1 || h[0].Seat != "mailer" || h[0].From.String() != "beta/postman" || h[0].To.String() != "alpha/courier" {
		t.Errorf("handover: %+v", h)
	}
	if h := plans["seat-renamed"].Holders; len(h) > 0 {
		t.Errorf("a renamed seat keeps its holder, yet the plan moves it: %+v", h)
	}
	for _, c := range plans["seat-renamed"].Changes {
		if c.ID() == "stream SEAT_MAILER" && c.Reason != "seat postbox was renamed: its work queue is now SEAT_POSTBOX" {
			t.Errorf("the old work queue's deletion does not say it was a rename: %q", c.Reason)
		}
	}
	for _, u := range []string{"node.gamma", "enrol.gamma", "gamma.postman"} {
		if users(plans["node-removed"])[u].Action != Delete {
			t.Errorf("node removed: user %s is not deleted", u)
		}
	}
	if n := len(plans["fleet-grown"].Changes); n <= foldAfter {
		t.Errorf("fleet-grown should be long enough to fold, has %d changes", n)
	}
}

// TestSeedModuleAddedGolden is the pull request a reviewer should not have to read subject
// by subject: examples/seed and a new module that hears the shop's orders and the
// telegram seat's deliveries, sends to that seat and calls telegram's status. Its Markdown
// draws the four new edges, with the shop, the seat and telegram at their ends and nothing
// else of the mesh. `meshctl diff --from` prints the same file (cmd/meshctl's test).
func TestSeedModuleAddedGolden(t *testing.T) {
	t.Parallel()
	const dir = "testdata/constructed/seed-module-added"
	seed := description(t, "../examples/seed")
	added := seedWith(t, filepath.Join(dir, "ledger.yaml"))
	p := Compute(TargetOf(render.Derive(added), nil), LiveOf(TargetOf(render.Derive(seed), nil)), Options{})
	p.Draw(seed, added)
	var edges []string
	for _, e := range p.Picture.Edges {
		edges = append(edges, fmt.Sprintf("%s %s %s→%s %s", e.Mark, e.Kind, e.From.Name, e.To.Name, e.Label))
	}
	want := []string{
		"added call ledger→telegram status",
		"added send ledger→telegram-sender send",
		"added event shop→ledger order.placed",
		"added event telegram-sender→ledger delivered",
	}
	if diff := cmp.Diff(want, edges); diff != "" {
		t.Errorf("the picture's edges (-want +got):\n%s", diff)
	}
	if len(p.Picture.Vertices) != 4 {
		t.Errorf("the picture draws %v; want ledger and the three at its edges' ends", p.Picture.Vertices)
	}
	checkGolden(t, dir, p)
}

// description loads the description in dir.
func description(tb testing.TB, dir string) *model.Mesh {
	tb.Helper()
	m, err := model.Load(dir)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// seedWith is examples/seed with the description file extra beside its own files.
func seedWith(tb testing.TB, extra string) *model.Mesh {
	tb.Helper()
	var files []model.File
	for _, path := range append(seedFiles(tb), extra) {
		data, err := os.ReadFile(path)
		if err != nil {
			tb.Fatal(err)
		}
		files = append(files, model.File{Name: filepath.Base(path), Data: data})
	}
	m, err := model.Parse(files)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

func seedFiles(tb testing.TB) []string {
	tb.Helper()
	paths, err := filepath.Glob("../examples/seed/*.yaml")
	if err != nil || len(paths) == 0 {
		tb.Fatalf("no description in examples/seed: %v", err)
	}
	return paths
}

// TestReplacedConsumerGolden is a consumer whose deliver policy differs from the
// derivation's: the server will not change it in place, so it is replaced. The derivation
// always sets the policy, so the case is built in Go rather than in YAML.
func TestReplacedConsumerGolden(t *testing.T) {
	t.Parallel()
	tg := target(t, "testdata/diff/in-sync/old", nil)
	live := LiveOf(tg)
	consumerOf(t, &live, "EVENTS", "beta_postman").Config.DeliverPolicy = jetstream.DeliverNewPolicy
	p := Compute(tg, live, Options{})
	if len(p.Changes) != 1 {
		t.Fatalf("want one change, got %d", len(p.Changes))
	}
	c := p.Changes[0]
	if c.Action != Replace || c.Risk != RiskDisruptive || c.AtStake != nil || c.Refused != "" ||
		len(c.Fields) != 1 || !c.Fields[0].Immutable {
		t.Fatalf("an immutable field changed, without a bus: %+v", c)
	}
	checkGolden(t, "testdata/constructed/consumer-replaced", p)
}

// TestDataLossOnABusGolden is the seat rename and a consumer replacement planned against a
// bus that holds work: the replacement is refused and the plan blocked, every output putting
// the data loss first, while the renamed seat's old queue is not at stake, since its work moves
// to the new one. The hashes in the store change too, and no output may show one.
func TestDataLossOnABusGolden(t *testing.T) {
	t.Parallel()
	before := map[string]string{"beta.postman": bcryptLike("a"), "controller": bcryptLike("c")}
	after := map[string]string{"beta.postman": bcryptLike("b"), "controller": bcryptLike("c"), "alpha.shop": bcryptLike("d")}
	old := target(t, "testdata/diff/seat-renamed/old", before)
	tg := target(t, "testdata/diff/seat-renamed/new", after)
	live := serverView(LiveOf(old))
	live.Baseline = "" // as the reconcile package reads a bus
	for i := range live.Streams {
		if live.Streams[i].Config.Name == "SEAT_MAILER" {
			live.Streams[i].Messages = 3
		}
	}
	c := consumerOf(t, &live, "EVENTS", "beta_postman")
	c.Config.DeliverPolicy = jetstream.DeliverLastPolicy
	c.Pending, c.AckPending = 1, 2
	p := Compute(tg, live, Options{})
	if p.Baseline != BaselineBus || !p.Blocked() || p.Summary().Refused != 1 {
		t.Fatalf("baseline %q, blocked %v, summary %+v", p.Baseline, p.Blocked(), p.Summary())
	}
	for _, c := range p.Changes {
		if c.ID() == "stream SEAT_MAILER" && (c.Refused != "" || c.Risk != RiskDisruptive || c.Move == nil || c.Move.Stream != "SEAT_POSTBOX" ||
			!strings.Contains(c.Reason, "its 3 queued messages move there")) {
			t.Errorf("the renamed seat's old queue is not planned as a move of its 3 messages: %+v", c)
		}
	}
	var md bytes.Buffer
	if err := p.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	loss, disruption := strings.Index(md.String(), "**data-loss**"), strings.Index(md.String(), "**disruptive**")
	if loss < 0 || disruption < 0 || loss > disruption {
		t.Errorf("data loss is not listed before disruption:\n%s", md.String())
	}
	for _, h := range []string{before["beta.postman"], after["beta.postman"], after["alpha.shop"]} {
		for _, out := range renderings(t, p) {
			if strings.Contains(out, h) {
				t.Fatalf("an output shows a hash:\n%s", out)
			}
		}
	}
	checkGolden(t, "testdata/constructed/bus-data-loss", p)
}

func consumerOf(tb testing.TB, l *Live, stream, name string) *LiveConsumer {
	tb.Helper()
	for i := range l.Consumers {
		if c := &l.Consumers[i]; c.Stream == stream && c.Config.Durable == name {
			return c
		}
	}
	tb.Fatalf("no consumer %s/%s", stream, name)
	return nil
}

// bcryptLike is a string shaped like a bcrypt hash, distinct per seed.
func bcryptLike(seed string) string { return "$2a$11$" + strings.Repeat(seed, 53) }

// renderings are the plan's three outputs, by golden file name.
func renderings(tb testing.TB, p *Plan) map[string]string {
	tb.Helper()
	var text, js, md bytes.Buffer
	if err := p.Text(&text, false); err != nil {
		tb.Fatal(err)
	}
	if err := p.JSON(&js); err != nil {
		tb.Fatal(err)
	}
	if err := p.Markdown(&md); err != nil {
		tb.Fatal(err)
	}
	return map[string]string{"want.txt": text.String(), "want.json": js.String(), "want.md": md.String()}
}

// secret matches anything shaped like a bcrypt hash, LockedHash included, and the word a
// leaked credential would most likely come with.
var secret = regexp.MustCompile(`(?i)\$2[abxy]?\$[0-9]{2}\$|password`)

// checkGolden compares the plan's outputs with dir's golden files, or rewrites them with
// -update, after checking what must hold of every output whatever the files say.
func checkGolden(t *testing.T, dir string, p *Plan) {
	t.Helper()
	for name, got := range renderings(t, p) {
		if loc := secret.FindStringIndex(got); loc != nil {
			t.Errorf("%s shows %q, which no plan output may", name, got[loc[0]:loc[1]])
		}
		if name == "want.md" {
			if problems := checkMarkdown(got); len(problems) > 0 {
				t.Errorf("%s does not render cleanly:\n%s\n%s", name, strings.Join(problems, "\n"), got)
			}
		}
		path := filepath.Join(dir, name)
		if *update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run `go test ./plan -update` to create it)", err)
		}
		if diff := cmp.Diff(string(want), got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", path, diff)
		}
	}
}
