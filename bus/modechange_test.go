package bus_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/bus"
)

// startFileModeBus starts the embedded bus of stateDir on an accounts file whose account
// MESH has JetStream and the user u (password p).
func startFileModeBus(t *testing.T, stateDir string) *bus.Embedded {
	t.Helper()
	e, err := bus.StartEmbedded(context.Background(), bus.EmbeddedOptions{
		StateDir: stateDir, Listen: "127.0.0.1:-1",
		InitialAccounts: []byte("accounts {\n  MESH {\n    jetstream: enabled\n    users: [ { user: u, password: p } ]\n  }\n}\n"),
	})
	if err != nil {
		t.Fatalf("starting the embedded bus on an accounts file: %v", err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

// TestStreamsStayWithTheAccountTheServersLeave holds what a change of bus.auth between the
// file modes and jwt does to the mesh's streams on a server whose mode changes: JetStream
// keeps each account's streams under the account's name in its store (MESH in an accounts
// file, the account's public key in operator mode). A server restarted in operator mode
// does not show the MESH account's stream to the mesh's account, nor delete it: its files
// stay in the store, and the stream and its messages are back when the server returns to the
// accounts file. meshctl creates the mesh's streams anew, empty, in the account in use.
func TestStreamsStayWithTheAccountTheServersLeave(t *testing.T) {
	t.Parallel()
	stateDir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	e := startFileModeBus(t, stateDir)
	nc, err := nats.Connect(e.URL(), nats.UserInfo("u", "p"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "WORK", Subjects: []string{"work.>"}}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := js.Publish(ctx, "work.x", []byte("job")); err != nil {
			t.Fatal(err)
		}
	}
	nc.Close()
	e.Shutdown()
	streamDir := filepath.Join(stateDir, "bus", "jetstream", "jetstream", "MESH", "streams", "WORK")
	if _, err := os.Stat(streamDir); err != nil {
		t.Fatalf("the stream is not where JetStream keeps an account's streams: %v", err)
	}

	o, err := accounts.MakeOperator(filepath.Join(stateDir, "nsc"), "MOVED", "")
	if err != nil {
		t.Fatal(err)
	}
	op := startOperatorBus(t, stateDir, o)
	user, err := o.Account.MintUser(o.UserSigner, "worker", accounts.Grants{Publish: []string{"$JS.API.>"}, Subscribe: []string{"_INBOX.>"}})
	if err != nil {
		t.Fatal(err)
	}
	ojs, err := jetstream.New(loginWith(t, op.URL(), user.File))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ojs.Stream(ctx, "WORK"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("the MESH account's stream, seen from the operator's account: %v; want not found", err)
	}
	if info, err := ojs.AccountInfo(ctx); err != nil || info.Streams != 0 {
		t.Fatalf("the operator's account: %+v (%v); want no stream", info, err)
	}
	op.Shutdown()
	if _, err := os.Stat(streamDir); err != nil {
		t.Fatalf("the server in operator mode removed the MESH account's stream: %v", err)
	}

	back := startFileModeBus(t, stateDir)
	nc, err = nats.Connect(back.URL(), nats.UserInfo("u", "p"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "WORK")
	if err != nil {
		t.Fatalf("the stream after the return to the accounts file: %v", err)
	}
	if n := s.CachedInfo().State.Msgs; n != 3 {
		t.Fatalf("the stream holds %d messages after the round trip; want 3", n)
	}
}
