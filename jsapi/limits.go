package jsapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/plan"
)

// Stored is a message as its stream accounts for it: its sequence, when it was stored, and the
// lengths of its subject, header and data, which make the bytes its store counts (Size).
type Stored struct {
	Seq                   uint64
	Time                  time.Time
	subject, header, data int
}

// Size is the bytes the stream's store counts for the message towards max_bytes, as
// nats-server 2.10 to 2.15 count them: a file store adds its record's framing (length,
// sequence, time, subject length and hash: 30 bytes, and the header's length, 4, when there
// is a header), a memory store its sequence and time (16) (docs/nats-behaviour.md).
func (m Stored) Size(storage jetstream.StorageType) uint64 {
	n := uint64(m.subject + m.header + m.data)
	if storage == jetstream.MemoryStorage {
		return n + 16
	}
	if m.header > 0 {
		n += 4
	}
	return n + 30
}

// countBound is how many messages a count of what lowered limits discard reads at most: the
// count is for a reviewer and the guard, and past it "at least this many" says enough without
// reading gigabytes at every plan.
const countBound = 10_000

// CountDiscards counts the messages of s that limits discard at once, now: its oldest, one by
// one, while the stream holds more messages or bytes than the limits allow or the message is
// older than max_age, as the server drops them. exact is false when it stopped at countBound.
func CountDiscards(ctx context.Context, api API, s *plan.LiveStream, l plan.Limits, now time.Time) (uint64, bool, error) {
	msgs, bytes := s.Messages, s.Bytes
	var cutoff time.Time
	if l.MaxAge > 0 {
		cutoff = now.Add(-l.MaxAge)
	}
	var n uint64
	for seq := uint64(0); ; {
		over := l.MaxMsgs > 0 && msgs > uint64(l.MaxMsgs) || l.MaxBytes > 0 && bytes > uint64(l.MaxBytes)
		if !over && l.MaxAge <= 0 {
			return n, true, nil
		}
		if n >= countBound {
			return n, false, nil
		}
		m, err := api.NextStored(ctx, s.Config.Name, seq)
		if errors.Is(err, ErrNoMessage) {
			return n, true, nil
		}
		if err != nil {
			return n, false, err
		}
		// The server expires a message whose time is at or before now less max_age.
		if !over && m.Time.After(cutoff) {
			return n, true, nil
		}
		n++
		msgs--
		bytes -= min(bytes, m.Size(s.Config.Storage))
		seq = m.Seq + 1
	}
}

// Capacity is what the bus says its JetStream has for the mesh's streams: the account's
// limits where it has them (an account's count every replica), and otherwise, on the bus this
// process runs, the server's own store (75% of its disk's free space when it started, unless
// configured). An account without limits on a server run elsewhere says nothing: -1.
func Capacity(ctx context.Context, api API, embedded *bus.Embedded) (plan.Capacity, error) {
	c := plan.Capacity{File: -1, Memory: -1}
	info, err := api.AccountInfo(ctx)
	if err != nil {
		return c, err
	}
	// Limits by tier (R1, R3) hold per replica count; the default tier is read only when the
	// account has no tiers.
	if len(info.Tiers) == 0 && (info.Limits.MaxStore >= 0 || info.Limits.MaxMemory >= 0) {
		c.File, c.Memory, c.Replicated = info.Limits.MaxStore, info.Limits.MaxMemory, true
		c.Source = "the account's JetStream limits"
		return c, nil
	}
	if embedded != nil {
		if cfg := embedded.Server().JetStreamConfig(); cfg != nil {
			c.File, c.Memory = cfg.MaxStore, cfg.MaxMemory
			c.Source = "the embedded server's JetStream"
		}
	}
	return c, nil
}

// ErrWouldDiscard is a stream's update that, when it runs, would discard messages the plan did
// not count: the stream took more since, and the operator has not allowed data loss.
var ErrWouldDiscard = errors.New("the update would discard messages")

// StillKept checks, as a stream's update runs without leave to lose data, that the stream
// holds nothing its new limits discard: the plan counted nothing beyond them, but messages
// kept arriving while it was applied. As a replacement is checked again before it runs
// (reconcile's drain.go), an update that would now discard is not sent.
func StillKept(ctx context.Context, api API, want jetstream.StreamConfig) error {
	info, err := api.StreamInfo(ctx, want.Name)
	if err != nil {
		return err
	}
	have := plan.LiveStream{Config: info.Config, Messages: info.State.Msgs, Bytes: info.State.Bytes}
	l := plan.Discarding(&have, want)
	if !l.Any() {
		return nil
	}
	n, _, err := CountDiscards(ctx, api, &have, l, time.Now())
	if err != nil || n == 0 {
		return err
	}
	return fmt.Errorf("%w: %s now holds %d message(s) beyond its new limits, which the plan did not count; it was left as it was, and the next plan counts them (--allow-data-loss discards them)",
		ErrWouldDiscard, want.Name, n)
}
