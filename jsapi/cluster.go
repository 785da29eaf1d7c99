package jsapi

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/busclient"
)

// A cluster's JetStream API answers through its meta leader, and the streams' and consumers'
// own leaders: while one of them is being elected again — the server that led it stopped, or
// the connection moved to another server — a call goes unanswered, or is answered "temporarily
// unavailable" (10008) or "can not handle request" (10009); right after a stream goes from
// one replica to three, a consumer's update to three fails (10126) until the stream's new
// peers are in place. Each of those passes within seconds, so on a cluster every call is
// retried, each attempt bounded, for at most metaRetryWait: an apply outlives a leader change
// instead of failing on it. Every call retried is idempotent (a create of what exists with
// the same config returns it, a delete of what is gone is done).

// metaRetryWait bounds how long a call is retried through a leader change; metaAttemptWait
// bounds one attempt, so a request the old leader took with it is asked again soon.
const (
	metaRetryWait   = 30 * time.Second
	metaAttemptWait = 4 * time.Second
)

// clusterAPI is an API retrying transient cluster errors.
type clusterAPI struct{ API }

// Retrying wraps api for a bus of several servers; one server has no leader to lose.
func Retrying(api API, t busclient.Target) API {
	if t.Others == "" {
		return api
	}
	return clusterAPI{api}
}

// transient reports whether err is one a leader change explains.
func transient(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case 10008, 10009, 10126:
			return true
		}
		return false
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

// RetryCall calls f until it succeeds or fails in a way no leader change explains, each
// attempt bounded by metaAttemptWait, for at most metaRetryWait: a call on a cluster, and a
// read of the store's bucket there, outlives an election.
func RetryCall[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	return RetryCallIf(ctx, f, transient)
}

// Placing reports whether err is transient, or the server finding no peer to place a new
// replicated stream on while one of them is offline (err 10005): a cluster just started, or a
// server just back, until the meta leader counts it current again. Only for the store's own
// buckets, made once per connection: a plan's create is not held up by a server that is down.
func Placing(err error) bool {
	var apiErr *jetstream.APIError
	return transient(err) || errors.As(err, &apiErr) && apiErr.ErrorCode == 10005
}

// RetryCallIf is RetryCall, retrying the errors retryable says (Placing, for a bucket made
// while a server may be down).
func RetryCallIf[T any](ctx context.Context, f func(context.Context) (T, error), retryable func(error) bool) (T, error) {
	deadline := time.Now().Add(metaRetryWait)
	for {
		actx, cancel := context.WithTimeout(ctx, metaAttemptWait)
		v, err := f(actx)
		cancel()
		if err == nil || !retryable(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Retry is RetryCall for a call that returns only an error.
func Retry(ctx context.Context, f func(context.Context) error) error {
	_, err := RetryCall(ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, f(ctx) })
	return err
}

func (a clusterAPI) ListStreams(ctx context.Context) ([]*jetstream.StreamInfo, error) {
	return RetryCall(ctx, a.API.ListStreams)
}

func (a clusterAPI) ListConsumers(ctx context.Context, stream string) ([]*jetstream.ConsumerInfo, error) {
	return RetryCall(ctx, func(ctx context.Context) ([]*jetstream.ConsumerInfo, error) { return a.API.ListConsumers(ctx, stream) })
}

func (a clusterAPI) CreateStream(ctx context.Context, cfg jetstream.StreamConfig) error {
	return Retry(ctx, func(ctx context.Context) error { return a.API.CreateStream(ctx, cfg) })
}

func (a clusterAPI) UpdateStream(ctx context.Context, cfg jetstream.StreamConfig) error {
	return Retry(ctx, func(ctx context.Context) error { return a.API.UpdateStream(ctx, cfg) })
}

func (a clusterAPI) DeleteStream(ctx context.Context, name string) error {
	return Retry(ctx, func(ctx context.Context) error { return a.API.DeleteStream(ctx, name) })
}

func (a clusterAPI) CreateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (*jetstream.ConsumerInfo, error) {
	return RetryCall(ctx, func(ctx context.Context) (*jetstream.ConsumerInfo, error) {
		return a.API.CreateConsumer(ctx, stream, cfg)
	})
}

func (a clusterAPI) ConsumerNames(ctx context.Context, stream string) ([]string, error) {
	return RetryCall(ctx, func(ctx context.Context) ([]string, error) { return a.API.ConsumerNames(ctx, stream) })
}

func (a clusterAPI) UpdateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) error {
	return Retry(ctx, func(ctx context.Context) error { return a.API.UpdateConsumer(ctx, stream, cfg) })
}

func (a clusterAPI) DeleteConsumer(ctx context.Context, stream, name string) error {
	return Retry(ctx, func(ctx context.Context) error { return a.API.DeleteConsumer(ctx, stream, name) })
}

// ConsumerInfo is retried too: a verification reads a consumer from its leader.
func (a clusterAPI) ConsumerInfo(ctx context.Context, stream, name string) (*jetstream.ConsumerInfo, error) {
	return RetryCall(ctx, func(ctx context.Context) (*jetstream.ConsumerInfo, error) {
		return a.API.ConsumerInfo(ctx, stream, name)
	})
}

// StreamInfo is retried too: the data-loss guard reads a stream's state from its leader.
func (a clusterAPI) StreamInfo(ctx context.Context, stream string) (*jetstream.StreamInfo, error) {
	return RetryCall(ctx, func(ctx context.Context) (*jetstream.StreamInfo, error) { return a.API.StreamInfo(ctx, stream) })
}
