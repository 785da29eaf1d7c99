package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/host/hosttest"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/wire"
)

// A node's own credential cannot take over its re-enrolment (issue 22, item 2). Once an
// operator issued enrol.alpha for an enrolled node, node.alpha could publish an enrolment
// request with a key of its choosing, and the controller replaced the node's key and password
// with it, using up the fresh enrolment credential and cutting off the real agent. As a stock
// nats.go client holding node.alpha's password — the attacker's view, nothing of meshctl's
// client — its enrolment request is refused by the server and never reaches CONTROL, while its
// report, one of its jobs, is still taken.
func TestANodeCannotAskToEnrolItself(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mesh.yaml"), []byte("nodes:\n  - name: alpha\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := hosttest.Start(t, dir)
	const node = "alpha"
	user := render.NodeUser(node)

	refused := make(chan error, 16)
	nc, err := nats.Connect(b.Cluster.Servers[0].URL, nats.UserInfo(user, b.Membership(user).Password),
		nats.CustomInboxPrefix(render.Inbox(user)), nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case refused <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("joining as %s with a stock client: %v", user, err)
	}
	defer nc.Close()

	report := token("report")
	if err := nc.Publish(render.ReportSubject(node), report); err != nil {
		t.Fatal(err)
	}
	// The takeover: an answer address under the enrolment identity's inbox, as a real request
	// carries, and a key the attacker holds the private half of.
	takeover, _ := json.Marshal(wire.EnrolRequest{Reply: render.Inbox(render.EnrolUser(node)) + ".taken", Key: bytes.Repeat([]byte{7}, 32)})
	if err := nc.Publish(render.EnrolSubject(node), takeover); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	select {
	case err := <-refused:
		if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), `"`+render.EnrolSubject(node)+`"`) {
			t.Fatalf("the server said %v, not a permission violation for publishing to %s", err, render.EnrolSubject(node))
		}
		t.Logf("refused: %v", err)
	case <-time.After(testwait.Limit):
		t.Fatalf("%s published an enrolment request to %s and the server did not refuse it", user, render.EnrolSubject(node))
	}
	select {
	case err := <-refused:
		t.Fatalf("a second refusal, of a job of the node's: %v", err)
	default:
	}

	// CONTROL holds the node's report and no enrolment request of its: the controller has
	// nothing to accept.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := b.MustJoin(t, render.ControllerUser).JetStream().Stream(ctx, render.StreamControl)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("mesh.control."+node+".>"))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[render.EnrolSubject(node)]; n != 0 {
		t.Errorf("CONTROL holds %d enrolment request(s) from %s", n, user)
	}
	if n := info.State.Subjects[render.ReportSubject(node)]; n != 1 {
		t.Errorf("CONTROL holds %d report(s) of %s, want its one: %v", n, node, info.State.Subjects)
	}
}
