package plan

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshbus/meshctl/bench/meshgen"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// A target whose principals and accounts config are made only when a plan needs them plans
// exactly what the target rendered up front plans: against the bus its own description made,
// against one a change of a module away, and against a config in use known, by digest, to be
// the rendering (Live.AccountsRendered) — which, served or not, plans as the rendering itself
// does. The config a plan writes is the same bytes.
func TestATargetMadeWhenNeededPlansWhatARenderedOnePlans(t *testing.T) {
	t.Parallel()
	base := meshgen.Scaled(500)
	touched := base
	touched.Touched = 3
	parse := func(g meshgen.Mesh) *model.Mesh {
		m, err := model.Parse(g.Files())
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	hashes := map[string]string{}
	for i, u := range render.Derive(parse(base)).Users() {
		if i%5 == 0 {
			hashes[u] = "$2a$04$abcdefghijklmnopqrstuu5Ltm8kM2bVNRl9hH8v3Yw1RsF7QWzQy"
		}
	}
	inUse := LiveOf(TargetOf(render.Derive(parse(base)), hashes))
	notServed := inUse
	notServed.AccountsNotServed = "the server does not serve it"
	// A seat's former holder still acknowledging the work it took.
	var graces []render.AckGrace
	if m := parse(base); len(m.Holding) > 0 {
		h, former := m.Holding[0], m.Instances()[0]
		if former == h.Holder {
			former = m.Instances()[1]
		}
		graces = []render.AckGrace{{Seat: h.Seat, Holder: former}}
	}
	if graces == nil {
		t.Fatal("the mesh has no seat with a holder to hand over")
	}
	for name, g := range map[string]meshgen.Mesh{"converged": base, "a change": touched, "a grace": base} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var graced []render.AckGrace
			if name == "a grace" {
				graced = graces
			}
			rendered := TargetOf(render.DeriveWithGraces(parse(g), graced), hashes)
			lazy := TargetOfMesh(parse(g), graced, hashes)
			if lazy.Bus.Principals != nil {
				t.Fatal("the target's principals were derived before anything needed them")
			}
			if got, want := lazy.RenderingDigest(), render.Digest(rendered.Accounts); got != want {
				t.Fatalf("the digest of the rendering is %s; want %s", got, want)
			}
			lives := map[string]Live{"the config in use": inUse, "not served": notServed}
			if name == "converged" {
				lives["known to be the rendering"] = Live{Streams: inUse.Streams, Consumers: inUse.Consumers, Holding: inUse.Holding,
					AccountsKnown: true, AccountsRendered: true, Baseline: inUse.Baseline}
				known := lives["known to be the rendering"]
				known.AccountsNotServed = notServed.AccountsNotServed
				lives["known to be the rendering, not served"] = known
			}
			for what, live := range lives {
				want := Compute(rendered, live, Options{})
				if live.AccountsRendered {
					same := live
					same.Accounts, same.AccountsRendered = rendered.Accounts, false
					want = Compute(rendered, same, Options{})
				}
				got := Compute(TargetOfMesh(parse(g), graced, hashes), live, Options{})
				if d := cmp.Diff(planJSON(t, want), planJSON(t, got)); d != "" {
					t.Errorf("%s: the plans differ (-rendered +made when needed):\n%s", what, d)
				}
				if !bytes.Equal(got.Accounts, want.Accounts) {
					t.Errorf("%s: the config the plan writes differs from the rendering's", what)
				}
			}
		})
	}
}

func planJSON(t *testing.T, p *Plan) string {
	t.Helper()
	var b bytes.Buffer
	if err := p.JSON(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
