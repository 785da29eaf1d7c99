package watch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
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

// controllerEvents collects what watch's controller loop did.
type controllerEvents struct {
	mu     sync.Mutex
	events []controller.Event
}

func (c *controllerEvents) observe(e controller.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, e)
}

func (c *controllerEvents) has(match func(controller.Event) bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.events {
		if match(e) {
			return true
		}
	}
	return false
}

// The controller's credential rotated while watch runs (in another terminal): the reconcile
// session comes back with the new one, and so does the controller loop, which goes on taking
// the nodes' reports instead of knocking with the old password for ever.
func TestTheControllerLoopFollowsItsCredentialRotated(t *testing.T) {
	t.Parallel()
	hups := realSignals(t)
	events := &controllerEvents{}
	h := startWatch(t, quickstart(t), func(c *Config) {
		c.Hup, c.Resync, c.OnController = hups, 200*time.Millisecond, events.observe
	})
	h.waitFor(0, "applying the quickstart at start", is(TriggerStart, OutcomeOK))
	passwordFile := filepath.Join(h.stateDir, "controller.password")
	before, err := os.ReadFile(passwordFile)
	if err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	m, st := h.anotherTerminal()
	node, err := st.Mint(ctx, []string{render.NodeUser("alpha")}, bcrypt.MinCost, "credentials issue")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reconcile.RotateController(ctx, m, st, bcrypt.MinCost); err != nil {
		t.Fatal(err)
	}
	if after, err := os.ReadFile(passwordFile); err != nil || bytes.Equal(before, after) {
		t.Fatalf("controller.password is still the previous one (%v)", err)
	}
	h.waitFor(h.mark(), "reconciling with the new credential", is(TriggerResync, OutcomeNoop))

	var alpha *host.Host
	testwait.Until(t, "node alpha joining", func() error {
		jctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		alpha, err = host.Join(jctx, host.Membership{Address: h.busURL(), User: render.NodeUser("alpha"), Password: node[render.NodeUser("alpha")]})
		return err
	})
	defer alpha.Close()
	report, _ := json.Marshal(wire.Report{Generation: 0})
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := alpha.Report(pctx, "alpha", report); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the controller loop taking node alpha's report", func() error {
		if !events.has(func(e controller.Event) bool { return e.Kind == controller.KindReport && e.Node == "alpha" }) {
			return fmt.Errorf("not taken")
		}
		return nil
	})
}
