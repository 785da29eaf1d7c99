package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/render"
)

// SeatWork is a seat's work queue as the bus has it: who holds the seat, whether the holder's
// worker is bound (a subscription takes its deliveries, or a pull request waits on it), and how
// much work waits.
type SeatWork struct {
	Seat   string `json:"seat"`
	Holder string `json:"holder,omitempty"` // the holder's user, empty when the seat has none
	Bound  bool   `json:"worker_bound"`
	// Waiting is the work in the seat's queue: not yet delivered, or delivered and not yet
	// acknowledged.
	Waiting uint64 `json:"waiting"`
	// Unacknowledged is the part of Waiting delivered to the holder and not yet acknowledged.
	Unacknowledged int `json:"unacknowledged"`
}

// Backlog is a consumer with work pending: messages it has yet to deliver, or delivered and
// not acknowledged.
type Backlog struct {
	Stream         string `json:"stream"`
	Consumer       string `json:"consumer"`
	Pending        uint64 `json:"pending"`
	Unacknowledged int    `json:"unacknowledged"`
}

// Seats reads each seat's work queue and worker from the bus; holders maps a seat to its holder's
// user. A seat whose queue does not exist yet is shown empty and unbound.
func Seats(ctx context.Context, js jetstream.JetStream, seats []string, holders map[string]string) ([]SeatWork, error) {
	out := make([]SeatWork, 0, len(seats))
	for _, seat := range seats {
		w := SeatWork{Seat: seat, Holder: holders[seat]}
		s, err := js.Stream(ctx, render.SeatStreamName(seat))
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			out = append(out, w)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading seat %s's work queue: %w", seat, err)
		}
		w.Waiting = s.CachedInfo().State.Msgs
		info, err := host.ConsumerInfo(ctx, js, s.CachedInfo().Config.Name, render.WorkerConsumer(seat))
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, fmt.Errorf("reading seat %s's worker: %w", seat, err)
		}
		if err == nil {
			// A push worker is bound while a subscription takes its deliveries; a pull worker
			// while a puller's request waits on it.
			w.Bound, w.Unacknowledged = info.PushBound || info.NumWaiting > 0, info.NumAckPending
		}
		out = append(out, w)
	}
	return out, nil
}

// Backlogs lists the consumers of the mesh's streams that have work pending, by stream and name.
func Backlogs(ctx context.Context, js jetstream.JetStream) ([]Backlog, error) {
	var out []Backlog
	names := js.StreamNames(ctx)
	var streams []string
	for n := range names.Name() {
		streams = append(streams, n)
	}
	if err := names.Err(); err != nil {
		return nil, fmt.Errorf("listing the streams: %w", err)
	}
	slices.Sort(streams)
	for _, name := range streams {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("reading stream %s: %w", name, err)
		}
		if s.CachedInfo().Config.Metadata[render.OwnerKey] != render.OwnerValue {
			continue
		}
		list := s.ListConsumers(ctx)
		for info := range list.Info() {
			if info.NumPending > 0 || info.NumAckPending > 0 {
				out = append(out, Backlog{Stream: name, Consumer: info.Name, Pending: info.NumPending, Unacknowledged: info.NumAckPending})
			}
		}
		if err := list.Err(); err != nil {
			return nil, fmt.Errorf("listing the consumers of %s: %w", name, err)
		}
	}
	slices.SortFunc(out, func(a, b Backlog) int {
		if c := strings.Compare(a.Stream, b.Stream); c != 0 {
			return c
		}
		return strings.Compare(a.Consumer, b.Consumer)
	})
	return out, nil
}
