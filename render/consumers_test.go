package render

import (
	"strings"
	"testing"

	"github.com/meshbus/meshctl/model"
)

// In pull mode no consumer has a deliver subject or group and no principal subscribes one;
// each principal that took deliveries (but the controller, whose `$JS.API.>` covers it) may
// instead publish the pull subject of exactly its own consumers. In push mode it is the other
// way round.
func TestConsumersFollowTheMeshsKind(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{model.ConsumersPull, model.ConsumersPush} {
		t.Run(kind, func(t *testing.T) {
			m := mustLoad(t, "../examples/seed")
			m.Bus.Consumers = kind
			d := Derive(m)
			pull := kind == model.ConsumersPull
			consumers := map[string]bool{}
			for _, c := range d.Consumers {
				consumers[c.Stream+"."+c.Name()] = true
				if pull && (c.Config.DeliverSubject != "" || c.Config.DeliverGroup != "") {
					t.Errorf("pull consumer %s/%s delivers on %q group %q", c.Stream, c.Name(), c.Config.DeliverSubject, c.Config.DeliverGroup)
				}
				if !pull && c.Config.DeliverSubject == "" {
					t.Errorf("push consumer %s/%s has no deliver subject", c.Stream, c.Name())
				}
			}
			pulls := 0
			for _, p := range d.Principals {
				for _, g := range p.Subscribe {
					if pull && strings.HasPrefix(g.Subject, "_DELIVER.") {
						t.Errorf("%s subscribes %s in pull mode", p.User, g)
					}
				}
				for _, g := range p.Publish {
					target, ok := strings.CutPrefix(g.Subject, "$JS.API.CONSUMER.MSG.NEXT.")
					if !ok {
						continue
					}
					pulls++
					if !pull {
						t.Errorf("%s may pull %s in push mode", p.User, target)
					}
					if !consumers[target] {
						t.Errorf("%s may pull %s, which is no derived consumer", p.User, target)
					}
				}
			}
			// one.telegram's worker, two.audit's events, node.one's and node.two's declarations.
			if want := map[bool]int{true: 4, false: 0}[pull]; pulls != want {
				t.Errorf("%d pull grants, want %d", pulls, want)
			}
		})
	}
}
