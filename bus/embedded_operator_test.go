package bus_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/bus"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const operatorTestServer = "meshctl-test"

// startOperatorBus starts the embedded bus of stateDir in operator mode, trusting o.
func startOperatorBus(t *testing.T, stateDir string, o accounts.Operator) *bus.Embedded {
	t.Helper()
	mode := o.OperatorMode()
	e, err := bus.StartEmbedded(context.Background(), bus.EmbeddedOptions{
		StateDir: stateDir, Listen: "127.0.0.1:-1", ServerName: operatorTestServer, Operator: &mode,
	})
	if err != nil {
		t.Fatalf("starting the embedded bus in operator mode: %v", err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

// loginWith connects to url as the holder of a creds file.
func loginWith(t *testing.T, url string, creds []byte) *nats.Conn {
	t.Helper()
	token, err := jwt.ParseDecoratedJWT(creds)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := jwt.ParseDecoratedUserNKey(creds)
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, nats.UserJWTAndSeed(token, string(seed)), nats.NoReconnect())
	if err != nil {
		t.Fatalf("logging in to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestEmbeddedBusInOperatorMode holds the embedded bus as bus.auth: jwt runs it: it starts
// from a fresh operator with no accounts file; the system user from the Operator's creds
// pushes a new JWT of the mesh's account, which the server applies (Status reads it back and
// the account's JetStream limits change); a user minted for the account logs in and keeps a
// stream; and across a restart, on the same preload, the server keeps the JWT pushed, the
// stream and its messages.
func TestEmbeddedBusInOperatorMode(t *testing.T) {
	t.Parallel()
	stateDir := t.TempDir()
	o, err := accounts.MakeOperator(filepath.Join(stateDir, "nsc"), "EMBEDDED", "")
	if err != nil {
		t.Fatal(err)
	}
	e := startOperatorBus(t, stateDir, o)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	conf, err := os.ReadFile(e.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	resolverDir := filepath.Join(stateDir, "bus", "jwt")
	for _, want := range []string{"operator: \"" + o.JWT + "\"", "system_account: \"" + o.SystemAccount + "\"", "type: full", "dir: \"" + resolverDir + "\""} {
		if !strings.Contains(string(conf), want) {
			t.Errorf("server.conf lacks %.60s…:\n%s", want, conf)
		}
	}
	if strings.Contains(string(conf), "include") {
		t.Errorf("server.conf in operator mode includes an accounts file:\n%s", conf)
	}
	if _, err := os.Stat(e.AccountsFile()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("accounts.conf written in operator mode (%v)", err)
	}
	if err := e.Reload(); !errors.Is(err, bus.ErrOperatorMode) {
		t.Errorf("Reload in operator mode: %v; want ErrOperatorMode", err)
	}
	if _, err := e.CheckAccounts([]byte("accounts {}")); !errors.Is(err, bus.ErrOperatorMode) {
		t.Errorf("CheckAccounts in operator mode: %v; want ErrOperatorMode", err)
	}

	user, err := o.Account.MintUser(o.UserSigner, "worker", accounts.Grants{Publish: []string{"$JS.API.>", "work.>"}, Subscribe: []string{"_INBOX.>"}})
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(loginWith(t, e.URL(), user.File))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "WORK", Subjects: []string{"work.>"}}); err != nil {
		t.Fatalf("the mesh account's user creating a stream: %v", err)
	}
	if _, err := js.Publish(ctx, "work.x", []byte("job")); err != nil {
		t.Fatal(err)
	}

	r := accounts.Resolver{Conn: loginWith(t, e.URL(), o.SystemCreds), Servers: []string{operatorTestServer}, Wait: 60 * time.Second}
	if st, err := r.Status(ctx, o.AccountJWT); err != nil || len(st.NotCurrent()) != 0 {
		t.Fatalf("the preloaded JWT: %+v (%v); want the server current", st, err)
	}
	limited := o.Account
	limited.JetStream.Streams = 7
	pushed, err := limited.Encode(o.Signer, o.AccountJWT, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Push(ctx, pushed)
	if err == nil {
		err = res.Err()
	}
	if err != nil {
		t.Fatalf("push: %v (%+v)", err, res)
	}
	if st, err := r.Status(ctx, pushed); err != nil || len(st.NotCurrent()) != 0 {
		t.Fatalf("after the push: %+v (%v); want the server current", st, err)
	}
	if info, err := js.AccountInfo(ctx); err != nil || info.Limits.MaxStreams != 7 {
		t.Fatalf("the account's JetStream limits after the push: %+v (%v); want 7 streams at most", info, err)
	}
	if _, err := os.Stat(filepath.Join(resolverDir, o.Account.PublicKey+".jwt")); err != nil {
		t.Errorf("the resolver keeps no JWT of the mesh's account under the state directory: %v", err)
	}

	// The restart preloads the Operator's older JWT again; the server keeps the newer.
	e.Shutdown()
	e = startOperatorBus(t, stateDir, o)
	r.Conn = loginWith(t, e.URL(), o.SystemCreds)
	js, err = jetstream.New(loginWith(t, e.URL(), user.File))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := r.Status(ctx, pushed); err != nil || len(st.NotCurrent()) != 0 {
		t.Fatalf("after a restart on the same preload: %+v (%v); want the JWT pushed", st, err)
	}
	stream, err := js.Stream(ctx, "WORK")
	if err != nil {
		t.Fatalf("the stream after a restart: %v", err)
	}
	if info, err := stream.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Fatalf("stream WORK after a restart: %+v (%v); want its message", info, err)
	}
}

// An operator-mode bus has no accounts file, so one given to start it with is refused, before
// anything is written.
func TestOperatorModeRefusesAnAccountsFile(t *testing.T) {
	t.Parallel()
	stateDir := t.TempDir()
	o, err := accounts.MakeOperator(filepath.Join(stateDir, "nsc"), "EMBEDDED", "")
	if err != nil {
		t.Fatal(err)
	}
	mode := o.OperatorMode()
	if e, err := bus.StartEmbedded(context.Background(), bus.EmbeddedOptions{
		StateDir: stateDir, Listen: "127.0.0.1:-1", Operator: &mode, InitialAccounts: []byte("accounts {}"),
	}); err == nil {
		e.Shutdown()
		t.Fatal("started in operator mode with an accounts file")
	}
	if _, err := os.Stat(filepath.Join(stateDir, "bus")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused start wrote the bus directory (%v)", err)
	}
}
