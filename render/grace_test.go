package render

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/meshbus/meshctl/model"
)

// graceMesh is a seat two modules claim, on two nodes; holder, when set, names the module
// that holds it (otherwise the first claimant, courier, does).
func graceMesh(t *testing.T, consumers, holder string) *model.Mesh {
	t.Helper()
	src := "bus:\n  consumers: " + consumers + `
nodes:
  - name: alpha
  - name: beta
seats:
  - name: mailer
    accepts: [send]
    emits: [sent]
  - name: printer
    accepts: [print]
modules:
  - name: courier
    on: [alpha]
    claims: [mailer, printer]
  - name: postman
    on: [beta]
    claims: [mailer]
`
	if holder != "" {
		node := map[string]string{"courier": "alpha", "postman": "beta"}[holder]
		src += "holders:\n  - seat: mailer\n    node: " + node + "\n    module: " + holder + "\n"
	}
	m, err := model.Parse([]model.File{{Name: "mesh.yaml", Data: []byte(src)}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Who may still acknowledge a seat's work, and until when, follows from the holders last applied
// and the handovers' times alone.
func TestAckGracesFollowTheHandovers(t *testing.T) {
	t.Parallel()
	courier, postman := model.Instance{Node: "alpha", Module: "courier"}, model.Instance{Node: "beta", Module: "postman"}
	gone := model.Instance{Node: "alpha", Module: "gone"}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	// The description's worker keeps the server's ack wait, and its consumers are pull.
	const grace = model.DefaultAckWait + PullWindow
	now := at.Add(grace / 2)
	applied := func(seat string, i model.Instance) []model.Holding { return []model.Holding{{Seat: seat, Holder: i}} }
	handover := func(seat string, from model.Instance, at time.Time) Handover {
		return Handover{Seat: seat, From: from, At: at}
	}
	for _, c := range []struct {
		name      string
		holder    string // of seat mailer in the description
		applied   []model.Holding
		handovers []Handover
		now       time.Time
		want      []AckGrace
	}{
		{name: "nothing handed over", applied: applied("mailer", courier), now: now},
		{name: "handed over by the apply to come", holder: "postman", applied: applied("mailer", courier), now: now,
			want: []AckGrace{{Seat: "mailer", Holder: courier, For: grace.String()}}},
		{name: "handed over within the ack wait", holder: "postman", applied: applied("mailer", postman),
			handovers: []Handover{handover("mailer", courier, at)}, now: now,
			want: []AckGrace{{Seat: "mailer", Holder: courier, Until: at.Add(grace), For: grace.String()}}},
		{name: "the ack wait is over", holder: "postman", applied: applied("mailer", postman),
			handovers: []Handover{handover("mailer", courier, at)}, now: at.Add(grace)},
		{name: "the latest of two handovers", holder: "postman", applied: applied("mailer", postman),
			handovers: []Handover{handover("mailer", courier, at.Add(time.Second)), handover("mailer", courier, at)}, now: now,
			want: []AckGrace{{Seat: "mailer", Holder: courier, Until: at.Add(time.Second + grace), For: grace.String()}}},
		{name: "the former holder holds the seat again", applied: applied("mailer", postman),
			handovers: []Handover{handover("mailer", courier, at)}, now: now,
			want: []AckGrace{{Seat: "mailer", Holder: postman, For: grace.String()}}},
		{name: "the former holder is gone", holder: "postman", applied: applied("mailer", postman),
			handovers: []Handover{handover("mailer", gone, at)}, now: now},
		{name: "the seat is gone", applied: applied("parcels", courier),
			handovers: []Handover{handover("parcels", postman, at)}, now: now},
		{name: "sorted by seat", holder: "postman", applied: []model.Holding{{Seat: "mailer", Holder: courier}},
			handovers: []Handover{handover("printer", postman, at)}, now: now,
			want: []AckGrace{{Seat: "mailer", Holder: courier, For: grace.String()}, {Seat: "printer", Holder: postman, Until: at.Add(grace), For: grace.String()}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := AckGraces(graceMesh(t, "pull", c.holder), c.applied, c.handovers, c.now)
			if diff := cmp.Diff(c.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// A grace lasts the worker's longest wait for an acknowledgement, and on a pull consumer the
// window in which a request sent before the handover may still be answered.
func TestAGraceCoversTheAckWaitAndThePullWindow(t *testing.T) {
	t.Parallel()
	seat := model.Seat{Name: "mailer", Consumer: model.ConsumerSettings{AckWait: 5 * time.Second}}
	for _, c := range []struct {
		consumers string
		backoff   []time.Duration
		want      time.Duration
	}{
		{consumers: "push", want: 5 * time.Second},
		{consumers: "pull", want: 5*time.Second + PullWindow},
		{consumers: "push", backoff: []time.Duration{5 * time.Second, time.Minute}, want: time.Minute},
	} {
		m := graceMesh(t, c.consumers, "")
		s := seat
		s.Consumer.Backoff = c.backoff
		if got := GraceOf(m, s); got != c.want {
			t.Errorf("%s, backoff %v: a grace of %s, want %s", c.consumers, c.backoff, got, c.want)
		}
	}
}

// A former holder in its grace is granted the acknowledgements of the seat's worker and nothing
// else of the seat; every other principal is as it would be without the grace, and the config
// read a principal at a time is still the rendering.
func TestAFormerHolderMayOnlyAcknowledge(t *testing.T) {
	t.Parallel()
	for _, consumers := range []string{model.ConsumersPull, model.ConsumersPush} {
		t.Run(consumers, func(t *testing.T) {
			t.Parallel()
			m := graceMesh(t, consumers, "postman")
			courier := model.Instance{Node: "alpha", Module: "courier"}
			graces := []AckGrace{{Seat: "mailer", Holder: courier}}
			without, with := Derive(m), DeriveWithGraces(m, graces)
			if !slices.Equal(with.Graces, graces) {
				t.Errorf("the derivation keeps graces %+v", with.Graces)
			}
			for _, p := range with.Principals {
				before, _ := without.Principal(p.User)
				added := granted(p.Publish, before.Publish)
				if p.User != InstanceUser(courier) {
					if !cmp.Equal(p, before) {
						t.Errorf("%s changed with another's grace", p.User)
					}
					continue
				}
				if want := []string{"$JS.ACK.SEAT_MAILER.SEAT_MAILER_worker.>"}; !slices.Equal(added, want) || len(granted(p.Subscribe, before.Subscribe)) > 0 {
					t.Errorf("the former holder is granted %v to publish and %v to subscribe; want only %v",
						added, granted(p.Subscribe, before.Subscribe), want)
				}
			}
			hashes := hashesFor(t, with.Principals)
			if got, want := AccountsDigestOf(m, graces, hashes), Digest(AccountsConfig(with.Principals, hashes)); got != want {
				t.Errorf("AccountsDigestOf = %s; the rendering's digest is %s", got, want)
			}
		})
	}
}

// granted is the subjects of grants not in before.
func granted(grants, before []Grant) []string {
	var out []string
	for _, g := range grants {
		if !slices.ContainsFunc(before, func(b Grant) bool { return b.String() == g.String() }) {
			out = append(out, g.String())
		}
	}
	return out
}

// The first grace to end is the moment a reconcile takes its holder's acknowledgements away; a
// grace still to start has no end yet.
func TestFirstGraceEnd(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	graces := []AckGrace{{Seat: "a"}, {Seat: "b", Until: at.Add(time.Minute)}, {Seat: "c", Until: at}}
	if got := FirstGraceEnd(graces); !got.Equal(at) {
		t.Errorf("FirstGraceEnd = %v, want %v", got, at)
	}
	if got := FirstGraceEnd(graces[:1]); !got.IsZero() {
		t.Errorf("FirstGraceEnd of a grace still to start = %v, want none", got)
	}
}
