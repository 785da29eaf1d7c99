package floor_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/bench/floor"
	"github.com/meshbus/meshctl/bench/meshgen"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// consumerPage is how many consumers nats-server returns in one page of CONSUMER.LIST.
const consumerPage = 256

// The list floor finds every stream and consumer the create floor made, through more than
// one page of a stream's consumers.
func TestListFindsWhatCreateMade(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := model.Parse(meshgen.Scaled(500).Files())
	if err != nil {
		t.Fatal(err)
	}
	d := render.Derive(m)
	perStream := map[string]int{}
	for _, c := range d.Consumers {
		perStream[c.Stream]++
	}
	if n := slices.Max(slices.Collect(maps.Values(perStream))); n <= consumerPage {
		t.Fatalf("the most consumers of a stream is %d: the list would not page", n)
	}
	e, err := floor.StartBus(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	nc, err := floor.Connect(e.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := floor.Create(ctx, js, d); err != nil {
		t.Fatal(err)
	}
	got, err := floor.List(ctx, js, nc)
	if err != nil {
		t.Fatal(err)
	}
	if want := len(d.Streams) + len(d.Consumers); got != want {
		t.Errorf("listed %d streams and consumers; created %d", got, want)
	}
}
