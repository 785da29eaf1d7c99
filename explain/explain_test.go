package explain

import (
	"testing"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/model"
)

func seed(t *testing.T, consumers string) *model.Mesh {
	t.Helper()
	m, err := model.Load("../examples/seed")
	if err != nil {
		t.Fatal(err)
	}
	if consumers != "" {
		m.Bus.Consumers = consumers
	}
	return m
}

// Each refusal is explained in the description's terms: the YAML that would grant it, or why
// none would.
func TestRefusalsAreExplainedInTheDescriptionsTerms(t *testing.T) {
	t.Parallel()
	pub := func(user, subject string) bus.PermissionError {
		return bus.PermissionError{User: user, Op: bus.OpPublish, Subject: subject}
	}
	sub := func(user, subject string) bus.PermissionError {
		return bus.PermissionError{User: user, Op: bus.OpSubscribe, Subject: subject}
	}
	for _, c := range []struct {
		consumers string
		r         bus.PermissionError
		want      Advice
	}{
		// The issue's own example: a call not declared.
		{"", pub("two.shop", "mesh.mod.telegram.tool.status"), Advice{"module shop does not declare calls: [telegram/status]", true}},
		{"", sub("two.shop", "mesh.mod.mesh-catalog.event.upgraded"), Advice{"module shop does not declare follows: [mesh-catalog/upgraded]", true}},
		{"", pub("two.shop", "mesh.mod.shop.event.order.cancelled"), Advice{"module shop does not declare emits: [order.cancelled]", true}},
		{"", sub("one.telegram", "mesh.mod.telegram.tool.restart"), Advice{"module telegram does not declare serves: [restart]", true}},
		{"", pub("two.audit", "mesh.mod.shop.event.order.placed"), Advice{"only module shop's instances emit the events of shop/order.placed: no declaration grants it", false}},
		{"", pub("two.audit", "mesh.seat.telegram-sender.accept.send"), Advice{"module audit does not declare sends: [telegram-sender/send]", true}},
		{"", pub("two.shop", "mesh.seat.telegram-sender.event.delivered"), Advice{"only seat telegram-sender's holder emits the events of seat:telegram-sender/delivered, and two.shop does not hold it; to hand it over: holders: [{seat: telegram-sender, node: two, module: shop}]", true}},
		{"", pub("one.telegram", "mesh.seat.telegram-sender.event.lost"), Advice{"seat telegram-sender does not declare emits: [lost]", true}},
		{"", pub("controller", "mesh.mod.telegram.tool.status"), Advice{"the controller does not declare calls: [telegram/status]", true}},
		{"", sub("controller", "mesh.mod.shop.event.order.placed"), Advice{"the controller does not declare follows: [shop/order.placed]", true}},
		// What no declaration can grant.
		{"", sub("two.audit", "_INBOX.two.shop.>"), Advice{"_INBOX.two.shop.> is not module audit's inbox; set the client's inbox prefix to _INBOX.two.audit (nats.CustomInboxPrefix, inboxPrefix): no declaration grants it", false}},
		{"", pub("two.audit", "$JS.API.STREAM.INFO.EVENTS"), Advice{"$JS.API.STREAM.INFO.EVENTS is the JetStream API, which is the controller's: a host binds its own consumers by name (never js.Stream, which asks STREAM.INFO, or a create): no declaration grants it", false}},
		{"", pub("two.audit", "$JS.API.CONSUMER.INFO.EVENTS.two_shop"), Advice{"consumer EVENTS/two_shop is two.shop's: no declaration grants it", false}},
		{"", sub("two.audit", "mesh.mod.>"), Advice{"mesh.mod.> is a wildcard over other principals' traffic: no declaration grants it", false}},
		{"", pub("nobody", "x"), Advice{`user "nobody" is no principal of this description: no declaration grants it`, false}},
		// Consumers: a seat not held, a module with no consumer, the other kind of consumer.
		{"", pub("two.shop", "$JS.API.CONSUMER.INFO.SEAT_TELEGRAM_SENDER.SEAT_TELEGRAM_SENDER_worker"), Advice{"only seat telegram-sender's holder takes its work, and two.shop does not hold it; to hand it over: holders: [{seat: telegram-sender, node: two, module: shop}]", true}},
		{"", pub("two.shop", "$JS.API.CONSUMER.INFO.EVENTS.two_shop"), Advice{"module shop follows nothing, so it has no consumer: declare follows: [MODULE/EVENT]", true}},
		{"", pub("two.audit", "$JS.API.CONSUMER.MSG.NEXT.EVENTS.two_audit"), Advice{"the mesh's consumers are pushed, not pulled: take deliveries on _DELIVER.two_audit, or declare bus: {consumers: pull}", true}},
		{model.ConsumersPull, sub("two.audit", "_DELIVER.two_audit"), Advice{"the mesh's consumers are pulled (bus.consumers: pull), so nothing delivers on _DELIVER.two_audit: bind the consumer as a pull consumer, or declare bus: {consumers: push}", true}},
	} {
		t.Run(c.r.User+" "+c.r.Op+" "+c.r.Subject, func(t *testing.T) {
			if got := Refusal(seed(t, c.consumers), c.r); got != c.want {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}
