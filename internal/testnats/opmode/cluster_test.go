package opmode

import (
	"os"
	"testing"
	"time"

	"github.com/meshbus/meshctl/internal/testnats"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testnats.RemoveBuiltServer()
	os.Exit(code)
}

// TestOperatorIsWhatTheCLIMakes holds the store's layout the helpers read: the operator names
// its SYSTEM account, has a signing key whose seed the keys hold, and the system user and
// OTHER's user have creds.
func TestOperatorIsWhatTheCLIMakes(t *testing.T) {
	t.Parallel()
	o := NewOperator(t, "LAYOUT")
	pub, err := o.SigningKey(t).PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	opJWT, err := os.ReadFile(o.JWTFile)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := jwt.DecodeOperatorClaims(string(opJWT))
	if err != nil {
		t.Fatal(err)
	}
	if !claims.SigningKeys.Contains(pub) {
		t.Errorf("the signing key read from the store, %s, is not one of the operator's %v", pub, claims.SigningKeys)
	}
	if o.SystemAccount == "" || o.SystemAccount != claims.SystemAccount {
		t.Errorf("system account %q; the operator names %q", o.SystemAccount, claims.SystemAccount)
	}
	for _, creds := range []string{o.SystemUserCreds, o.OtherUserCreds} {
		b, err := os.ReadFile(creds)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := jwt.ParseDecoratedJWT(b); err != nil {
			t.Errorf("%s holds no user JWT: %v", creds, err)
		}
	}
}

// TestClusterServesOtherOnEveryServer holds the cluster as later tests use it: OTHER's user
// logs in on every server and its requests cross the routes, and a stopped server comes back
// on its own ports with its config loaded anew.
func TestClusterServesOtherOnEveryServer(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, ClusterOptions{})
	if got := c.Names(); len(got) != 3 {
		t.Fatalf("servers %v; want 3", got)
	}
	responder := c.ConnectOther(c.Servers[0])
	if _, err := responder.Subscribe("other.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		t.Fatal(err)
	}
	if err := responder.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, srv := range c.Servers {
		waitForReply(t, c.ConnectOther(srv), "other.echo")
	}

	before, err := c.Servers[2].ConfigLoadTime()
	if err != nil {
		t.Fatal(err)
	}
	if c.Servers[2].PID() == 0 {
		t.Fatal("a running server has no process id")
	}
	c.Stop(c.Servers[2])
	if c.Servers[2].Running() || c.Servers[2].PID() != 0 {
		t.Fatal("a stopped server says it runs")
	}
	c.Start(c.Servers[2])
	after, err := c.Servers[2].ConfigLoadTime()
	if err != nil {
		t.Fatal(err)
	}
	if !after.After(before) {
		t.Errorf("config_load_time %s after a restart; was %s", after, before)
	}
	waitForReply(t, c.ConnectOther(c.Servers[2]), "other.echo")
}

// waitForReply asks subject until it is answered: the responder's interest reaches another
// server's routes a moment after its flush.
func waitForReply(t *testing.T, nc *nats.Conn, subject string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := nc.Request(subject, []byte("ping"), 2*time.Second)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not answered through %s: %v", subject, nc.ConnectedUrl(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
