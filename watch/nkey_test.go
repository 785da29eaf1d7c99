package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// The server names a refused nkey host by its public key; watch's log, its metric and the
// refusal recorded for `meshctl status` name the principal, and never the key or the seed.
func TestARefusedNkeyHostIsNamedByItsPrincipal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stateDir := t.TempDir()
	st, err := state.Open(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	seeds, err := st.MintNkeys(ctx, []string{"alpha.shop"}, "credentials issue")
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.FromSeed([]byte(seeds["alpha.shop"]))
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	logs := &capturedLog{t: t}
	files := quickstart(t)
	files["bus.yaml"] = "bus:\n  listen: 127.0.0.1:0\n  auth: nkey\n"
	h := startWatch(t, files, func(c *Config) {
		c.StateDir = stateDir
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	h.waitFor(0, "applying the description at start", is(TriggerStart, OutcomeOK))
	url, ok := bus.RunningEmbedded(stateDir)
	if !ok {
		t.Fatal("no embedded bus")
	}
	refused := make(chan error, 16)
	nc, err := nats.Connect(url, nats.Nkey(pub, kp.Sign), nats.CustomInboxPrefix(render.Inbox("alpha.shop")),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case refused <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("alpha.shop cannot log in with its seed: %v", err)
	}
	defer nc.Close()
	subject := render.ModuleTool("postman", "status")
	if err := nc.Publish(subject, []byte("?")); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the bus refusing alpha.shop", func() error {
		select {
		case err := <-refused:
			if errors.Is(err, nats.ErrPermissionViolation) {
				return nil
			}
			return err
		default:
			return errors.New("no refusal yet")
		}
	})
	testwait.Until(t, "the refusal logged by principal", func() error {
		if len(logs.lines("level=WARN", "user=alpha.shop", "subject="+subject)) == 0 {
			return fmt.Errorf("no line in watch's log names alpha.shop's refusal of %s", subject)
		}
		return nil
	})
	testwait.Until(t, "the refusal recorded by principal", func() error {
		st, err := state.Open(stateDir)
		if err != nil {
			return err
		}
		defer st.Close()
		rs, err := st.Refusals(ctx, 0)
		if err != nil {
			return err
		}
		if len(rs) != 1 || rs[0].User != "alpha.shop" || rs[0].Subject != subject {
			return fmt.Errorf("recorded %+v", rs)
		}
		return nil
	})
	for _, l := range logs.lines("level=WARN") {
		if strings.Contains(l, pub) || strings.Contains(l, seeds["alpha.shop"]) {
			t.Errorf("watch's warning names the nkey, not the principal: %s", l)
		}
	}
}
