package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
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
//	stats  the hosts connected now, the disconnects counted since the first up, and the
//	       hosts disconnected since the last mark
//	mark   forget the hosts disconnected so far
//
// A disconnect is counted whenever a connected host's connection drops other than by down:
// what a reload that refused a host's credential, or a slow server, would do to it.
//
// Given a directory rather than a file, each file in it is one host's membership, joined as a
// module host joins from its membership file (host.JoinFile): in operator mode it reads the
// file again at each reconnect, so a host whose permissions changed is cut by the push that
// revokes its old user JWT and logs in again once its file holds the new one.

// loadInFlight is how many hosts connect at once: a mesh's hosts come up over seconds, not
// all in one instant.
const loadInFlight = 32

type loadAnswer struct {
	Connected   int      `json:"connected"`
	Dropped     []string `json:"dropped,omitempty"` // users disconnected since the last mark
	Joined      int      `json:"joined,omitempty"`  // by this up: none when all were up already
	Disconnects int64    `json:"disconnects"`
	NS          int64    `json:"ns,omitempty"` // how long up took
	Error       string   `json:"error,omitempty"`
}

type load struct {
	members     []host.Membership
	files       []string // each member's membership file, when joined from files
	hosts       []*joined
	disconnects atomic.Int64

	mu      sync.Mutex
	dropped map[string]bool // since the last mark
}

// joined is one host's connection, and whether the load process closed it: nats.go calls the
// disconnect handler of a connection closed on purpose too, later, on its own goroutine.
type joined struct {
	*host.Host
	closed atomic.Bool
}

// runLoad is the load process: file holds one membership a line, or is a directory of
// membership files.
func runLoad(ctx context.Context, file string, stdin io.Reader, stdout io.Writer) error {
	l := &load{dropped: map[string]bool{}}
	if err := l.read(file); err != nil {
		return err
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
			a.Dropped = l.droppedSinceMark()
		case "mark":
			l.mu.Lock()
			clear(l.dropped)
			l.mu.Unlock()
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
			file := ""
			if l.files != nil {
				file = l.files[i]
			}
			l.hosts[i], errs[i] = l.join(ctx, m, file)
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

// join joins m's host, from file when it is set.
func (l *load) join(ctx context.Context, m host.Membership, file string) (*joined, error) {
	j := &joined{}
	opts := []nats.Option{nats.Name("bench-load"), nats.MaxReconnects(-1), nats.ReconnectWait(time.Second),
		nats.DisconnectErrHandler(func(*nats.Conn, error) {
			if !j.closed.Load() {
				l.disconnects.Add(1)
				l.mu.Lock()
				l.dropped[m.User] = true
				l.mu.Unlock()
			}
		})}
	var h *host.Host
	var err error
	if file != "" {
		h, err = host.JoinFile(ctx, file, opts...)
	} else {
		h, err = host.Join(ctx, m, opts...)
	}
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

// read reads the members from file: one membership a line, or a directory of membership
// files.
func (l *load) read(file string) error {
	fi, err := os.Stat(file)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		entries, err := os.ReadDir(file)
		if err != nil {
			return err
		}
		for _, e := range entries {
			path := filepath.Join(file, e.Name())
			m, err := host.ReadMembershipFile(path)
			if err != nil {
				return err
			}
			l.members, l.files = append(l.members, m), append(l.files, path)
		}
		return nil
	}
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
	return nil
}

// droppedSinceMark is the users disconnected since the last mark, sorted.
func (l *load) droppedSinceMark() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(maps.Keys(l.dropped))
}
