package bus

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/internal/testwait"
)

func TestParseServerViolation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		line string
		want busclient.PermissionError
		ok   bool
	}{
		{`127.0.0.1:40452 - cid:6 - "v1.55.0:go" - "MESH/user:two.shop" - Publish Violation - Subject "mesh.mod.telegram.tool.status"`,
			busclient.PermissionError{User: "two.shop", Op: busclient.OpPublish, Subject: "mesh.mod.telegram.tool.status"}, true},
		{`127.0.0.1:40452 - cid:6 - "v1.55.0:go" - "MESH/user:one.telegram" - Subscription Violation - Subject "_DELIVER.SEAT_X_worker", Queue: "elsewhere", SID 1`,
			busclient.PermissionError{User: "one.telegram", Op: busclient.OpSubscribe, Subject: "_DELIVER.SEAT_X_worker", Queue: "elsewhere"}, true},
		{`127.0.0.1:1 - cid:2 - "MESH/user:node.one" - Subscription Violation - Subject "mesh.control.>", SID 4`,
			busclient.PermissionError{User: "node.one", Op: busclient.OpSubscribe, Subject: "mesh.control.>"}, true},
		{`127.0.0.1:1 - cid:2 - "my \"host\"" - "MESH/user:two.audit" - Publish Violation - Reply "_INBOX.x"`,
			busclient.PermissionError{User: "two.audit", Op: busclient.OpReply, Subject: "_INBOX.x"}, true},
		{`127.0.0.1:1 - cid:2 - Publish Violation - Subject "x"`, busclient.PermissionError{}, false}, // no user: not logged in
		{`Server is ready`, busclient.PermissionError{}, false},
	} {
		got, ok := ParseServerViolation(c.line, nil)
		if ok != c.ok || got != c.want {
			t.Errorf("ParseServerViolation(%s) = %+v, %v; want %+v, %v", c.line, got, ok, c.want, c.ok)
		}
	}
}

// syncBuffer is a log destination the server's goroutines and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The embedded server's log reaches meshctl's structured log: its banner at debug, nothing at
// info, and a refusal handed over, named by user and subject, as it happens.
func TestTheEmbeddedServerLogsIntoMeshctlsLog(t *testing.T) {
	t.Parallel()
	var out syncBuffer
	refused := make(chan busclient.PermissionError, 10)
	log := &ServerLog{
		Log:       slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})),
		OnRefusal: func(r busclient.PermissionError) { refused <- r },
	}
	shop := testUser{name: "two.shop", password: "pw", pub: []string{"mesh.mod.shop.event.>"}, sub: []string{"_INBOX.two.shop.>"}}
	e, err := StartEmbedded(context.Background(), EmbeddedOptions{StateDir: t.TempDir(), Listen: "127.0.0.1:-1",
		InitialAccounts: accountsFor(t, shop), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	c := dialAs(t, e.URL(), shop)
	if err := c.Publish("mesh.mod.telegram.tool.status", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-refused:
		if want := (busclient.PermissionError{User: "two.shop", Op: busclient.OpPublish, Subject: "mesh.mod.telegram.tool.status"}); r != want {
			t.Errorf("refusal %+v, want %+v", r, want)
		}
	case <-time.After(testwait.Limit):
		t.Fatalf("no refusal handed over; the log:\n%s", out.String())
	}
	text := out.String()
	if !strings.Contains(text, `level=DEBUG msg="bus: Server is ready"`) {
		t.Errorf("the server's notices are not in the log at debug:\n%s", text)
	}
	if strings.Contains(text, "level=INFO") || strings.Contains(text, "level=ERROR") {
		t.Errorf("the server's noise or the refusal is logged above debug:\n%s", text)
	}
}
