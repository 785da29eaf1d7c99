package plan

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// settingsCase is testdata/settings/base.yaml with one setting changed: edit is inserted after
// the line at, and want pins the point of the case (each change's action, object and the
// fields it touches), so a golden file rewritten with -update cannot quietly lose it.
type settingsCase struct {
	name, at, edit string
	want           []string
}

const (
	atBus    = "bus:\n"
	atSeat   = "    accepts: [send]\n"
	atModule = "    follows: [shop/order.placed]\n"
)

var settingsCases = []settingsCase{
	// Each stream setting alone: every one updates in place but storage, which replaces the
	// stream, and its consumers with it.
	{"stream-max-bytes", atBus, "  jetstream:\n    streams:\n      events: {max_bytes: 4GiB}\n",
		[]string{"update stream EVENTS [max_bytes: 1GiB → 4GiB]"}},
	{"stream-max-age", atBus, "  jetstream:\n    streams:\n      events: {max_age: 24h}\n",
		[]string{"update stream EVENTS [max_age: 168h0m0s → 24h0m0s]"}},
	{"stream-max-msgs", atBus, "  jetstream:\n    streams:\n      events: {max_msgs: 1000000}\n",
		[]string{"update stream EVENTS [max_msgs: unlimited → 1000000]"}},
	{"stream-max-msg-size", atBus, "  jetstream:\n    streams:\n      events: {max_msg_size: 256KiB}\n",
		[]string{"update stream EVENTS [max_msg_size: unlimited → 256KiB]"}},
	{"stream-storage", atBus, "  jetstream:\n    streams:\n      events: {storage: memory}\n",
		[]string{"replace stream EVENTS [storage!: file → memory]", "create consumer EVENTS/alpha_postman []"}},
	{"stream-replicas", atBus, "  jetstream:\n    streams:\n      events: {replicas: 3}\n",
		[]string{"update stream EVENTS [replicas: 1 → 3]"}},
	{"stream-discard", atBus, "  jetstream:\n    streams:\n      events: {discard: new}\n",
		[]string{"update stream EVENTS [discard: old → new]"}},
	{"seat-stream-max-bytes", atSeat, "    stream: {max_bytes: 2GiB}\n",
		[]string{"update stream SEAT_MAILER [max_bytes: 64MiB → 2GiB]"}},
	// Each consumer setting alone, by the module, the seat or the mesh: every one in place,
	// and the control plane's own consumers never.
	{"module-consumer-ack-wait", atModule, "    consumer: {ack_wait: 2m}\n",
		[]string{"update consumer EVENTS/alpha_postman [ack_wait: 30s → 2m0s]"}},
	{"seat-consumer-max-ack-pending", atSeat, "    consumer: {max_ack_pending: 10}\n",
		[]string{"update consumer SEAT_MAILER/SEAT_MAILER_worker [max_ack_pending: 1000 → 10]"}},
	{"mesh-consumers-max-deliver", atBus, "  jetstream:\n    consumers: {max_deliver: 5}\n",
		[]string{"update consumer EVENTS/alpha_postman [max_deliver: unlimited → 5]",
			"update consumer SEAT_MAILER/SEAT_MAILER_worker [max_deliver: unlimited → 5]"}},
	{"module-consumer-backoff", atModule, "    consumer: {backoff: [30s, 2m, 10m]}\n",
		[]string{"update consumer EVENTS/alpha_postman [backoff: [] → [30s, 2m0s, 10m0s]]"}},
}

// settingsMesh is the base description with c's edit.
func settingsMesh(tb testing.TB, c settingsCase) *model.Mesh {
	tb.Helper()
	base, err := os.ReadFile("testdata/settings/base.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	if c.edit == "" {
		return parseMesh(tb, base)
	}
	if !strings.Contains(string(base), c.at) {
		tb.Fatalf("%s: the base has no %q to insert after", c.name, c.at)
	}
	return parseMesh(tb, []byte(strings.Replace(string(base), c.at, c.at+c.edit, 1)))
}

func parseMesh(tb testing.TB, data []byte) *model.Mesh {
	tb.Helper()
	m, err := model.Parse([]model.File{{Name: "mesh.yaml", Data: data}})
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// changeLines is each change of p as its action, object and fields, a field the server will
// not update marked "!".
func changeLines(p *Plan) []string {
	var out []string
	for _, c := range p.Changes {
		if c.Kind == KindAccounts {
			continue
		}
		var fields []string
		for _, f := range c.Fields {
			name := f.Field
			if f.Immutable {
				name += "!"
			}
			fields = append(fields, name+": "+f.Before+" → "+f.After)
		}
		out = append(out, string(c.Action)+" "+c.ID()+" ["+strings.Join(fields, ", ")+"]")
	}
	return out
}

// TestSettingsGolden plans each setting changed alone, as `meshctl diff --from` does, and
// compares the text, JSON and Markdown with testdata/settings/<case>/: the field's before and
// after, in place or replaced, is what a reviewer of the change reads.
func TestSettingsGolden(t *testing.T) {
	t.Parallel()
	old := TargetOf(render.Derive(settingsMesh(t, settingsCase{name: "base"})), nil)
	for _, c := range settingsCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := Compute(TargetOf(render.Derive(settingsMesh(t, c)), nil), LiveOf(old), Options{})
			if diff := cmp.Diff(c.want, changeLines(p)); diff != "" {
				t.Errorf("the plan (-want +got):\n%s", diff)
			}
			checkGolden(t, filepath.Join("testdata/settings", c.name), p)
		})
	}
}

// olderBus is the bus an older meshctl made of the base description: every stream without a
// byte limit, the seat's queue dropping its oldest at a limit, as the server reports it, with
// EVENTS and the seat's queue holding messages.
func olderBus(tb testing.TB, target Target) Live {
	tb.Helper()
	live := serverView(LiveOf(target))
	live.Baseline = "" // read from a bus
	for i := range live.Streams {
		s := &live.Streams[i]
		s.Config.MaxBytes = -1
		s.Config.Discard = 0 // old
		switch s.Config.Name {
		case "EVENTS":
			s.Messages, s.Bytes = 5000, 5000*512<<10 // 2.4 GiB of 512 KiB events
		case "SEAT_MAILER":
			s.Messages, s.Bytes = 40, 80<<20 // 80 MiB of queued work
		}
	}
	return live
}

// TestUpgradeToBoundedDefaultsGolden is a bus an older meshctl made, planned with the bounded
// defaults: every stream gets a byte limit through an update the plan shows. EVENTS holds more
// than its new limit, so the update discards its oldest messages, counted on the bus, and is
// refused without --allow-data-loss; the seat's queue, which now refuses new work when full
// rather than dropping queued work, keeps all it holds but takes nothing new until its holder
// drains it.
func TestUpgradeToBoundedDefaultsGolden(t *testing.T) {
	t.Parallel()
	target := TargetOf(render.Derive(settingsMesh(t, settingsCase{name: "base"})), nil)
	for _, allow := range []bool{false, true} {
		live := olderBus(t, target)
		var asked []string
		live.CountDiscards = func(stream string, l Limits) (uint64, bool, error) {
			asked = append(asked, stream)
			if l.MaxBytes != model.GiB || l.MaxMsgs >= 0 || l.MaxAge > 0 {
				t.Errorf("%s: asked to count beyond %+v; want beyond max_bytes 1GiB alone", stream, l)
			}
			return 2952, true, nil // the bus's count: what lies beyond 1 GiB, oldest first
		}
		p := Compute(target, live, Options{AllowDataLoss: allow})
		if diff := cmp.Diff([]string{"EVENTS"}, asked); diff != "" {
			t.Errorf("the streams counted on the bus (-want +got):\n%s", diff)
		}
		want := []string{
			"update stream CONTROL [max_bytes: unlimited → 64MiB]",
			"update stream EVENTS [max_bytes: unlimited → 1GiB]",
			"update stream NODES [max_bytes: unlimited → 256MiB]",
			"update stream SEAT_MAILER [max_bytes: unlimited → 64MiB, discard: old → new]",
		}
		if diff := cmp.Diff(want, changeLines(p)); diff != "" {
			t.Errorf("the plan (-want +got):\n%s", diff)
		}
		byID := map[string]Change{}
		for _, c := range p.Changes {
			byID[c.ID()] = c
		}
		events, seat := byID["stream EVENTS"], byID["stream SEAT_MAILER"]
		if events.Risk != RiskDataLoss || events.AtStake == nil || events.AtStake.Discards != 2952 || events.AtStake.AtLeast {
			t.Errorf("EVENTS: risk %s, at stake %+v; want data loss of 2952 messages, counted", events.Risk, events.AtStake)
		}
		if (events.Refused != "") == allow || p.Blocked() == allow {
			t.Errorf("allowed %v: EVENTS refused %q, plan blocked %v", allow, events.Refused, p.Blocked())
		}
		if seat.Risk != RiskDisruptive || seat.AtStake != nil || seat.Refused != "" || !strings.Contains(seat.Reason, "takes no new message") {
			t.Errorf("the seat's queue over its new limit: %+v", seat)
		}
		for _, id := range []string{"stream CONTROL", "stream NODES"} {
			if c := byID[id]; c.Risk != RiskNone || c.AtStake != nil {
				t.Errorf("%s holds nothing, yet: %+v", id, c)
			}
		}
		dir := "testdata/settings/upgrade-bounded-defaults"
		if allow {
			dir += "-allowed"
		}
		checkGolden(t, dir, p)
	}
}

// A limit lowered below what a stream holds discards by its stream's state alone where that
// says how many go (max_msgs), asks the bus where it cannot (max_bytes, max_age), and says
// what it could not count as a least, refused all the same.
func TestLoweredLimitsAreCounted(t *testing.T) {
	t.Parallel()
	target := TargetOf(render.Derive(settingsMesh(t, settingsCase{name: "base"})), nil)
	lowered := func(edit func(*LiveStream)) Live {
		live := serverView(LiveOf(target))
		live.Baseline = ""
		for i := range live.Streams {
			if live.Streams[i].Config.Name == "EVENTS" {
				edit(&live.Streams[i])
			}
		}
		return live
	}
	events := func(p *Plan) *AtStake {
		for _, c := range p.Changes {
			if c.ID() == "stream EVENTS" {
				return c.AtStake
			}
		}
		return nil
	}
	// A max_msgs set where the stream had none: its state says how many go.
	msgs := settingsMesh(t, settingsCase{name: "msgs", at: atBus, edit: "  jetstream:\n    streams:\n      events: {max_msgs: 100}\n"})
	tg := TargetOf(render.Derive(msgs), nil)
	live := serverView(LiveOf(target))
	live.Baseline = ""
	for i := range live.Streams {
		if live.Streams[i].Config.Name == "EVENTS" {
			live.Streams[i].Messages, live.Streams[i].Bytes = 130, 130<<10
		}
	}
	live.CountDiscards = func(string, Limits) (uint64, bool, error) {
		t.Error("max_msgs alone is counted from the stream's state, not read")
		return 0, false, nil
	}
	if got := events(Compute(tg, live, Options{})); got == nil || got.Discards != 30 || got.AtLeast {
		t.Errorf("130 messages under a max_msgs of 100: at stake %+v, want 30 exactly", got)
	}

	// Over max_bytes, with no bus to count: at least one goes.
	live = lowered(func(s *LiveStream) { s.Config.MaxBytes, s.Messages, s.Bytes = -1, 10, 2<<30 })
	if got := events(Compute(target, live, Options{})); got == nil || got.Discards != 1 || !got.AtLeast {
		t.Errorf("2 GiB under a 1 GiB limit, not counted: at stake %+v, want at least 1", got)
	}
	// A count that fails is said, and refused.
	live.CountDiscards = func(string, Limits) (uint64, bool, error) { return 0, false, errors.New("no answer") }
	p := Compute(target, live, Options{})
	if got := events(p); got == nil || !got.AtLeast || got.NotCounted != "no answer" || !p.Blocked() {
		t.Errorf("a failed count: at stake %+v, blocked %v", got, p.Blocked())
	}
	// A max_age lowered: only the bus knows whether anything is that old.
	live = lowered(func(s *LiveStream) { s.Config.MaxAge, s.Messages, s.Bytes = 0, 10, 10<<10 })
	if got := events(Compute(target, live, Options{})); got != nil {
		t.Errorf("an age lowered, with no bus to ask: at stake %+v, want nothing claimed", got)
	}
	live.CountDiscards = func(_ string, l Limits) (uint64, bool, error) {
		if l.MaxAge != model.DefaultEventsMaxAge || l.MaxBytes >= 0 {
			t.Errorf("asked about %+v", l)
		}
		return 0, true, nil
	}
	if got := events(Compute(target, live, Options{})); got != nil {
		t.Errorf("nothing that old: at stake %+v", got)
	}
	// Raised limits discard nothing, and ask nothing.
	live = lowered(func(s *LiveStream) { s.Config.MaxBytes, s.Messages, s.Bytes = 512<<20, 10, 500<<20 })
	live.CountDiscards = func(string, Limits) (uint64, bool, error) {
		t.Error("a raised limit was counted")
		return 0, false, nil
	}
	if got := events(Compute(target, live, Options{})); got != nil {
		t.Errorf("a raised limit: at stake %+v", got)
	}
}

// TestOvercommitGolden is a plan whose streams may hold more than the bus says its JetStream
// has: refused whole, saying both sums, unless allowed. A plan that changes no stream does not
// even ask.
func TestOvercommitGolden(t *testing.T) {
	t.Parallel()
	old := TargetOf(render.Derive(settingsMesh(t, settingsCase{name: "base"})), nil)
	bigger := TargetOf(render.Derive(settingsMesh(t, settingsCases[0])), nil) // EVENTS at 4 GiB
	capacity := func() (Capacity, error) {
		return Capacity{File: 2 << 30, Memory: -1, Source: "the embedded server's JetStream store"}, nil
	}
	live := serverView(LiveOf(old))
	live.Baseline = ""
	live.ReadCapacity = capacity
	p := Compute(bigger, live, Options{})
	if !p.OvercommitRefused() || !p.Blocked() || p.Overcommit.Footprint.File != uint64(4<<30+64<<20+256<<20+64<<20) {
		t.Fatalf("overcommit: %+v", p.Overcommit)
	}
	checkGolden(t, "testdata/settings/overcommit", p)
	if p := Compute(bigger, live, Options{AllowOvercommit: true}); p.Overcommit == nil || p.OvercommitRefused() || p.Blocked() {
		t.Errorf("allowed: %+v, blocked %v", p.Overcommit, p.Blocked())
	}
	// No bus to ask (diff --from): nothing said.
	if p := Compute(old, serverView(LiveOf(bigger)), Options{}); p.Overcommit != nil {
		t.Errorf("no capacity read, yet %+v", p.Overcommit)
	}
	live.ReadCapacity = func() (Capacity, error) {
		t.Error("a plan that changes no stream asked for the capacity")
		return Capacity{}, nil
	}
	if p := Compute(old, live, Options{}); p.Overcommit != nil || !p.Empty() {
		t.Errorf("converged: %+v", p.Overcommit)
	}
}
