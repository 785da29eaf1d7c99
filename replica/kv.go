package replica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/internal/backoff"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// MaxValueSize is the largest record the bucket takes: the server's default max_payload, which
// bounds any one message on a server left at its default anyway. A declaration with sealed
// memberships reaches hundreds of KB; a limit of the bucket's own makes a record too large a
// refusal that names the bucket (nats-server: "message size exceeds maximum allowed") rather
// than a surprise on the server that happens to be configured smaller.
const MaxValueSize = 1 << 20

// ErrNoReplica is returned (wrapped) by Bind, and by ReadAll, when the bus holds no bucket:
// never written, or deleted since. An empty bucket is not this error but an empty result, so a
// restore can tell "nothing kept here" from "nothing to keep".
var ErrNoReplica = errors.New("the bus holds no copy of the store")

// KV is the store's replica on the bus.
type KV struct {
	js jetstream.JetStream
	kv jetstream.KeyValue

	// fence is the revision of FenceKey this KV wrote (Fence), which every Write expects the
	// key to still have; 0 before it fenced, and then Write expects nothing.
	fence atomic.Uint64
	// replicas is the bucket's replicas as Open was told them; 0 when only bound.
	replicas int
}

// FenceKey is the key of the bucket that names the store's one writer on the bus. It is no
// record of the store: ReadAll leaves it out.
const FenceKey = "fence"

// Fence makes this KV the store's one writer on the bus: it writes FenceKey, naming h, and from
// then on every Write expects FenceKey to be as it left it (Nats-Expected-Last-Subject-Sequence
// with the key's subject). A writer fenced out since — another took the lock and fenced after
// it — has its late writes refused by the stream (err 10071), whole: the stream's leader checks
// the expectation when it sequences the message, and a refused message is stored nowhere. The
// caller holds the apply lock (LockKey) while it fences, so that two writers never fence at once.
//
// On one server every record of a Write carries the expectation. On a cluster only the first
// does, and is waited for before the rest go: a clustered stream refuses a second message
// expecting a subject's sequence while another expecting it is still being replicated
// (nats-server jetstream_batching.go, expectedPerSubjectInProcess: err 10164), which would
// serialize every write to one round trip a record. So a writer fenced out is refused at its
// next Write, whole; one fenced out in the midst of a Write (frozen between its first record and
// the rest) may land that Write's other records after the new writer's fence. The new writer
// reads the bucket after fencing, and its own writes replace what it holds, so such records are
// at worst a row the store's copy keeps that the writer's store does not.
func (k *KV) Fence(ctx context.Context, h Holder) error {
	value, err := json.Marshal(h)
	if err != nil {
		return err
	}
	ack, err := k.js.Publish(ctx, strings.TrimSuffix(render.StateSubjects, ">")+FenceKey, value, jetstream.WithExpectStream(render.StateStream))
	if err != nil {
		return fmt.Errorf("fencing the store's bucket %s for %s: %w", render.StateBucket, h, err)
	}
	k.fence.Store(ack.Sequence)
	return nil
}

// Fence is the bucket's fence as it is: who wrote it (ok false when nobody has fenced the
// bucket), whether it is this KV's own, and its revision, for Adopt.
type Fence struct {
	By       Holder
	OK, Mine bool
	Revision uint64
}

// Fenced reads the bucket's fence.
func (k *KV) Fenced(ctx context.Context) (Fence, error) {
	e, err := k.kv.Get(ctx, FenceKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Fence{}, nil
	}
	if err != nil {
		return Fence{}, fmt.Errorf("reading the fence of the store's bucket %s: %w", render.StateBucket, err)
	}
	f := Fence{OK: true, Revision: e.Revision(), Mine: e.Revision() == k.fence.Load()}
	_ = json.Unmarshal(e.Value(), &f.By)
	return f, nil
}

// Adopt makes a fence another process of this same copy of the store wrote this KV's own,
// without writing: that process and this one write through one store file, whose changes
// are ordered already, and the bucket holds nothing that file lacks. A converged apply run
// again from the same state directory writes nothing to the bus.
func (k *KV) Adopt(f Fence) { k.fence.Store(f.Revision) }

var _ state.Replica = (*KV)(nil)

// config is the bucket's whole configuration, sent whole whenever it is created or changed
// (a partial config resets what it leaves out: docs/nats-behaviour.md, "Streams").
func config(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:       render.StateBucket,
		Description:  "meshctl: the controller's store, kept on the bus; written by the controller alone",
		History:      1,
		MaxValueSize: MaxValueSize,
		Storage:      jetstream.FileStorage,
		Replicas:     replicas,
	}
}

// Open binds the bucket, creating it when the bus has none. replicas is the mesh's
// bus.replicas (1 on a single server: the server refuses more, err 10074).
//
// A bucket whose replicas, history, value size, TTL, byte limit or storage differ from this
// configuration is updated to it: bus.replicas grew (a cluster formed) and the store must follow
// the mesh's streams, which are updated the same way. The server changes replicas in place in
// a cluster (docs/nats-behaviour.md, "Streams") and refuses a change of storage (10052), which Open
// returns. An equal bucket is only bound, never updated: an update, even to the same config, is
// a stream-updated advisory that watch would hear on every Open.
func Open(ctx context.Context, js jetstream.JetStream, replicas int) (*KV, error) {
	kv, err := ensureBucket(ctx, js, config(replicas), "the store's bucket")
	if err != nil {
		return nil, err
	}
	return &KV{js: js, kv: kv, replicas: replicas}, nil
}

// ensureBucket binds the bucket want names, creating it when the bus has none and updating it
// to want where the server reports it otherwise (see Open); what names it in errors.
func ensureBucket(ctx context.Context, js jetstream.JetStream, want jetstream.KeyValueConfig, what string) (jetstream.KeyValue, error) {
	if err := supported(js.Conn()); err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, want.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		// Two controllers creating it at once both succeed: creating a stream that exists with
		// the same config returns it.
		if kv, err = js.CreateKeyValue(ctx, want); err != nil {
			return nil, fmt.Errorf("creating %s %s on the bus: %w", what, want.Bucket, err)
		}
		return kv, nil
	}
	if err != nil {
		return nil, fmt.Errorf("binding %s %s on the bus: %w", what, want.Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading %s %s on the bus: %w", what, want.Bucket, err)
	}
	if have := st.Config(); differs(have, want) {
		if kv, err = js.UpdateKeyValue(ctx, want); err != nil {
			return nil, fmt.Errorf("updating %s %s on the bus from %d to %d replicas, history %d, values up to %d bytes: %w",
				what, want.Bucket, have.Replicas, want.Replicas, want.History, want.MaxValueSize, err)
		}
	}
	return kv, nil
}

// Bind binds the bucket as it is, never creating or changing it: what a restore reads from.
// A bus without one is ErrNoReplica.
func Bind(ctx context.Context, js jetstream.JetStream) (*KV, error) {
	kv, err := js.KeyValue(ctx, render.StateBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		err = fmt.Errorf("%w: %w", ErrNoReplica, err)
	}
	if err != nil {
		return nil, fmt.Errorf("binding the store's bucket %s on the bus: %w", render.StateBucket, err)
	}
	return &KV{js: js, kv: kv}, nil
}

// differs compares what config sets, as the server reports it back. Not the whole config: the
// server adds `_nats.` metadata, which a comparison of everything would
// see as drift forever.
func differs(have, want jetstream.KeyValueConfig) bool {
	maxBytes := want.MaxBytes
	if maxBytes == 0 {
		maxBytes = -1 // nats.go sends 0 as "no limit", -1, and the server reports that
	}
	return have.Replicas != want.Replicas || have.History != want.History ||
		have.MaxValueSize != want.MaxValueSize || have.TTL != want.TTL ||
		have.MaxBytes != maxBytes || have.Storage != want.Storage
}

// Write puts every record, in order, and returns once the stream acknowledged each, or at the
// first it did not: the records acknowledged are on the bus, the others may not be (state then
// resends the whole store with its next change).
//
// The records go out as pipelined publishes, writeWindow of them in flight, not one request
// each: a store sent whole is thousands of records, and on a cluster each acknowledgement is a
// round of the stream's Raft group. Pipelining keeps their order: the server takes one
// connection's messages in the order they were sent, and the stream's leader sequences them so.
// A put is a plain message on the key's subject, as nats.go's Put publishes it.
//
// A nil Value purges the key rather than deleting it. Both leave a marker as the key's latest
// message, which ReadAll leaves out and a reader following the bucket sees as the row gone;
// a purge also rolls up (Nats-Rollup: sub) whatever older revisions the key had, so a revoked
// credential's hash is gone from the bus, not kept under a delete marker, whatever the
// bucket's history. With history 1 the server keeps one message per key either way. The
// headers are nats.go's own for a purge (jetstream/kv.go delete with purge).
func (k *KV) Write(ctx context.Context, records []state.Record) error {
	prefix := strings.TrimSuffix(render.StateSubjects, ">")
	inFlight := make([]jetstream.PubAckFuture, 0, min(len(records), writeWindow))
	settle := func() error {
		// Each window's acknowledgements are waited for ackWait at most, whatever ctx says:
		// a server that cannot store (its disk full, JetStream disabled) may answer nothing,
		// and a change recorded with a context that never ends would wait for ever.
		window, cancel := context.WithTimeoutCause(ctx, ackWait, errNoAck)
		defer cancel()
		for _, f := range inFlight {
			select {
			case <-window.Done():
				return fmt.Errorf("writing %s to the store's bucket %s: %w", strings.TrimPrefix(f.Msg().Subject, prefix), render.StateBucket, context.Cause(window))
			case <-f.Ok():
			case err := <-f.Err():
				if errors.Is(err, jetstream.ErrNoStreamResponse) {
					// A stream between leaders answers nobody for a moment (its leader's
					// server killed): the message is sent again, as it was, until one
					// answers. A put of a key is the same put twice, and the fence it
					// expects is a key this write does not change.
					if err = k.republish(window, f.Msg()); err == nil {
						continue
					}
				}
				if wrongRevision(err) {
					err = fmt.Errorf("%w: another meshctl fenced the bucket since this one did (%w)", state.ErrFenced, err)
				}
				return fmt.Errorf("writing %s to the store's bucket %s: %w", strings.TrimPrefix(f.Msg().Subject, prefix), render.StateBucket, err)
			}
		}
		inFlight = inFlight[:0]
		return nil
	}
	for i, r := range records {
		msg := nats.NewMsg(prefix + r.Key)
		if r.Value == nil {
			msg.Header.Set(kvOperation, "PURGE")
			msg.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		} else {
			msg.Data = r.Value
		}
		opts := []jetstream.PublishOpt{jetstream.WithExpectStream(render.StateStream)}
		fence := k.fence.Load()
		if fence != 0 && (i == 0 || k.replicas == 1) {
			opts = append(opts, jetstream.WithExpectLastSequenceForSubject(fence, prefix+FenceKey))
		}
		f, err := k.js.PublishMsgAsync(msg, opts...)
		if err != nil {
			return fmt.Errorf("writing %s to the store's bucket %s: %w", r.Key, render.StateBucket, err)
		}
		// The first record of a fenced write is waited for alone: refused, nothing of the
		// write goes out.
		if inFlight = append(inFlight, f); len(inFlight) == writeWindow || fence != 0 && i == 0 {
			if err := settle(); err != nil {
				return err
			}
		}
	}
	return settle()
}

// republish sends msg again, its headers as they were, until the stream answers or window
// ends: the wait for the acknowledgements of Write's window, within the caller's ctx.
func (k *KV) republish(window context.Context, msg *nats.Msg) error {
	for backoff.Sleep(window, republishEvery) {
		actx, cancel := context.WithTimeout(window, 2*time.Second)
		_, err := k.js.PublishMsg(actx, msg)
		cancel()
		if err == nil || !errors.Is(err, jetstream.ErrNoStreamResponse) && !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
	return fmt.Errorf("%w: %w", context.Cause(window), jetstream.ErrNoStreamResponse)
}

// republishEvery is how often republish sends a message again: a stream electing a leader
// answers within moments.
const republishEvery = 250 * time.Millisecond

// ackWait bounds the wait for one window of Write's acknowledgements.
const ackWait = 10 * time.Second

// errNoAck is why a window of Write's ended unacknowledged, when the caller's ctx did not end.
var errNoAck = fmt.Errorf("no acknowledgement within %s", ackWait)

// writeWindow is how many of Write's records wait for their acknowledgement at once: enough to
// keep a cluster's round trips overlapped, well under nats.go's own limit of 4,000 pending.
const writeWindow = 256

// Get returns key's latest value, nil when the bucket has none (never written, or purged): one
// direct get, which the stream's leader or any replica answers (the bucket allows direct gets).
func (k *KV) Get(ctx context.Context, key string) ([]byte, error) {
	e, err := k.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		// nats.go says the same of a key whose latest message is a delete or purge marker.
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s from the store's bucket %s: %w", key, render.StateBucket, err)
	}
	if v := e.Value(); v != nil {
		return v, nil
	}
	return []byte{}, nil // an empty value is a row, not its absence
}

// kvOperation is the header nats.go marks a key's delete or purge with ("DEL", "PURGE";
// jetstream/kv.go kvop, unexported): a message carrying it is a tombstone, not a value.
const kvOperation = "KV-Operation"

// readInactive is how long the server keeps ReadAll's consumer after its last request, when
// ReadAll could not delete it itself.
const readInactive = time.Minute

// readBatch is how many messages ReadAll asks for at once: large enough that thousands of
// records take a few round trips, small enough that a batch of large records stays a few MB.
const readBatch = 256

// ReadAll returns every key's latest value, sorted by key, keys that were purged or deleted
// left out.
//
// It reads the stream through a consumer of its own that delivers the last message of each
// key (deliver last-per-subject), pulled in batches, rather than a KV watcher: nats.go's watcher
// is an ordered push consumer with flow control, whose flow-control replies go to
// `$JS.FC.<stream>.>` — a grant no other job of the controller needs, and without which
// delivery stalls (docs/nats-behaviour.md, "Consumers"). A pull request and its answers need only
// `$JS.API.>` and the controller's inbox. It reads until the consumer has nothing pending, so
// a record written meanwhile is read too; the latest message of each key wins.
//
// On a cluster the consumer reads the stream from the replica it is placed on, which may not
// yet hold a write the stream's leader has acknowledged: its pending count says nothing of
// those. So it also reads until it has been handed the last message the leader reported before
// the read, unless a whole batch's wait passes without it (the stream was purged meanwhile).
func (k *KV) ReadAll(ctx context.Context) ([]state.Record, error) {
	fail := func(err error) ([]state.Record, error) {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			err = fmt.Errorf("%w: %w", ErrNoReplica, err)
		}
		return nil, fmt.Errorf("reading the store's bucket %s: %w", render.StateBucket, err)
	}
	prefix := strings.TrimSuffix(render.StateSubjects, ">")
	// A server that has just let this user in at a reload may not serve the account's
	// JetStream yet, a stream electing a leader answers nothing, and on a cluster a consumer
	// just made may live on another server whose interest in its requests reaches this one a
	// moment later: each call answered "no responders" is asked again, within one bound for
	// the whole read. A request nobody took did nothing, so asking again is safe.
	window, cancel := context.WithTimeout(ctx, ackWait)
	defer cancel()
	calls := backoff.Backoff{Min: 20 * time.Millisecond, Max: republishEvery}
	askAgain := func(err error) bool {
		return errors.Is(err, nats.ErrNoResponders) && backoff.Sleep(window, calls.Next())
	}
	stream, err := k.js.Stream(ctx, render.StateStream)
	for askAgain(err) {
		stream, err = k.js.Stream(ctx, render.StateStream)
	}
	if err != nil {
		return fail(err)
	}
	last := stream.CachedInfo().State.LastSeq
	// Memory storage, one replica, acks none: a read leaves nothing to keep. Deleted when done;
	// InactiveThreshold removes it when the reader died first.
	reader := jetstream.ConsumerConfig{
		Description:       "meshctl: reading the store back",
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		FilterSubject:     render.StateSubjects,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: readInactive,
	}
	cons, err := k.js.CreateConsumer(ctx, render.StateStream, reader)
	for askAgain(err) {
		cons, err = k.js.CreateConsumer(ctx, render.StateStream, reader)
	}
	if err != nil {
		return fail(err)
	}
	info := cons.CachedInfo()
	defer k.js.DeleteConsumer(context.WithoutCancel(ctx), render.StateStream, info.Name)

	latest := map[string][]byte{}
	var through uint64 // the highest stream sequence handed over
	for pending := info.NumPending; pending > 0 || through < last; {
		batch, err := cons.Fetch(int(min(max(pending, 1), readBatch)), jetstream.FetchContext(ctx))
		if err != nil {
			return fail(err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			meta, err := m.Metadata()
			if err != nil {
				return fail(err)
			}
			pending, through = meta.NumPending, max(through, meta.Sequence.Stream)
			key := strings.TrimPrefix(m.Subject(), prefix)
			if key == FenceKey {
				continue
			}
			if m.Headers().Get(kvOperation) != "" {
				delete(latest, key) // a purge or a delete: the row is gone
				continue
			}
			value := m.Data()
			if value == nil {
				value = []byte{} // an empty value is a row, not its absence
			}
			latest[key] = value
		}
		// A batch's error is known once its messages are all handed over, not before.
		if err := batch.Error(); askAgain(err) {
			continue
		} else if err != nil {
			return fail(err)
		}
		if got == 0 {
			// Nothing came though something was pending: the stream changed under the read
			// (purged). Ask again what is left rather than wait for messages that are gone.
			last = 0
			ci, err := cons.Info(ctx)
			for askAgain(err) {
				ci, err = cons.Info(ctx)
			}
			if err != nil {
				return fail(err)
			}
			pending = ci.NumPending
		}
	}
	out := make([]state.Record, 0, len(latest))
	for key, value := range latest {
		out = append(out, state.Record{Key: key, Value: value})
	}
	slices.SortFunc(out, func(a, b state.Record) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}
