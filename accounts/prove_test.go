package accounts

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/internal/testwait"
)

// A server whose config names no user lets every login in, the generation principal's with
// any password among them: such a login proves no file, and a reload the server refused (its
// users never loaded) must not read as one it took.
func TestALoginToAServerWithNoUsersProvesNothing(t *testing.T) {
	t.Parallel()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(testwait.Limit) {
		t.Fatal("the test's server did not start")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit)
	defer cancel()
	err = proveOnce(ctx, busclient.Target{URL: s.ClientURL()}, generation{Password: "not-any-file's"})
	if !errors.Is(err, errNotServed) {
		t.Fatalf("a login to a server that asks for none proved a file: %v", err)
	}
}
