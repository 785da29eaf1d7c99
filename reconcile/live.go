package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/plan"
)

// listConcurrency bounds the consumer lists in flight: enough to hide round trips on a
// mesh of two hundred seats, few enough not to crowd the server's API queue.
const listConcurrency = 16

// ReadLive reads what is on the bus: every stream, in pages, and the consumers of every
// stream meshctl owns (a foreign stream is left alone, consumers and all), plus the accounts config at
// accountsPath and the last applied holders.
func ReadLive(ctx context.Context, api API, accountsPath string, holding []model.Holding) (plan.Live, error) {
	return readLive(ctx, api, accountsPath, holding, nil)
}

// readLive is ReadLive, listing the consumers only of the owned streams listConsumersOf
// names (all of them when it is nil).
func readLive(ctx context.Context, api API, accountsPath string, holding []model.Holding, listConsumersOf map[string]bool) (plan.Live, error) {
	live, err := readBus(ctx, api, holding, listConsumersOf)
	if err != nil {
		return live, err
	}
	live.Accounts, live.AccountsKnown, err = readAccounts(accountsPath)
	return live, err
}

// readBus is readLive without the accounts config: the streams and consumers.
func readBus(ctx context.Context, api API, holding []model.Holding, listConsumersOf map[string]bool) (plan.Live, error) {
	live := plan.Live{Holding: holding}
	streams, err := api.ListStreams(ctx)
	if err != nil {
		return live, err
	}
	var mine []string
	for _, s := range streams {
		live.Streams = append(live.Streams, plan.LiveStream{Config: s.Config, Messages: s.State.Msgs})
		if plan.Owned(s.Config.Metadata) && (listConsumersOf == nil || listConsumersOf[s.Config.Name]) {
			mine = append(mine, s.Config.Name)
		}
	}
	consumers := make([][]plan.LiveConsumer, len(mine))
	errs := make([]error, len(mine))
	sem := make(chan struct{}, listConcurrency)
	var wg sync.WaitGroup
	for i, name := range mine {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			infos, err := api.ListConsumers(ctx, name)
			if err != nil {
				errs[i] = err
				return
			}
			for _, c := range infos {
				consumers[i] = append(consumers[i], plan.LiveConsumer{Stream: name, Config: c.Config,
					Pending: c.NumPending, AckPending: uint64(c.NumAckPending)})
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return live, err
	}
	for _, cs := range consumers {
		live.Consumers = append(live.Consumers, cs...)
	}
	return live, nil
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
