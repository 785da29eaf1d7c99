package plan

import (
	"testing"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// Changing bus.consumers replaces every consumer (the server refuses to turn push into pull or
// back), and only consumers: the grants change in the accounts config, the streams stay. The
// replacement is guarded like any other: a consumer with messages still owed is refused
// without --allow-data-loss.
func TestChangingTheConsumerKindReplacesConsumersUnderTheDataLossGuard(t *testing.T) {
	t.Parallel()
	derive := func(kind string) Target {
		m, err := model.Load("../examples/seed")
		if err != nil {
			t.Fatal(err)
		}
		m.Bus.Consumers = kind
		return TargetOf(render.Derive(m), nil)
	}
	for _, c := range []struct{ from, to string }{{model.ConsumersPush, model.ConsumersPull}, {model.ConsumersPull, model.ConsumersPush}} {
		t.Run(c.from+" to "+c.to, func(t *testing.T) {
			tg := derive(c.to)
			live := serverView(LiveOf(derive(c.from)))
			owed := consumerOf(t, &live, render.StreamEvents, "two_audit")
			owed.Pending = 2
			p := Compute(tg, live, Options{})
			replaced := map[string]bool{}
			for _, ch := range p.Changes {
				switch ch.Kind {
				case KindConsumer:
					if ch.Action != Replace {
						t.Errorf("%s: %s, want a replacement", ch.ID(), ch.Action)
					}
					replaced[ch.Stream+"/"+ch.Name] = true
					if refused := ch.Refused != ""; refused != (ch.Name == "two_audit") {
						t.Errorf("%s refused %q; only the consumer owed messages must be", ch.ID(), ch.Refused)
					}
				case KindStream:
					t.Errorf("%s changes a stream: %s", ch.ID(), ch.Reason)
				}
			}
			if len(replaced) != len(tg.Bus.Consumers) {
				t.Errorf("replaced %d consumers, want all %d", len(replaced), len(tg.Bus.Consumers))
			}
			if !p.Blocked() {
				t.Error("the plan is not blocked by the consumer owed messages")
			}
			if p := Compute(tg, live, Options{AllowDataLoss: true}); p.Blocked() {
				t.Error("--allow-data-loss does not unblock it")
			}
		})
	}
}
