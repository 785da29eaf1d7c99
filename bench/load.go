package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/render"
)

// The load process: the hosts of a connected mesh, one connection per module instance, each
// joined with its own membership as a module host joins (host.Join) and holding one
// subscription in its own inbox, which every reload re-checks with the connection's
// credential. It is a process of its own, so that the hosts' connections are not measured in
// the meshctl processes', nor theirs in the server's.
//
// It reads commands on stdin, one a line, and answers each with one JSON line (loadAnswer)
// on stdout:
//
//	up     connect every host, 32 at a time, and answer once all are in
//	down   close every connection
//	stats  the hosts connected now and the disconnects counted since the first up
//
// A disconnect is counted whenever a connected host's connection drops other than by down:
// what a reload that refused a host's credential, or a slow server, would do to it.

// loadInFlight is how many hosts connect at once: a mesh's hosts come up over seconds, not
// all in one instant.
const loadInFlight = 32

type loadAnswer struct {
	Connected   int    `json:"connected"`
	Joined      int    `json:"joined,omitempty"` // by this up: none when all were up already
	Disconnects int64  `json:"disconnects"`
	NS          int64  `json:"ns,omitempty"` // how long up took
	Error       string `json:"error,omitempty"`
}

type load struct {
	members     []host.Membership
	hosts       []*joined
	disconnects atomic.Int64
}

// joined is one host's connection, and whether the load process closed it: nats.go calls the
// disconnect handler of a connection closed on purpose too, later, on its own goroutine.
type joined struct {
	*host.Host
	closed atomic.Bool
}

// runLoad is the load process: file holds one membership a line.
func runLoad(ctx context.Context, file string, stdin io.Reader, stdout io.Writer) error {
	l := &load{}
	raw, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	for i, line := range bytes.Split(bytes.TrimSpace(raw), []byte("\n")) {
		m, err := host.ReadMembership(bytes.NewReader(line))
		if err != nil {
			return fmt.Errorf("%s:%d: %w", file, i+1, err)
		}
		l.members = append(l.members, m)
	}
	defer l.down()
	enc := json.NewEncoder(stdout)
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		var a loadAnswer
		switch cmd := sc.Text(); cmd {
		case "up":
			start := time.Now()
			joined, err := l.up(ctx)
			if err != nil {
				a.Error = err.Error()
			}
			a.NS, a.Joined = time.Since(start).Nanoseconds(), joined
		case "down":
			l.down()
		case "stats":
		default:
			a.Error = fmt.Sprintf("unknown command %q", cmd)
		}
		a.Connected, a.Disconnects = l.connected(), l.disconnects.Load()
		if err := enc.Encode(a); err != nil {
			return err
		}
	}
	return sc.Err()
}

// up connects every host, and says how many it joined: none when all were up already.
func (l *load) up(ctx context.Context) (int, error) {
	if l.hosts != nil && l.connected() == len(l.members) {
		return 0, nil
	}
	l.down()
	l.hosts = make([]*joined, len(l.members))
	errs := make([]error, len(l.members))
	sem := make(chan struct{}, loadInFlight)
	var wg sync.WaitGroup
	for i, m := range l.members {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			l.hosts[i], errs[i] = l.join(ctx, m)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return len(l.members), nil
}

func (l *load) join(ctx context.Context, m host.Membership) (*joined, error) {
	j := &joined{}
	h, err := host.Join(ctx, m, nats.Name("bench-load"), nats.MaxReconnects(-1), nats.ReconnectWait(time.Second),
		nats.DisconnectErrHandler(func(*nats.Conn, error) {
			if !j.closed.Load() {
				l.disconnects.Add(1)
			}
		}))
	if err != nil {
		return nil, err
	}
	j.Host = h
	if _, err := h.Subscribe(ctx, render.Inbox(m.User)+".load", func(*nats.Msg) {}); err != nil {
		j.close()
		return nil, fmt.Errorf("%s subscribing in its inbox: %w", m.User, err)
	}
	return j, nil
}

func (j *joined) close() {
	j.closed.Store(true)
	j.Close()
}

func (l *load) down() {
	for i, h := range l.hosts {
		if h != nil {
			h.close()
			l.hosts[i] = nil
		}
	}
}

func (l *load) connected() int {
	n := 0
	for _, h := range l.hosts {
		if h != nil && h.Conn().IsConnected() {
			n++
		}
	}
	return n
}
