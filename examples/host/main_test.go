package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/host/hosttest"
	"github.com/meshbus/meshctl/internal/lockedbuf"
	"github.com/meshbus/meshctl/render"
)

// The README's walk-through, on the quickstart mesh: beta.postman follows shop's orders and holds
// the mailer seat. It prints and acks the order shop placed, takes the mail shop sent, reports
// the seat's `sent` event, which the controller follows, and leaves cleanly when interrupted,
// with nothing left unacknowledged.
func TestTheHostFollowsEventsAndTakesWork(t *testing.T) {
	t.Parallel()
	b := hosttest.Start(t, "../quickstart")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// What the operator does: issue the membership to a file.
	line, err := json.Marshal(b.Membership("beta.postman"))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "m.json")
	if err := os.WriteFile(file, line, 0o600); err != nil {
		t.Fatal(err)
	}

	// The shop places an order and sends mail, with the same program. Both wait in their
	// streams until the postman binds its consumers.
	shopFile := filepath.Join(t.TempDir(), "shop.json")
	if line, err := json.Marshal(b.Membership("alpha.shop")); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(shopFile, line, 0o600); err != nil {
		t.Fatal(err)
	}
	for subject, message := range map[string]string{
		render.ModuleEvent("shop", "order.placed"): "order-17",
		render.AcceptSubject("mailer", "send"):     "mail-17",
	} {
		var stderr bytes.Buffer
		if code := run(ctx, []string{"-membership", shopFile, "-publish", subject, "-message", message}, nil, io.Discard, &stderr); code != 0 {
			t.Fatalf("publishing %s as alpha.shop: exit %d: %s", subject, code, stderr.String())
		}
	}
	// And is refused what is not its job, by name.
	var stderr0 bytes.Buffer
	if code := run(ctx, []string{"-membership", shopFile, "-publish", render.SeatEvent("mailer", "sent")}, nil, io.Discard, &stderr0); code != 1 ||
		!strings.Contains(stderr0.String(), `may not publish to "mesh.seat.mailer.event.sent"`) {
		t.Errorf("the shop reporting the mailer's event: exit %d: %s", code, stderr0.String())
	}

	stdoutR, stdoutW := io.Pipe()
	var stderr lockedbuf.Buffer
	interrupt, stop := context.WithCancel(ctx)
	defer stop()
	code := make(chan int, 1)
	go func() {
		defer stdoutW.Close()
		code <- run(interrupt, []string{"-membership", file, "-seat", "mailer", "-emit", "sent"}, nil, stdoutW, &stderr)
	}()
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		for s := bufio.NewScanner(stdoutR); s.Scan(); {
			lines <- s.Text()
		}
	}()
	want := map[string]bool{
		"event mesh.mod.shop.event.order.placed order-17": false,
		"work mesh.seat.mailer.accept.send mail-17":       false,
	}
	for seen := 0; seen < len(want); {
		select {
		case l := <-lines:
			if done, ok := want[l]; ok && !done {
				want[l] = true
				seen++
			}
		case <-ctx.Done():
			t.Fatalf("the host printed only %v; its log:\n%s", want, stderr.String())
		}
	}

	// The seat's event reached the controller, which follows it.
	b.WaitControllerHears(ctx, t, render.SeatEvent("mailer", "sent"), "mail-17", stderr.String)

	stop() // Ctrl-C
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("the host exited %d; its log:\n%s", c, stderr.String())
		}
	case <-ctx.Done():
		t.Fatal("the host did not leave when interrupted")
	}
	controller := b.MustJoin(t, render.ControllerUser)
	for _, c := range []struct{ stream, consumer string }{
		{render.StreamEvents, "beta_postman"},
		{render.SeatStreamName("mailer"), render.WorkerConsumer("mailer")},
	} {
		info, err := host.ConsumerInfo(ctx, controller.JetStream(), c.stream, c.consumer)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending != 0 || info.NumPending != 0 {
			t.Errorf("%s/%s: %d unacknowledged, %d pending after the host left", c.stream, c.consumer, info.NumAckPending, info.NumPending)
		}
	}
	if log := stderr.String(); !strings.Contains(log, "joined") || !strings.Contains(log, "holding seat mailer") {
		t.Errorf("the host's log does not say it joined and holds the seat:\n%s", log)
	}
}

// Without a membership the host says what to do rather than dial.
func TestTheHostWantsAMembership(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	if code := run(context.Background(), nil, strings.NewReader(""), io.Discard, &stderr); code != 1 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(stderr.String(), "meshctl credentials issue") {
		t.Errorf("the error does not say how to get a membership: %s", stderr.String())
	}
	stderr.Reset()
	in := `{"address": "nats://127.0.0.1:1", "fingerprint": "", "user": "node.one", "password": "p"}`
	if code := run(context.Background(), nil, strings.NewReader(in), io.Discard, &stderr); code != 1 || !strings.Contains(stderr.String(), "not a module instance") {
		t.Errorf("a node's membership: exit %d, %s", code, stderr.String())
	}
}
