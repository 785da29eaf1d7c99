package plan_test

import (
	"testing"

	"github.com/meshbus/meshctl/bench/meshgen"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/render"
)

func targetOf(b *testing.B, g meshgen.Mesh) plan.Target {
	b.Helper()
	m, err := model.Parse(g.Files())
	if err != nil {
		b.Fatal(err)
	}
	return plan.TargetOf(render.Derive(m), nil)
}

// BenchmarkPlanConverged plans a bus that is exactly the derivation: the diff every
// `meshctl watch` resync and every converged `meshctl diff` computes.
func BenchmarkPlanConverged(b *testing.B) {
	for _, n := range meshgen.Sizes {
		g := meshgen.Scaled(n)
		b.Run(g.String(), func(b *testing.B) {
			t := targetOf(b, g)
			live := plan.LiveOf(t)
			for b.Loop() {
				if p := plan.Compute(t, live, plan.Options{}); !p.Empty() {
					b.Fatal("a converged bus plans changes")
				}
			}
		})
	}
}

// BenchmarkPlanOnePercent plans a merge that touches 1% of the module instances: as many
// consumers to update, and an accounts config that differs, so the users of the one in use are
// read (the older description's own, with no parser: plan.LiveOf) and compared user by user.
func BenchmarkPlanOnePercent(b *testing.B) {
	for _, n := range meshgen.Sizes {
		g := meshgen.Scaled(n)
		b.Run(g.String(), func(b *testing.B) {
			live := plan.LiveOf(targetOf(b, g))
			touched := g
			touched.Touched = n / 100
			t := targetOf(b, touched)
			for b.Loop() {
				p := plan.Compute(t, live, plan.Options{})
				if s := p.Summary(); s.Update != touched.Touched+1 {
					b.Fatalf("planned %+v, want %d consumer updates and the accounts", s, touched.Touched)
				}
			}
		})
	}
}
