package watch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/controller"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/wire"
)

// The heartbeat file is written when a node is first heard, goes silent or comes back, and
// otherwise once a minute: ten minutes of a hundred nodes beating every ten seconds (6,000
// heartbeats) are a dozen writes, and each transition is in the file within a tick.
func TestTheHeartbeatFileIsWrittenAtABoundedRate(t *testing.T) {
	t.Parallel()
	r := newHeartbeatRecorder(HeartbeatRecordEvery)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	heard := map[string]controller.Seen{}
	writes := 0
	var last Heartbeats
	tickAt := func(now time.Time) bool {
		h, due := r.next(now, heard)
		if due {
			writes++
			r.wrote(h)
			last = h
		}
		return due
	}
	const nodes = 100
	for now := start; now.Before(start.Add(10 * time.Minute)); now = now.Add(heartbeatTick) {
		if now.Sub(start)%(10*time.Second) == 0 {
			for i := range nodes {
				heard[fmt.Sprintf("n%d", i)] = controller.Seen{At: now}
			}
		}
		tickAt(now)
	}
	if writes < 10 || writes > 12 {
		t.Errorf("%d writes for 6,000 heartbeats over ten minutes, want the first and one a minute (10 to 12)", writes)
	}
	if len(last.Nodes) != nodes {
		t.Errorf("the file names %d nodes, want %d", len(last.Nodes), nodes)
	}

	// n0 goes silent: the file says so within a tick of its crossing StaleAfter, before the
	// minute is up; and again within a tick of its coming back.
	now := last.WrittenAt
	silentSince := heard["n0"].At
	var wentStale time.Time
	for now = now.Add(heartbeatTick); now.Sub(silentSince) <= StaleAfter+heartbeatTick; now = now.Add(heartbeatTick) {
		if now.Sub(start)%(10*time.Second) == 0 {
			for i := 1; i < nodes; i++ {
				heard[fmt.Sprintf("n%d", i)] = controller.Seen{At: now}
			}
		}
		if tickAt(now) && last.Stale("n0") {
			wentStale = now
			break
		}
	}
	if wentStale.IsZero() || !last.Stale("n0") || last.Stale("n1") {
		t.Fatalf("n0 silent for %s: the file (written %s) says stale=%v, want n0 stale within a tick of %s", now.Sub(silentSince), last.WrittenAt, last.Stale("n0"), StaleAfter)
	}
	now = now.Add(heartbeatTick)
	heard["n0"] = controller.Seen{At: now}
	if !tickAt(now) || last.Stale("n0") {
		t.Errorf("n0 came back: the file was not rewritten at the next tick")
	}
	// No node ever heard: no file, however long.
	if _, due := newHeartbeatRecorder(HeartbeatRecordEvery).next(now.Add(time.Hour), nil); due {
		t.Error("a file was due with no node ever heard")
	}
}

// A heartbeat a node says while watch runs reaches the heartbeat file in the state directory,
// where `meshctl status` reads it; the file is the owner's alone.
func TestAHeartbeatReachesTheFileStatusReads(t *testing.T) {
	t.Parallel()
	hups := realSignals(t) // SyncAccounts asks the process serving the bus to reload: this one
	h := startWatch(t, quickstart(t), func(c *Config) { c.Hup, c.heartbeatTick = hups, 20*time.Millisecond })
	h.waitFor(0, "applying the quickstart at start", is(TriggerStart, OutcomeOK))
	if _, err := ReadHeartbeats(h.stateDir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a heartbeat file before any heartbeat: %v", err)
	}
	ctx := context.Background()
	m, st := h.anotherTerminal()
	node, err := st.Mint(ctx, []string{render.NodeUser("alpha")}, bcrypt.MinCost, "credentials issue")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reconcile.SyncAccounts(ctx, m, st); err != nil {
		t.Fatal(err)
	}
	var alpha *host.Host
	testwait.Until(t, "node alpha joining", func() error {
		jctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		alpha, err = host.Join(jctx, host.Membership{Address: h.busURL(), User: render.NodeUser("alpha"), Password: node[render.NodeUser("alpha")]})
		return err
	})
	defer alpha.Close()
	beat, _ := json.Marshal(wire.Heartbeat{At: time.Now(), Generation: 3})
	testwait.Until(t, "node alpha's heartbeat in the file", func() error {
		// Said again until heard: the controller may not be subscribed yet, and a heartbeat
		// is core NATS, heard by whoever listens at the time.
		if err := alpha.Heartbeat(ctx, "alpha", beat); err != nil {
			return err
		}
		got, err := ReadHeartbeats(h.stateDir)
		if err != nil {
			return err
		}
		if s, ok := got.Nodes["alpha"]; !ok || s.Generation != 3 || got.Stale("alpha") || !got.Current(time.Now()) {
			return fmt.Errorf("the file says %+v", got)
		}
		return nil
	})
	info, err := os.Stat(filepath.Join(h.stateDir, HeartbeatsFileName))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("the heartbeat file: %v, mode %v, want 0600", err, info.Mode().Perm())
	}
}
