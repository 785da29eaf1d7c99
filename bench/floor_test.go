package main

import (
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/bench/floor"
	"github.com/meshbus/meshctl/bench/meshgen"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// The served create floor creates every object of the mesh on a bus another floor serves,
// and makes none on a bus of its own.
func TestServedFloorCreatesOnTheServedBus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g := meshgen.Scaled(20)
	desc := filepath.Join(t.TempDir(), "mesh")
	if err := g.Write(desc); err != nil {
		t.Fatal(err)
	}
	m, err := model.Parse(g.Files())
	if err != nil {
		t.Fatal(err)
	}
	d := render.Derive(m)

	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	served := make(chan error, 1)
	go func() {
		served <- runFloor(ctx, floorArgs{kind: "serve", dir: filepath.Join(t.TempDir(), "served")}, stdinR, stdoutW)
	}()
	var addr struct {
		URL string `json:"url"`
	}
	if err := json.NewDecoder(stdoutR).Decode(&addr); err != nil {
		t.Fatalf("the serving floor printed no address: %v", err)
	}

	res, err := floorCreate(ctx, floorArgs{kind: "create", mesh: desc, url: addr.URL})
	if err != nil {
		t.Fatal(err)
	}
	if want := len(d.Streams) + len(d.Consumers); res.Objects != want || res.NS <= 0 {
		t.Fatalf("created %d objects in %dns; want %d, in some time", res.Objects, res.NS, want)
	}
	// Created there, not on a bus of its own: the served bus holds them all.
	nc, err := floor.Connect(addr.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	streams := js.ListStreams(ctx)
	for info := range streams.Info() {
		found += 1 + info.State.Consumers
	}
	if err := streams.Err(); err != nil {
		t.Fatal(err)
	}
	if found != res.Objects {
		t.Errorf("the served bus holds %d streams and consumers; the floor created %d", found, res.Objects)
	}
	if err := stdinW.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatalf("serving: %v", err)
	}
}
