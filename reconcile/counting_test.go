package reconcile

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/jsapi"
)

// Counting wraps an API and counts its calls, reads and writes apart: a converged apply
// must make no mutating call at all, and a small change only the calls it needs.
// StreamMutations and ConsumerMutations split Mutations by the object they change.
type Counting struct {
	jsapi.API
	Reads, Mutations                   atomic.Int64
	StreamMutations, ConsumerMutations atomic.Int64
}

func (c *Counting) stream() {
	c.Mutations.Add(1)
	c.StreamMutations.Add(1)
}

func (c *Counting) consumer() {
	c.Mutations.Add(1)
	c.ConsumerMutations.Add(1)
}

func (c *Counting) ListStreams(ctx context.Context) ([]*jetstream.StreamInfo, error) {
	c.Reads.Add(1)
	return c.API.ListStreams(ctx)
}

func (c *Counting) ListConsumers(ctx context.Context, s string) ([]*jetstream.ConsumerInfo, error) {
	c.Reads.Add(1)
	return c.API.ListConsumers(ctx, s)
}

// ConsumerPages is counted as the one read ListConsumers is.
func (c *Counting) ConsumerPages(ctx context.Context, s string, each func(total int, infos []*jetstream.ConsumerInfo)) error {
	c.Reads.Add(1)
	return jsapi.EachConsumerPage(ctx, c.API, s, each)
}

func (c *Counting) ConsumerNames(ctx context.Context, s string) ([]string, error) {
	c.Reads.Add(1)
	return c.API.ConsumerNames(ctx, s)
}

func (c *Counting) ConsumerInfo(ctx context.Context, s, name string) (*jetstream.ConsumerInfo, error) {
	c.Reads.Add(1)
	return c.API.ConsumerInfo(ctx, s, name)
}

func (c *Counting) CreateStream(ctx context.Context, cfg jetstream.StreamConfig) error {
	c.stream()
	return c.API.CreateStream(ctx, cfg)
}

func (c *Counting) UpdateStream(ctx context.Context, cfg jetstream.StreamConfig) error {
	c.stream()
	return c.API.UpdateStream(ctx, cfg)
}

func (c *Counting) DeleteStream(ctx context.Context, name string) error {
	c.stream()
	return c.API.DeleteStream(ctx, name)
}

func (c *Counting) CreateConsumer(ctx context.Context, s string, cfg jetstream.ConsumerConfig) (*jetstream.ConsumerInfo, error) {
	c.consumer()
	return c.API.CreateConsumer(ctx, s, cfg)
}

func (c *Counting) UpdateConsumer(ctx context.Context, s string, cfg jetstream.ConsumerConfig) error {
	c.consumer()
	return c.API.UpdateConsumer(ctx, s, cfg)
}

func (c *Counting) DeleteConsumer(ctx context.Context, s, name string) error {
	c.consumer()
	return c.API.DeleteConsumer(ctx, s, name)
}

// The drain's calls, counted: reading a stream's state or a message is a read; deleting a
// message, publishing one and pausing a consumer mutate.

func (c *Counting) StreamInfo(ctx context.Context, s string) (*jetstream.StreamInfo, error) {
	c.Reads.Add(1)
	return c.API.StreamInfo(ctx, s)
}

func (c *Counting) NextMsg(ctx context.Context, s string, seq uint64) (*jetstream.RawStreamMsg, error) {
	c.Reads.Add(1)
	return c.API.NextMsg(ctx, s, seq)
}

func (c *Counting) DeleteMsg(ctx context.Context, s string, seq uint64) error {
	c.stream()
	return c.API.DeleteMsg(ctx, s, seq)
}

func (c *Counting) Publish(ctx context.Context, msg *nats.Msg) (*jetstream.PubAck, error) {
	c.stream()
	return c.API.Publish(ctx, msg)
}

func (c *Counting) PauseConsumer(ctx context.Context, s, name string, until time.Time) error {
	c.consumer()
	return c.API.PauseConsumer(ctx, s, name, until)
}
