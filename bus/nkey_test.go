package bus

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// The server names an nkey client by its public key; the lookup handed in names it by its
// principal, and a key it does not know stays the server's label, never a user's name.
func TestParseServerViolationNamesAnNkeyUsersPrincipal(t *testing.T) {
	t.Parallel()
	const key = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"
	principals := func(k string) (string, bool) { return "two.shop", k == key }
	line := `127.0.0.1:40452 - cid:6 - "v1.55.0:go" - "MESH/nkey:` + key + `" - Publish Violation - Subject "mesh.mod.telegram.tool.status"`
	for _, c := range []struct {
		principals Principals
		want       string
	}{
		{principals, "two.shop"},
		{func(string) (string, bool) { return "", false }, "nkey:" + key},
		{nil, "nkey:" + key},
	} {
		got, ok := ParseServerViolation(line, c.principals)
		if want := (busclient.PermissionError{User: c.want, Op: busclient.OpPublish, Subject: "mesh.mod.telegram.tool.status"}); !ok || got != want {
			t.Errorf("ParseServerViolation = %+v, %v; want %+v", got, ok, want)
		}
	}
	if _, ok := ParseServerViolation(`127.0.0.1:1 - cid:2 - "MESH/nkey:" - Publish Violation - Subject "x"`, principals); ok {
		t.Error("a violation of a client without a key was read as someone's")
	}
}

// A live server refusing an nkey user hands the refusal over named by the principal.
func TestTheEmbeddedServerNamesARefusedNkeyUserByItsPrincipal(t *testing.T) {
	t.Parallel()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	refused := make(chan busclient.PermissionError, 10)
	log := &ServerLog{
		Log:        slog.New(slog.DiscardHandler),
		OnRefusal:  func(r busclient.PermissionError) { refused <- r },
		Principals: func(k string) (string, bool) { return "two.shop", k == pub },
	}
	accounts := fmt.Sprintf("accounts {\n  MESH {\n    users = [\n      # user \"two.shop\"\n      { nkey: %q, permissions: {\n"+
		"        publish: { allow: [\"mesh.mod.shop.event.>\"] }\n        subscribe: { allow: [\"_INBOX.two.shop.>\"] }\n      } }\n    ]\n  }\n}\n", pub)
	e, err := StartEmbedded(context.Background(), EmbeddedOptions{StateDir: t.TempDir(), Listen: "127.0.0.1:-1",
		InitialAccounts: []byte(accounts), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	nc, err := nats.Connect(e.URL(), nats.Nkey(pub, kp.Sign), nats.CustomInboxPrefix("_INBOX.two.shop"))
	if err != nil {
		t.Fatalf("logging in with the seed: %v", err)
	}
	t.Cleanup(nc.Close)
	if err := nc.Publish("mesh.mod.telegram.tool.status", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-refused:
		if want := (busclient.PermissionError{User: "two.shop", Op: busclient.OpPublish, Subject: "mesh.mod.telegram.tool.status"}); r != want {
			t.Errorf("refusal %+v, want %+v", r, want)
		}
	case <-time.After(testwait.Limit):
		t.Fatal("no refusal handed over")
	}
}
