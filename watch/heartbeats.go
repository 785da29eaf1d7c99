package watch

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/meshbus/meshctl/controller"
	"github.com/meshbus/meshctl/internal/atomicfile"
)

// HeartbeatsFileName is the file in the state directory where watch keeps the last heartbeat it
// heard from each node, for `meshctl status`: a heartbeat lives in the controller's memory, and
// status is another process.
//
// A file, not the store and not a socket: heartbeats are news, not records, so they stay out of
// the SQLite store (and out of its write lock, which the controller's reports need); and status
// reads it as it reads the rest of the state directory, with no listener watch must serve and
// secure. It is written at a bounded rate, never per heartbeat (see heartbeatRecorder).
const HeartbeatsFileName = "heartbeats.json"

// Defaults of the heartbeat file's rate.
const (
	// HeartbeatRecordEvery is how often the file is rewritten while nodes keep beating: the
	// times in it are at most this old, for a node whose state did not change.
	HeartbeatRecordEvery = time.Minute
	// heartbeatTick is how often the recorder looks at what the controller heard (in memory, a
	// map of one entry per node): a node first heard, gone silent or back is in the file
	// within it.
	heartbeatTick = time.Second
)

// Heartbeats is the heartbeat file: when watch wrote it, and the last heartbeat of each node it
// heard since it started, as of then.
type Heartbeats struct {
	WrittenAt time.Time                  `json:"written_at"`
	Nodes     map[string]controller.Seen `json:"nodes"`
}

// Stale is whether node had been silent for longer than StaleAfter when the file was written.
func (h Heartbeats) Stale(node string) bool {
	s, ok := h.Nodes[node]
	return ok && h.WrittenAt.Sub(s.At) > StaleAfter
}

// Current is whether the file is still being kept: a watch that runs rewrites it at least every
// HeartbeatRecordEvery; one older than that (with a tick's slack) is what a watch that stopped
// left behind.
func (h Heartbeats) Current(now time.Time) bool {
	return now.Sub(h.WrittenAt) <= HeartbeatRecordEvery+2*heartbeatTick
}

// ReadHeartbeats reads the heartbeat file of the state directory; a missing file is no
// heartbeats (fs.ErrNotExist): no watch ran a controller here yet.
func ReadHeartbeats(stateDir string) (Heartbeats, error) {
	var h Heartbeats
	data, err := os.ReadFile(filepath.Join(stateDir, HeartbeatsFileName))
	if err != nil {
		return h, err
	}
	if err := json.Unmarshal(data, &h); err != nil {
		return h, fmt.Errorf("reading the heartbeats watch recorded in %s: %w", stateDir, err)
	}
	return h, nil
}

// heartbeatRecorder decides when the heartbeat file is rewritten: when a node is heard for the
// first time, when one goes silent (past StaleAfter) or comes back, and otherwise at most every
// HeartbeatRecordEvery, and only when something was heard since. With thousands of nodes beating
// every ten seconds, that is one small file write a minute, not thousands.
type heartbeatRecorder struct {
	every   time.Duration
	known   map[string]controller.Seen // everything heard since watch started, across controller restarts
	written Heartbeats                 // what the file says
}

func newHeartbeatRecorder(every time.Duration) *heartbeatRecorder {
	return &heartbeatRecorder{every: every, known: map[string]controller.Seen{}, written: Heartbeats{Nodes: map[string]controller.Seen{}}}
}

// next takes what the controller heard and returns the file to write now, if one is due.
func (r *heartbeatRecorder) next(now time.Time, heard map[string]controller.Seen) (Heartbeats, bool) {
	changed := false
	for n, s := range heard {
		if k, ok := r.known[n]; !ok || s.At.After(k.At) {
			r.known[n] = s
			changed = true
		}
	}
	due := changed && now.Sub(r.written.WrittenAt) >= r.every
	for n, s := range r.known {
		w, ok := r.written.Nodes[n]
		if !ok {
			due = true // first heard
			break
		}
		if (now.Sub(s.At) > StaleAfter) != (r.written.WrittenAt.Sub(w.At) > StaleAfter) {
			due = true // gone silent, or back
			break
		}
	}
	if !due {
		return Heartbeats{}, false
	}
	h := Heartbeats{WrittenAt: now, Nodes: make(map[string]controller.Seen, len(r.known))}
	for n, s := range r.known {
		h.Nodes[n] = s
	}
	return h, true
}

// wrote records that h is what the file now says.
func (r *heartbeatRecorder) wrote(h Heartbeats) { r.written = h }

// recordHeartbeats keeps the heartbeat file of stateDir until ctx ends, from whichever controller
// current returns (nil while none runs).
func recordHeartbeats(ctx context.Context, stateDir string, every, tick time.Duration, current func() *controller.Controller, logf func(string, ...any)) {
	r := newHeartbeatRecorder(every)
	path := filepath.Join(stateDir, HeartbeatsFileName)
	t := time.NewTicker(tick)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var heard map[string]controller.Seen
		if c := current(); c != nil {
			heard = c.Heartbeats()
		}
		h, due := r.next(time.Now(), heard)
		if !due {
			continue
		}
		data, _ := json.Marshal(h)
		if err := atomicfile.Write(path, data); err != nil {
			if !failing {
				logf("the heartbeats could not be recorded for meshctl status; trying again: %v", err)
			}
			failing = true
			continue
		}
		failing = false
		r.wrote(h)
	}
}
