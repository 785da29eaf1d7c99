package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/meshbus/meshctl/bus/bustest"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/lockedbuf"
	"github.com/meshbus/meshctl/internal/testwait"
)

// silentBus listens on addr ("127.0.0.1:0" for any port) and takes connections without ever
// answering: a bus whose host is up and whose server hangs. accepted counts what it took.
type silentBus struct {
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func startSilentBus(t *testing.T, addr string) *silentBus {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &silentBus{l: l}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range s.conns {
			c.Close()
		}
	})
	return s
}

func (s *silentBus) url() string { return "nats://" + s.l.Addr().String() }

func (s *silentBus) accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// writeMembership writes m to path, 0600.
func writeMembership(t *testing.T, path string, m host.Membership) {
	t.Helper()
	data, _ := json.Marshal(m)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// `meshctl agent` stops on SIGTERM within the grace every command has, and exits 0, in every
// state it can be in: enrolling with a bus that is down or hangs, joining a bus that hangs,
// joined, and reconnecting to a bus that came back hanging. Reconnecting, it was abandoned:
// nats.go's connect does not watch a context and held the connection for its 5s timeout.
func TestTheAgentStopsOnSIGTERMInEveryState(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		// setUp prepares dir and returns the agent's extra arguments and the condition that says
		// the agent is in the state.
		setUp func(t *testing.T, dir string, stderr *lockedbuf.Buffer) (args []string, ready func() bool)
	}{
		{"enrolling, the bus down", func(t *testing.T, dir string, stderr *lockedbuf.Buffer) ([]string, func() bool) {
			enrol := filepath.Join(t.TempDir(), "enrol.json")
			writeMembership(t, enrol, host.Membership{Address: "nats://127.0.0.1:" + freePort(t), User: "enrol.one", Password: "x"})
			return []string{"--membership", enrol}, func() bool { return strings.Contains(stderr.String(), "waiting for the bus") }
		}},
		{"enrolling, the bus hanging", func(t *testing.T, dir string, _ *lockedbuf.Buffer) ([]string, func() bool) {
			s := startSilentBus(t, "127.0.0.1:0")
			enrol := filepath.Join(t.TempDir(), "enrol.json")
			writeMembership(t, enrol, host.Membership{Address: s.url(), User: "enrol.one", Password: "x"})
			return []string{"--membership", enrol}, func() bool { return s.accepted() > 0 }
		}},
		{"joining, the bus hanging", func(t *testing.T, dir string, _ *lockedbuf.Buffer) ([]string, func() bool) {
			s := startSilentBus(t, "127.0.0.1:0")
			writeMembership(t, filepath.Join(dir, "node.one.json"), host.Membership{Address: s.url(), User: "node.one", Password: "x"})
			return nil, func() bool { return s.accepted() > 0 }
		}},
		{"joined", func(t *testing.T, dir string, stderr *lockedbuf.Buffer) ([]string, func() bool) {
			b := bustest.StartTestBus(t, nil) // open, with no NODES stream: the agent keeps trying to bind
			writeMembership(t, filepath.Join(dir, "node.one.json"), host.Membership{Address: b.URL(), User: "node.one", Password: "x"})
			return nil, func() bool { return strings.Contains(stderr.String(), "cannot be bound yet") }
		}},
		{"reconnecting, the bus back but hanging", func(t *testing.T, dir string, stderr *lockedbuf.Buffer) ([]string, func() bool) {
			b := bustest.StartTestBus(t, nil)
			writeMembership(t, filepath.Join(dir, "node.one.json"), host.Membership{Address: b.URL(), User: "node.one", Password: "x"})
			var s *silentBus
			return nil, func() bool {
				if s == nil && strings.Contains(stderr.String(), "cannot be bound yet") {
					b.Shutdown()
					s = startSilentBus(t, strings.TrimPrefix(b.URL(), "nats://"))
				}
				return s != nil && s.accepted() > 0
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "agent")
			stdout, stderr := &lockedbuf.Buffer{}, &lockedbuf.Buffer{}
			args, ready := c.setUp(t, dir, stderr)
			sigs := make(chan os.Signal, 1)
			exited := make(chan int, 1)
			go func() {
				exited <- runInterruptible("agent", commands["agent"].stopsCleanly, stderr, sigs, stopGrace, func(ctx context.Context) int {
					return run(ctx, append([]string{"agent", "--dir", dir}, args...), stdout, stderr)
				})
			}()
			testwait.Until(t, "the agent getting there", func() error {
				select {
				case code := <-exited:
					t.Fatalf("the agent exited %d before it was signalled:\n%s", code, stderr)
				default:
				}
				if !ready() {
					return fmt.Errorf("not yet; its log:\n%s", stderr)
				}
				return nil
			})
			sigs <- syscall.SIGTERM
			if code := <-exited; code != exitOK || strings.Contains(stderr.String(), "abandoned") {
				t.Errorf("exit %d after SIGTERM, want 0 and a stop within the grace:\n%s", code, stderr)
			}
		})
	}
}
