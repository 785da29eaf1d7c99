package floor

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/render"
)

// accounts configures the floor's bus as meshctl's (the MESH account with JetStream, users
// that must log in) with one unrestricted user: the floor measures JetStream, not
// permissions or plans.
const accounts = `accounts {
  ` + render.Account + ` {
    jetstream: enabled
    users = [ { user: ` + user + `, password: ` + password + ` } ]
  }
}
`

// The unrestricted user of accounts.
const (
	user     = "floor"
	password = "floor"
)

// StartBus starts an embedded bus on a free port of 127.0.0.1, its store in dir, configured
// as meshctl's but with the floor's one unrestricted user.
func StartBus(ctx context.Context, dir string) (*bus.Embedded, error) {
	return bus.StartEmbedded(ctx, bus.EmbeddedOptions{StateDir: dir, Listen: "127.0.0.1:-1", InitialAccounts: []byte(accounts)})
}

// Connect connects to a bus StartBus started, or one configured as it, as its unrestricted
// user.
func Connect(url string) (*nats.Conn, error) {
	return nats.Connect(url, nats.UserInfo(user, password))
}

// InFlight is how many calls the floor keeps in flight: as many as an apply does.
const InFlight = 16

// Each runs do for every item with InFlight calls at a time and returns every error.
func Each[T any](items []T, do func(T) error) error {
	sem := make(chan struct{}, InFlight)
	var wg sync.WaitGroup
	errs := make([]error, len(items))
	for i, it := range items {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = do(it)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Create creates the derived streams, then their consumers, InFlight calls at a time.
func Create(ctx context.Context, js jetstream.JetStream, d *render.Desired) error {
	if err := Each(d.Streams, func(cfg jetstream.StreamConfig) error {
		_, err := js.CreateStream(ctx, cfg)
		return err
	}); err != nil {
		return err
	}
	return Each(d.Consumers, func(c render.Consumer) error {
		if c.Config.DeliverSubject == "" {
			_, err := js.CreateConsumer(ctx, c.Stream, c.Config)
			return err
		}
		_, err := js.CreatePushConsumer(ctx, c.Stream, c.Config)
		return err
	})
}

// List lists every stream with the library's pager, and each stream's consumers page after
// page by the CONSUMER.LIST request, InFlight streams at a time, and returns how many
// streams and consumers it found: what a bare client does (the library's own consumer
// lister would first ask for each stream's info besides).
func List(ctx context.Context, js jetstream.JetStream, nc *nats.Conn) (int, error) {
	var names []string
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		names = append(names, info.Config.Name)
	}
	if err := l.Err(); err != nil {
		return 0, err
	}
	var listed atomic.Int64
	err := Each(names, func(s string) error {
		n, err := countConsumers(ctx, nc, s)
		listed.Add(int64(n))
		return err
	})
	return len(names) + int(listed.Load()), err
}

// countConsumers pages through stream's consumers by the CONSUMER.LIST request and returns
// how many there are.
func countConsumers(ctx context.Context, nc *nats.Conn, stream string) (int, error) {
	for offset := 0; ; {
		req, _ := json.Marshal(map[string]int{"offset": offset})
		msg, err := nc.RequestWithContext(ctx, "$JS.API.CONSUMER.LIST."+stream, req)
		if err != nil {
			return 0, err
		}
		var page struct {
			Total     int                       `json:"total"`
			Consumers []*jetstream.ConsumerInfo `json:"consumers"`
		}
		if err := json.Unmarshal(msg.Data, &page); err != nil {
			return 0, err
		}
		offset += len(page.Consumers)
		if len(page.Consumers) == 0 || offset >= page.Total {
			return offset, nil
		}
	}
}
