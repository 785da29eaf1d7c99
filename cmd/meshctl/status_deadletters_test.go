package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/host/hosttest"
	"github.com/meshbus/meshctl/internal/backoff"
	"github.com/meshbus/meshctl/internal/lockedbuf"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
	"github.com/meshbus/meshctl/wire"
)

// A message its consumer delivered max_deliver times without an acknowledgement is a dead
// letter: with `meshctl watch` serving the bus, the seat's worker (max_deliver set to 2 on the
// server) delivers the shop's mail to the postman twice, the postman naks it both times, and
// `meshctl status` (text and JSON) and watch's /metrics count one dead letter for the worker;
// watch logs it once.
func TestADeadLetterIsCountedInStatusAndTheMetrics(t *testing.T) {
	t.Parallel()
	dir, stateDir := cliFixture(t)
	st, err := state.Open(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	// Issued before watch starts, so that its first apply lets them in.
	minted, err := st.Mint(context.Background(), []string{"alpha.shop", "alpha.postman"}, bcrypt.MinCost, "credentials issue")
	st.Close()
	if err != nil {
		t.Fatal(err)
	}

	wctx, stop := context.WithCancel(context.Background())
	logs := &lockedbuf.Buffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(wctx, []string{"watch", "-f", dir, "--state", stateDir, "--bcrypt-cost", "4", "--log-format", "json",
			"--metrics-addr", "127.0.0.1:0", "--resync", "1h"}, io.Discard, logs)
	}()
	t.Cleanup(func() {
		stop()
		<-done
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wait := func(what string, check func() error) {
		t.Helper()
		var last error
		if !backoff.Retry(ctx, backoff.Backoff{Min: 10 * time.Millisecond, Max: 200 * time.Millisecond}, func() bool {
			last = check()
			return last == nil
		}) {
			t.Fatalf("%s: %v; watch's log:\n%s", what, last, logs.String())
		}
	}

	// The first reconcile applied, and with it the grant of the advisories watch then listens to.
	var metrics string
	wait("watch's first reconcile", func() error {
		for _, rec := range logRecords(logs.String()) {
			if rec["msg"] == "serving metrics" {
				metrics, _ = rec["metrics"].(string)
			}
			if rec["outcome"] == "ok" {
				return nil
			}
		}
		return fmt.Errorf("no reconcile with outcome ok")
	})
	url, ok := bus.RunningEmbedded(stateDir)
	if !ok || metrics == "" {
		t.Fatalf("watch serves no bus (%v) or no metrics (%q)", ok, metrics)
	}

	stream, worker := render.SeatStreamName("mailer"), render.WorkerConsumer("mailer")
	pw, err := os.ReadFile(filepath.Join(stateDir, "controller.password"))
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := busclient.Dial(ctx, busclient.Target{URL: url}, busclient.Credential{User: render.ControllerUser, Password: strings.TrimSpace(string(pw))})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	js, err := jetstream.New(ctl.Conn)
	if err != nil {
		t.Fatal(err)
	}
	if err := hosttest.UpdateConsumer(ctx, js, stream, worker, func(c *jetstream.ConsumerConfig) { c.MaxDeliver = 2 }); err != nil {
		t.Fatal(err)
	}

	join := func(user string) *host.Host {
		t.Helper()
		h, err := host.Join(ctx, wire.NewMembership([]string{url}, "", user, minted[user], false))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Close)
		return h
	}
	shop, postman := join("alpha.shop"), join("alpha.postman")
	var deliveries atomic.Int32
	cc, err := postman.Work(ctx, "mailer", func(m jetstream.Msg) {
		deliveries.Add(1)
		if err := postman.Nak(ctx, m); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	if _, err := shop.Publish(ctx, render.AcceptSubject("mailer", "send"), []byte("undeliverable")); err != nil {
		t.Fatal(err)
	}

	wait("the dead letter in meshctl status -o json", func() error {
		code, out, errOut := meshctl(t, "status", "--state", stateDir, "-o", "json")
		if code != exitOK {
			return fmt.Errorf("exit %d: %s", code, errOut)
		}
		var got struct {
			DeadLetters []state.ConsumerDeadLetters `json:"dead_letters"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			return err
		}
		if len(got.DeadLetters) != 1 || got.DeadLetters[0].Stream != stream || got.DeadLetters[0].Consumer != worker ||
			got.DeadLetters[0].Count != 1 || got.DeadLetters[0].LastDeliveries != 2 {
			return fmt.Errorf("dead letters %+v", got.DeadLetters)
		}
		return nil
	})
	if n := deliveries.Load(); n != 2 {
		t.Errorf("the worker delivered the message %d times; max_deliver is 2", n)
	}
	code, out, errOut := meshctl(t, "status", "--state", stateDir)
	if code != exitOK || !strings.Contains(out, "Dead letters") || !lineHolds(out, stream+"/"+worker, "1", "delivered 2 time(s)") {
		t.Errorf("meshctl status: exit %d, stderr %s, does not count the dead letter:\n%s", code, errOut, out)
	}
	want := fmt.Sprintf(`meshctl_dead_letters_total{consumer=%q,stream=%q} 1`, worker, stream)
	wait("the dead letter in watch's metrics", func() error {
		resp, err := http.Get(metrics)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		for s := bufio.NewScanner(resp.Body); s.Scan(); {
			if s.Text() == want {
				return nil
			}
		}
		return fmt.Errorf("no line %q", want)
	})
	var logged int
	for _, rec := range logRecords(logs.String()) {
		if strings.HasPrefix(fmt.Sprint(rec["msg"]), "a dead letter") && rec["consumer"] == worker {
			logged++
		}
	}
	if logged != 1 {
		t.Errorf("watch logged the dead letter %d times, want once:\n%s", logged, logs.String())
	}
}

// logRecords are the lines of a JSON log, each a record; a line that is not JSON is left out.
func logRecords(log string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(log, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil {
			out = append(out, rec)
		}
	}
	return out
}
