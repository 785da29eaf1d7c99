package controller

import (
	"context"
	"slices"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/render"
)

// The seats' queues and the consumers with work pending, as status reads them from the bus.
func TestSeatsAndBacklogsReadWhatWaits(t *testing.T) {
	t.Parallel()
	f := start(t, twoNodes)
	ctx := context.Background()
	pw, err := f.store.Mint(ctx, []string{"one.shop"}, bcrypt.MinCost, "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.sync(ctx); err != nil {
		t.Fatal(err)
	}
	shop := f.joinAs(host.Membership{Address: f.bus.URL(), User: "one.shop", Password: pw["one.shop"]})
	for _, subject := range []string{render.AcceptSubject("mailer", "send"), render.ModuleEvent("shop", "order.placed")} {
		if _, err := shop.Publish(ctx, subject, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	js, err := jetstream.New(f.ctrl.probe(t, f.bus.URL()).Conn)
	if err != nil {
		t.Fatal(err)
	}
	seats, err := Seats(ctx, js, []string{"mailer"}, map[string]string{"mailer": "two.postman"})
	if err != nil {
		t.Fatal(err)
	}
	if len(seats) != 1 || seats[0].Waiting != 1 || seats[0].Bound || seats[0].Holder != "two.postman" {
		t.Errorf("Seats = %+v, want mailer with one piece of work waiting and no worker bound", seats)
	}
	backlogs, err := Backlogs(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []Backlog{{Stream: "EVENTS", Consumer: "two_postman", Pending: 1}, {Stream: "SEAT_MAILER", Consumer: "SEAT_MAILER_worker", Pending: 1}} {
		if !slices.Contains(backlogs, want) {
			t.Errorf("Backlogs = %+v, want %+v among them", backlogs, want)
		}
	}
}
