package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// The bare-client floors run in a process of their own (this binary, re-executed with
// -floor), so that each has its own peak RSS and nothing of the harness's own heap.

// floorResult is what a floor process prints on stdout, as JSON.
type floorResult struct {
	NS      int64 `json:"ns"`      // the timed operation alone
	Objects int   `json:"objects"` // streams and consumers created or listed
}

// floorArgs are the -floor process's own flags.
type floorArgs struct {
	kind         string // "create", "list" or "serve"
	mesh         string // the description directory
	dir          string // create, serve: the store of the embedded bus
	url          string // list: the bus to list; create: a bus served by a floor process, not one of its own
	fingerprint  string // list: the pin of the certificate of an external server at url
	passwordFile string // list: the controller's password
}

// runFloor is the -floor process: it prints one floorResult, or, serving, the bus's address
// until stdin closes.
func runFloor(ctx context.Context, a floorArgs, stdin io.Reader, stdout io.Writer) error {
	var (
		res floorResult
		err error
	)
	switch a.kind {
	case "create":
		res, err = floorCreate(ctx, a)
	case "list":
		res, err = floorList(ctx, a)
	case "serve":
		return floorServe(ctx, a, stdin, stdout)
	default:
		return fmt.Errorf("-floor %q: want create, list or serve", a.kind)
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(res)
}

// floorAccounts configures the floor's bus as meshctl's (the MESH account with JetStream,
// users that must log in) with one unrestricted user: the floor measures JetStream, not
// permissions or plans.
const floorAccounts = `accounts {
  ` + render.Account + ` {
    jetstream: enabled
    users = [ { user: floor, password: floor } ]
  }
}
`

// floorCreate starts an embedded bus in a.dir, or uses the one a floor process serves at
// a.url, and creates the mesh's streams, then its consumers, 16 calls in flight, timing the
// creation alone. It exits without stopping a bus of its own (the caller puts the store
// aside): the stop is not part of the floor.
func floorCreate(ctx context.Context, a floorArgs) (floorResult, error) {
	m, err := model.Load(a.mesh)
	if err != nil {
		return floorResult{}, err
	}
	d := render.Derive(m)
	url := a.url
	if url == "" {
		e, err := bus.StartEmbedded(ctx, bus.EmbeddedOptions{StateDir: a.dir, Listen: "127.0.0.1:-1", InitialAccounts: []byte(floorAccounts)})
		if err != nil {
			return floorResult{}, err
		}
		url = e.URL()
	}
	nc, err := nats.Connect(url, nats.UserInfo("floor", "floor"))
	if err != nil {
		return floorResult{}, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return floorResult{}, err
	}
	// A consumer is a directory and files in the store: the writeback of what came before
	// would otherwise land in the measurement.
	syscall.Sync()
	start := time.Now()
	if err := each(d.Streams, func(cfg jetstream.StreamConfig) error {
		_, err := js.CreateStream(ctx, cfg)
		return err
	}); err != nil {
		return floorResult{}, err
	}
	if err := each(d.Consumers, func(c render.Consumer) error {
		var err error
		if c.Config.DeliverSubject == "" {
			_, err = js.CreateConsumer(ctx, c.Stream, c.Config)
		} else {
			_, err = js.CreatePushConsumer(ctx, c.Stream, c.Config)
		}
		return err
	}); err != nil {
		return floorResult{}, err
	}
	return floorResult{NS: time.Since(start).Nanoseconds(), Objects: len(d.Streams) + len(d.Consumers)}, nil
}

// floorServe starts an embedded bus in a.dir configured as the create floor's, prints its
// address as one line of JSON, and serves until its standard input closes: the bus of the
// floor a bare client meets when another process serves the bus, as `watch` does. It exits
// without stopping the bus.
func floorServe(ctx context.Context, a floorArgs, stdin io.Reader, stdout io.Writer) error {
	e, err := bus.StartEmbedded(ctx, bus.EmbeddedOptions{StateDir: a.dir, Listen: "127.0.0.1:-1", InitialAccounts: []byte(floorAccounts)})
	if err != nil {
		return err
	}
	if err := json.NewEncoder(stdout).Encode(map[string]string{"url": e.URL()}); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, stdin)
	return nil
}

// floorList lists every stream of the bus at a.url with the library's pager, and each
// stream's consumers page after page by the CONSUMER.LIST request, 16 streams at a time,
// as the controller: what a bare client with meshctl's own permissions does to read the
// bus a diff reads.
func floorList(ctx context.Context, a floorArgs) (floorResult, error) {
	nc, err := dialController(ctx, busclient.Target{URL: a.url, Fingerprint: a.fingerprint}, a.passwordFile)
	if err != nil {
		return floorResult{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return floorResult{}, err
	}
	start := time.Now()
	var names []string
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		names = append(names, info.Config.Name)
	}
	if err := l.Err(); err != nil {
		return floorResult{}, err
	}
	var listed atomic.Int64
	err = each(names, func(s string) error {
		for offset := 0; ; {
			req, _ := json.Marshal(map[string]int{"offset": offset})
			msg, err := nc.RequestWithContext(ctx, "$JS.API.CONSUMER.LIST."+s, req)
			if err != nil {
				return err
			}
			var page struct {
				Total     int                       `json:"total"`
				Consumers []*jetstream.ConsumerInfo `json:"consumers"`
			}
			if err := json.Unmarshal(msg.Data, &page); err != nil {
				return err
			}
			offset += len(page.Consumers)
			if len(page.Consumers) == 0 || offset >= page.Total {
				listed.Add(int64(offset))
				return nil
			}
		}
	})
	return floorResult{NS: time.Since(start).Nanoseconds(), Objects: len(names) + int(listed.Load())}, err
}

// dialController connects to the bus at t as meshctl's controller does (busclient.Dial: the inbox
// it is granted, an external server's certificate pinned), with the password its state
// directory holds.
func dialController(ctx context.Context, t busclient.Target, passwordFile string) (*nats.Conn, error) {
	pw, err := os.ReadFile(passwordFile)
	if err != nil {
		return nil, err
	}
	c, err := busclient.Dial(ctx, t, busclient.Credential{User: render.ControllerUser, Password: strings.TrimSpace(string(pw))},
		nats.Timeout(30*time.Second))
	if err != nil {
		return nil, err
	}
	return c.Conn, nil
}

// inFlight is how many calls a floor keeps in flight: as many as an apply does.
const inFlight = 16

// each runs do for every item with inFlight calls at a time and returns every error.
func each[T any](items []T, do func(T) error) error {
	sem := make(chan struct{}, inFlight)
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
