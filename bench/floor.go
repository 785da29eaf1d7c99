package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/bench/floor"
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

// floorCreate starts an embedded bus in a.dir, or uses the one a floor process serves at
// a.url, and creates the mesh's streams, then its consumers (floor.Create), timing the
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
		e, err := floor.StartBus(ctx, a.dir)
		if err != nil {
			return floorResult{}, err
		}
		url = e.URL()
	}
	nc, err := floor.Connect(url)
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
	if err := floor.Create(ctx, js, d); err != nil {
		return floorResult{}, err
	}
	return floorResult{NS: time.Since(start).Nanoseconds(), Objects: len(d.Streams) + len(d.Consumers)}, nil
}

// floorServe starts an embedded bus in a.dir configured as the create floor's, prints its
// address as one line of JSON, and serves until its standard input closes: the bus of the
// floor a bare client meets when another process serves the bus, as `watch` does. It exits
// without stopping the bus.
func floorServe(ctx context.Context, a floorArgs, stdin io.Reader, stdout io.Writer) error {
	e, err := floor.StartBus(ctx, a.dir)
	if err != nil {
		return err
	}
	if err := json.NewEncoder(stdout).Encode(map[string]string{"url": e.URL()}); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, stdin)
	return nil
}

// floorList lists every stream of the bus at a.url and each stream's consumers, in pages
// (floor.List), as the controller: what a bare client with meshctl's own permissions does to
// read the bus a diff reads.
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
	objects, err := floor.List(ctx, js, nc)
	return floorResult{NS: time.Since(start).Nanoseconds(), Objects: objects}, err
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
