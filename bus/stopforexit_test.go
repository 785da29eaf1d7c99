package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshbus/meshctl/busclient"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	exitOwn   = testUser{name: "own", password: "own-pw", pub: []string{">"}, sub: []string{">"}}
	exitOther = testUser{name: "other", password: "other-pw", pub: []string{">"}, sub: []string{">"}}
)

// exitHelperEnv names the state directory a helper process works on; set, the test binary
// runs TestStopForExitHelper as that process instead of the tests.
const exitHelperEnv = "MESHCTL_TEST_EXIT_HELPER_STATE"

// TestStopForExitHelper is the process that takes StopForExit and exits at once, as a one-shot
// meshctl does: it creates streams and consumers, stores and deletes messages as "own", has
// "other" acknowledge four deliveries when MESHCTL_TEST_EXIT_OTHER is set ("open": and stay
// connected; otherwise it only fails to log in), and prints whether the stop was the fast one.
func TestStopForExitHelper(t *testing.T) {
	dir := os.Getenv(exitHelperEnv)
	if dir == "" {
		t.Skip("run as a helper process by TestStopForExitKeepsEverything")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := StartEmbedded(ctx, EmbeddedOptions{StateDir: dir, Listen: "127.0.0.1:-1", InitialAccounts: accountsFor(t, exitOwn, exitOther)})
	if err != nil {
		t.Fatal(err)
	}
	c := dialAs(t, e.URL(), exitOwn)
	js, err := jetstream.New(c.Conn)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ORDERS", "MAIL"} {
		s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{strings.ToLower(name) + ".>"}})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if _, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: name + "-c" + string(rune('0'+i)), AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 10 {
		if _, err := js.Publish(ctx, "orders.placed", []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Deleted as meshctl's drain deletes a moved message: no_erase, a tombstone.
	orders, err := js.Stream(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	if err := orders.DeleteMsg(ctx, 3); err != nil {
		t.Fatal(err)
	}
	c.Close()
	other := os.Getenv("MESHCTL_TEST_EXIT_OTHER")
	if other != "" {
		oc := dialAs(t, e.URL(), exitOther)
		ojs, err := jetstream.New(oc.Conn)
		if err != nil {
			t.Fatal(err)
		}
		cons, err := ojs.Consumer(ctx, "ORDERS", "ORDERS-c0")
		if err != nil {
			t.Fatal(err)
		}
		batch, err := cons.Fetch(4)
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if other != "open" {
			oc.Close()
		}
	}
	// A login the server refused did nothing on the bus.
	if c, err := busclient.Dial(ctx, busclient.Target{URL: e.URL()}, busclient.Credential{User: exitOther.name, Password: "wrong"}); err == nil {
		c.Close()
		t.Fatal("a wrong password logged in")
	}
	fast := e.StopForExit([]string{exitOwn.name}, func() {})
	out, _ := json.Marshal(map[string]bool{"fast": fast})
	os.Stdout.Write(append(out, '\n'))
	os.Exit(0) // as a one-shot command does: nothing of the server's stop runs after this
}

// runExitHelper runs the helper process on dir and returns whether it took the fast stop, and
// what it wrote.
func runExitHelper(t *testing.T, dir, other string) (bool, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestStopForExitHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), exitHelperEnv+"="+dir)
	if other != "" {
		cmd.Env = append(cmd.Env, "MESHCTL_TEST_EXIT_OTHER="+other)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper process: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		var got struct{ Fast *bool }
		if json.Unmarshal([]byte(line), &got) == nil && got.Fast != nil {
			return *got.Fast, string(out)
		}
	}
	t.Fatalf("helper process said nothing of its stop:\n%s", out)
	return false, ""
}

// TestStopForExitKeepsEverything takes the fast stop in a process of its own that exits right
// after it, starts the bus again on the same store, and finds every stream, consumer, stored
// message and deletion; with another client having acknowledged deliveries (gone since, or still
// connected), the stop is the clean one and the acknowledgements are there too.
func TestStopForExitKeepsEverything(t *testing.T) {
	for _, tc := range []struct {
		name  string
		other string
	}{{"only own connections", ""}, {"another client acknowledged", "closed"}, {"another client still connected", "open"}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			if fast, out := runExitHelper(t, dir, tc.other); fast != (tc.other == "") {
				t.Fatalf("fast stop = %v with another client %q:\n%s", fast, tc.other, out)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			e, err := StartEmbedded(ctx, EmbeddedOptions{StateDir: dir, Listen: "127.0.0.1:-1"})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Shutdown()
			js, err := jetstream.New(dialAs(t, e.URL(), exitOwn).Conn)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"ORDERS", "MAIL"} {
				s, err := js.Stream(ctx, name)
				if err != nil {
					t.Fatalf("stream %s after the restart: %v", name, err)
				}
				for i := range 3 {
					if _, err := s.Consumer(ctx, name+"-c"+string(rune('0'+i))); err != nil {
						t.Fatalf("consumer %d of %s after the restart: %v", i, name, err)
					}
				}
			}
			orders, err := js.Stream(ctx, "ORDERS")
			if err != nil {
				t.Fatal(err)
			}
			info, err := orders.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.State.Msgs != 9 || info.State.LastSeq != 10 {
				t.Errorf("ORDERS holds %d messages up to %d after the restart, want 9 up to 10", info.State.Msgs, info.State.LastSeq)
			}
			if _, err := orders.GetMsg(ctx, 3); err == nil {
				t.Error("the deleted message 3 is back after the restart")
			}
			if _, err := orders.GetMsg(ctx, 10); err != nil {
				t.Errorf("message 10 after the restart: %v", err)
			}
			if tc.other != "" {
				cons, err := orders.Consumer(ctx, "ORDERS-c0")
				if err != nil {
					t.Fatal(err)
				}
				ci, err := cons.Info(ctx)
				if err != nil {
					t.Fatal(err)
				}
				// Message 3 is deleted: the four acknowledged are 1, 2, 4, 5.
				if ci.AckFloor.Stream != 5 {
					t.Errorf("ORDERS-c0's ack floor is %d after the restart, want 5", ci.AckFloor.Stream)
				}
			}
		})
	}
}

// BenchmarkStop is the stop of an embedded bus holding 300 consumers: "clean" is Shutdown,
// which stops them one at a time, "forExit" StopForExit when only meshctl used the bus (the
// time until a one-shot command may exit).
func BenchmarkStop(b *testing.B) {
	for _, mode := range []string{"clean", "forExit"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				ctx := context.Background()
				dir := filepath.Join(b.TempDir(), "state")
				own := testUser{name: "own", password: "own-pw", pub: []string{">"}, sub: []string{">"}}
				e, err := StartEmbedded(ctx, EmbeddedOptions{StateDir: dir, Listen: "127.0.0.1:-1", InitialAccounts: accountsFor(b, own)})
				if err != nil {
					b.Fatal(err)
				}
				c, err := busclient.Dial(ctx, busclient.Target{URL: e.URL()}, busclient.Credential{User: own.name, Password: own.password})
				if err != nil {
					b.Fatal(err)
				}
				js, _ := jetstream.New(c.Conn)
				s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
				if err != nil {
					b.Fatal(err)
				}
				for i := range 300 {
					if _, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: fmt.Sprintf("c%d", i)}); err != nil {
						b.Fatal(err)
					}
				}
				c.Close()
				b.StartTimer()
				if mode == "clean" {
					e.Shutdown()
				} else if !e.StopForExit([]string{own.name}, func() {}) {
					b.Fatal("the stop for exit was the clean one")
				}
				b.StopTimer()
				e.Shutdown()
				b.StartTimer()
			}
		})
	}
}
