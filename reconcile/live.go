package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/jsapi"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/plan"
)

// listConcurrency bounds the consumer lists in flight: enough to hide round trips on a
// mesh of two hundred seats, few enough not to crowd the server's API queue.
const listConcurrency = 16

// ReadLive reads what is on the bus: every stream, in pages, and the consumers of every
// stream meshctl owns (a foreign stream is left alone, consumers and all), plus the accounts config at
// accountsPath and the last applied holders.
func ReadLive(ctx context.Context, api jsapi.API, accountsPath string, holding []model.Holding) (plan.Live, error) {
	return readLive(ctx, api, accountsPath, holding, nil)
}

// readLive is ReadLive, reading the consumers only of what scope names (all of them when it
// is nil).
func readLive(ctx context.Context, api jsapi.API, accountsPath string, holding []model.Holding, scope *readScope) (plan.Live, error) {
	live, err := readBus(ctx, api, holding, scope)
	if err != nil {
		return live, err
	}
	live.Accounts, live.AccountsKnown, err = readAccounts(accountsPath)
	live.ReadUsers = accounts.ReadServedUsers
	askBus(ctx, api, nil, &live)
	return live, err
}

// readScope is the part of the bus a verification reads again: every stream's config, the
// whole consumer list of the streams in lists, and of the others in consumers only the
// consumers named, each read on its own (a consumer updated in a stream of five thousand is
// one request, not the stream's forty pages).
type readScope struct {
	lists     map[string]bool
	consumers map[string][]string
	// named are the streams read by their consumers' names, each with the server's answers
	// to the consumers created in it: a named consumer is taken as its answer, the others
	// are not read (touched).
	named map[string]map[string]*jetstream.ConsumerInfo
}

// readBus is readLive without the accounts config: the streams and consumers.
func readBus(ctx context.Context, api jsapi.API, holding []model.Holding, scope *readScope) (plan.Live, error) {
	live := plan.Live{Holding: holding}
	streams, err := api.ListStreams(ctx)
	if err != nil {
		return live, err
	}
	type read struct {
		stream   string
		names    []string                           // nil: the whole list
		answered map[string]*jetstream.ConsumerInfo // not nil: by name, these consumers as answered
		expect   int                                // a whole list: as many as the stream list says
	}
	var reads []read
	for _, s := range streams {
		live.Streams = append(live.Streams, plan.LiveStream{Config: s.Config, Messages: s.State.Msgs, Bytes: s.State.Bytes})
		name := s.Config.Name
		switch {
		case !plan.Owned(s.Config.Metadata):
		case scope != nil && scope.named[name] != nil:
			reads = append(reads, read{stream: name, answered: scope.named[name]})
		case scope == nil || scope.lists[name]:
			reads = append(reads, read{stream: name, expect: s.State.Consumers})
		case len(scope.consumers[name]) > 0:
			reads = append(reads, read{stream: name, names: scope.consumers[name]})
		}
	}
	// The consumers go into one list, each stream's into the part its count in the stream list
	// reserves, so the list is made once: a large mesh's is ten megabytes, and the lists of
	// the streams joined after they are read are that once more. Where a stream's count moved
	// while it was read, the lists are joined.
	total := 0
	for _, r := range reads {
		total += r.expect
	}
	all := make([]plan.LiveConsumer, total)
	consumers := make([][]plan.LiveConsumer, len(reads))
	for i, off := 0, 0; i < len(reads); i++ {
		consumers[i] = all[off : off : off+reads[i].expect]
		off += reads[i].expect
	}
	errs := make([]error, len(reads))
	sem := make(chan struct{}, listConcurrency)
	var wg sync.WaitGroup
	for i, r := range reads {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			consumers[i], errs[i] = liveConsumers(ctx, api, r.stream, r.names, r.answered, consumers[i])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return live, err
	}
	for i, off := 0, 0; i < len(reads); i++ {
		if len(consumers[i]) != reads[i].expect || len(consumers[i]) > 0 && &consumers[i][0] != &all[off] {
			live.Consumers = slices.Concat(consumers...)
			return live, nil
		}
		off += reads[i].expect
	}
	if total > 0 {
		live.Consumers = all
	}
	return live, nil
}

// liveConsumers reads the consumers of stream as readConsumers does, as the plan compares
// them, appended to into. The whole list is kept a page at a time as the API hands it over
// (jsapi.ConsumerPager), its infos let go page by page; and sized once, from the length the
// server gives where into has no room for it: EVENTS of a large mesh has a consumer per module
// instance, and a list grown by appending copies itself over and over.
func liveConsumers(ctx context.Context, api jsapi.API, stream string, names []string, answered map[string]*jetstream.ConsumerInfo, into []plan.LiveConsumer) ([]plan.LiveConsumer, error) {
	out := into
	keep := func(total int, infos []*jetstream.ConsumerInfo) {
		if len(out) == 0 && cap(out) < total {
			out = make([]plan.LiveConsumer, 0, total)
		}
		for _, c := range infos {
			out = append(out, plan.LiveConsumer{Stream: stream, Config: c.Config,
				Pending: c.NumPending, AckPending: uint64(c.NumAckPending)})
		}
	}
	if names == nil && answered == nil {
		if err := jsapi.EachConsumerPage(ctx, api, stream, keep); err != nil {
			return nil, err
		}
		return out, nil
	}
	infos, err := readConsumers(ctx, api, stream, names, answered)
	if err != nil {
		return nil, err
	}
	keep(len(infos), infos)
	return out, nil
}

// readConsumers reads the consumers of stream named, each on its own (a consumer that is gone
// is left out), or the stream's whole list when names is nil. With answered, it reads the
// stream's consumer names and returns the answer of each one named: the others are left out.
func readConsumers(ctx context.Context, api jsapi.API, stream string, names []string, answered map[string]*jetstream.ConsumerInfo) ([]*jetstream.ConsumerInfo, error) {
	if answered != nil {
		served, err := api.ConsumerNames(ctx, stream)
		if err != nil {
			return nil, err
		}
		var out []*jetstream.ConsumerInfo
		for _, name := range served {
			if info := answered[name]; info != nil {
				out = append(out, info)
			}
		}
		return out, nil
	}
	if names == nil {
		return api.ListConsumers(ctx, stream)
	}
	var out []*jetstream.ConsumerInfo
	for _, name := range names {
		info, err := api.ConsumerInfo(ctx, stream, name)
		switch {
		case errors.Is(err, jetstream.ErrConsumerNotFound):
		case err != nil:
			return nil, err
		default:
			out = append(out, info)
		}
	}
	return out, nil
}

// readAccounts reads the accounts config at path, if there is one ("" names none).
func readAccounts(path string) ([]byte, bool, error) {
	if path == "" {
		return nil, false, nil
	}
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		return data, true, nil
	case errors.Is(err, fs.ErrNotExist):
		return nil, false, nil
	default:
		return nil, false, fmt.Errorf("reading the accounts config in use: %w", err)
	}
}

// askBus gives live what a plan asks the bus beyond its listing, and only when it asks: how
// many messages a stream's lowered limits discard, and how much the bus's JetStream has. A plan
// that lowers no limit and creates or changes no stream asks neither, so a converged plan costs
// nothing more. embedded is the bus this process runs, nil for any other.
func askBus(ctx context.Context, api jsapi.API, embedded *bus.Embedded, live *plan.Live) {
	read := live.Streams
	live.CountDiscards = func(stream string, l plan.Limits) (uint64, bool, error) {
		for i := range read {
			if read[i].Config.Name == stream {
				return jsapi.CountDiscards(ctx, api, &read[i], l, time.Now())
			}
		}
		return 0, true, nil
	}
	live.ReadCapacity = func() (plan.Capacity, error) { return jsapi.Capacity(ctx, api, embedded) }
}
