package jsapi

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// guardedAPI is an API whose every mutating call first asks owned: a process that lost the
// apply lock on the bus, or the lead, changes nothing from the moment it finds out.
type guardedAPI struct {
	API
	owned func() error
}

// Guarded is api, each mutating call asking owned first; api itself where owned is nil.
func Guarded(api API, owned func() error) API {
	if owned == nil {
		return api
	}
	return guardedAPI{API: api, owned: owned}
}

// ConsumerPages passes the paged list of the API it guards on: a read asks nothing.
func (a guardedAPI) ConsumerPages(ctx context.Context, stream string, each func(total int, infos []*jetstream.ConsumerInfo)) error {
	return EachConsumerPage(ctx, a.API, stream, each)
}

func (a guardedAPI) CreateStream(ctx context.Context, cfg jetstream.StreamConfig) error {
	if err := a.owned(); err != nil {
		return err
	}
	return a.API.CreateStream(ctx, cfg)
}

func (a guardedAPI) UpdateStream(ctx context.Context, cfg jetstream.StreamConfig) error {
	if err := a.owned(); err != nil {
		return err
	}
	return a.API.UpdateStream(ctx, cfg)
}

func (a guardedAPI) DeleteStream(ctx context.Context, name string) error {
	if err := a.owned(); err != nil {
		return err
	}
	return a.API.DeleteStream(ctx, name)
}

func (a guardedAPI) CreateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (*jetstream.ConsumerInfo, error) {
	if err := a.owned(); err != nil {
		return nil, err
	}
	return a.API.CreateConsumer(ctx, stream, cfg)
}

func (a guardedAPI) UpdateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) error {
	if err := a.owned(); err != nil {
		return err
	}
	return a.API.UpdateConsumer(ctx, stream, cfg)
}

func (a guardedAPI) DeleteConsumer(ctx context.Context, stream, name string) error {
	if err := a.owned(); err != nil {
		return err
	}
	return a.API.DeleteConsumer(ctx, stream, name)
}

func (a guardedAPI) DeleteMsg(ctx context.Context, stream string, seq uint64) error {
	if err := a.owned(); err != nil {
		return err
	}
	return a.API.DeleteMsg(ctx, stream, seq)
}

func (a guardedAPI) Publish(ctx context.Context, msg *nats.Msg) (*jetstream.PubAck, error) {
	if err := a.owned(); err != nil {
		return nil, err
	}
	return a.API.Publish(ctx, msg)
}

func (a guardedAPI) PauseConsumer(ctx context.Context, stream, consumer string, until time.Time) error {
	if err := a.owned(); err != nil {
		return err
	}
	return a.API.PauseConsumer(ctx, stream, consumer, until)
}
