package hosttest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/render"
)

// UpdateConsumer changes the consumer stream/consumer on the server over js (the controller's),
// as a hand outside the description could: a shorter ack wait, a max_deliver. It reads the
// consumer's whole config, has change edit it and sends it all back, since an update sends the
// whole config and a partial one would reset the rest; a push consumer is updated as one.
func UpdateConsumer(ctx context.Context, js jetstream.JetStream, stream, consumer string, change func(*jetstream.ConsumerConfig)) error {
	info, err := host.ConsumerInfo(ctx, js, stream, consumer)
	if err != nil {
		return fmt.Errorf("reading consumer %s/%s: %w", stream, consumer, err)
	}
	cfg := info.Config
	change(&cfg)
	if cfg.DeliverSubject != "" {
		_, err = js.UpdatePushConsumer(ctx, stream, cfg)
	} else {
		_, err = js.UpdateConsumer(ctx, stream, cfg)
	}
	if err != nil {
		return fmt.Errorf("updating consumer %s/%s: %w", stream, consumer, err)
	}
	return nil
}

// UpdateConsumer is UpdateConsumer as the mesh's controller, ending the test when it fails.
func (b *Mesh) UpdateConsumer(t testing.TB, stream, consumer string, change func(*jetstream.ConsumerConfig)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := UpdateConsumer(ctx, b.MustJoin(t, render.ControllerUser).JetStream(), stream, consumer, change); err != nil {
		t.Fatal(err)
	}
}
