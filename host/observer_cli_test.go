package host_test

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/meshbus/meshctl/host/hosttest"
	"github.com/meshbus/meshctl/internal/testnats/opmode"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// cliTimeout bounds one nats CLI command. A refused JetStream request makes the CLI wait out
// its own 5s timeout before it exits; nothing here waits longer but a hang.
const cliTimeout = 60 * time.Second

// natsCLI runs the nats CLI as observer alice of b, the way docs/observers.md shows it: the
// user and password from the membership in the environment, the inbox prefix the mesh grants
// on the command line. Its home is empty, so no saved context of the machine's is read.
func natsCLI(t *testing.T, b *hosttest.Mesh, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	mem := b.Membership(alice)
	home := t.TempDir()
	cmd := exec.CommandContext(ctx, opmode.NatsCLIBinary(t),
		append([]string{"--server", mem.Address, "--inbox-prefix", render.Inbox(alice)}, args...)...)
	cmd.Env = []string{"HOME=" + home, "XDG_CONFIG_HOME=" + home, "NATS_USER=" + alice, "NATS_PASSWORD=" + mem.Password}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// An observer runs the nats CLI's read-only commands on the mesh — stream report, stream
// info, consumer ls, consumer report, consumer info, account info, a subscription to the
// heartbeats — and
// each of what it is not for is refused by the server, which the CLI reports by subject and
// exits 1: a publish to a mesh subject, a consumer created, a stream's or a consumer's
// deletion, a purge, a message read or pulled, the store's bucket, and another principal's
// inbox.
func TestAnObserverRunsTheNatsCLI(t *testing.T) {
	t.Parallel()
	opmode.NatsCLIBinary(t) // built once, before the subtests run it in parallel
	b := hosttest.StartConsumers(t, matrixMesh, model.ConsumersPull)
	events := render.StreamEvents
	// What the CLI prints, the server's own words for a refusal among it.
	for _, c := range []struct {
		name string
		args []string
		want []string // on stdout, each
	}{
		{"stream report", []string{"stream", "report"}, streamNames(b)},
		{"stream info", []string{"stream", "info", events}, []string{events}},
		{"consumer ls", []string{"consumer", "ls", events}, []string{"two_audit", "two_shop"}},
		{"consumer report", []string{"consumer", "report", events}, []string{"two_audit", "two_shop"}},
		{"consumer info", []string{"consumer", "info", events, "two_audit"}, []string{"two_audit", "Unprocessed Messages"}},
		{"account info", []string{"account", "info"}, []string{"User: " + alice, "Account: " + render.Account}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			out, errOut, err := natsCLI(t, b, c.args...)
			if err != nil || strings.Contains(errOut, "Violation") {
				t.Fatalf("nats %s: %v\n%s%s", strings.Join(c.args, " "), err, out, errOut)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("nats %s does not show %q:\n%s", strings.Join(c.args, " "), w, out)
				}
			}
		})
	}
	t.Run("sub heartbeats", func(t *testing.T) {
		t.Parallel()
		node := b.MustJoin(t, render.NodeUser("one"))
		done := make(chan struct{})
		beating := make(chan struct{})
		// The agent heartbeats on its interval; here often, until the CLI has heard one.
		go func() {
			defer close(beating)
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				ctx, cancel := context.WithTimeout(context.Background(), jobTimeout)
				_ = node.Heartbeat(ctx, "one", token("alive"))
				cancel()
				select {
				case <-done:
					return
				case <-tick.C:
				}
			}
		}()
		out, errOut, err := natsCLI(t, b, "sub", render.HeartbeatSubjects, "--count", "1")
		close(done)
		<-beating
		if err != nil || !strings.Contains(out, render.HeartbeatSubject("one")) {
			t.Fatalf("nats sub %s: %v\n%s%s", render.HeartbeatSubjects, err, out, errOut)
		}
	})
	for _, c := range []struct {
		name, refused string // what the server refuses, as the CLI quotes it
		args          []string
	}{
		{"pub an event", `Publish to "` + orderPlaced + `"`, []string{"pub", orderPlaced, "x"}},
		{"pub a heartbeat", `Publish to "` + render.HeartbeatSubject("one") + `"`, []string{"pub", render.HeartbeatSubject("one"), "x"}},
		{"pub work", `Publish to "` + sendWork + `"`, []string{"pub", sendWork, "x"}},
		{"consumer add", `Publish to "$JS.API.CONSUMER.CREATE.` + events + `.peek"`, []string{"consumer", "add", events, "peek", "--pull", "--defaults"}},
		{"consumer rm", `Publish to "$JS.API.CONSUMER.DELETE.` + events + `.two_audit"`, []string{"consumer", "rm", events, "two_audit", "-f"}},
		{"consumer next", `Publish to "` + render.PullSubject(events, "two_audit") + `"`, []string{"consumer", "next", events, "two_audit"}},
		{"stream rm", `Publish to "$JS.API.STREAM.DELETE.` + events + `"`, []string{"stream", "rm", events, "-f"}},
		{"stream purge", `Publish to "$JS.API.STREAM.PURGE.` + events + `"`, []string{"stream", "purge", events, "-f"}},
		{"stream get", `Publish to "$JS.API.STREAM.MSG.GET.` + events + `"`, []string{"stream", "get", events, "1"}},
		{"kv get", `Publish to "$JS.API.STREAM.INFO.` + render.StateStream + `"`, []string{"kv", "get", render.StateBucket, "credential.two.shop"}},
		{"sub another's inbox", `Subscription to "_INBOX.two.shop.>"`, []string{"sub", "_INBOX.two.shop.>"}},
		{"sub the events", `Subscription to "mesh.mod.>"`, []string{"sub", "mesh.mod.>"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			out, errOut, err := natsCLI(t, b, c.args...)
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(errOut, "Permissions Violation for "+c.refused) {
				t.Fatalf("nats %s: got %v, want exit 1 with the server's refusal of %s:\n%s%s", strings.Join(c.args, " "), err, c.refused, out, errOut)
			}
		})
	}
}

// streamNames are the streams the mesh derives.
func streamNames(b *hosttest.Mesh) []string {
	var out []string
	for _, s := range b.Desired.Streams {
		out = append(out, s.Name)
	}
	return out
}
