package jsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// API is the part of JetStream a reconcile uses: listing in pages, and the six mutating
// calls. Tests wrap it to count calls against a real server.
type API interface {
	ListStreams(ctx context.Context) ([]*jetstream.StreamInfo, error)
	ListConsumers(ctx context.Context, stream string) ([]*jetstream.ConsumerInfo, error)
	// ConsumerInfo is one consumer's config and state, read now; jetstream.ErrConsumerNotFound
	// when it is gone.
	ConsumerInfo(ctx context.Context, stream, name string) (*jetstream.ConsumerInfo, error)
	CreateStream(ctx context.Context, cfg jetstream.StreamConfig) error
	UpdateStream(ctx context.Context, cfg jetstream.StreamConfig) error
	DeleteStream(ctx context.Context, name string) error
	// CreateConsumer creates a consumer and returns the server's answer: the consumer as the
	// server created it.
	CreateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (*jetstream.ConsumerInfo, error)
	UpdateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) error
	// ConsumerNames names every consumer a stream has now, without their configs or state.
	ConsumerNames(ctx context.Context, stream string) ([]string, error)
	DeleteConsumer(ctx context.Context, stream, name string) error
	DrainAPI
}

// New is the API over a connection (the controller's: it alone may reach $JS.API).
func New(nc *nats.Conn) (API, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &jsAPI{js: js, nc: nc}, nil
}

type jsAPI struct {
	js jetstream.JetStream
	nc *nats.Conn
}

// callTimeout bounds one API call. The connection buffers requests while it reconnects, so
// without a bound a call to a bus that went away waits as long as the caller's context —
// an apply that should fail and be retried would hang instead.
const callTimeout = 10 * time.Second

func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, callTimeout)
}

func (a *jsAPI) ListStreams(ctx context.Context) ([]*jetstream.StreamInfo, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	var out []*jetstream.StreamInfo
	l := a.js.ListStreams(ctx)
	for info := range l.Info() {
		out = append(out, info)
	}
	if err := l.Err(); err != nil {
		return nil, fmt.Errorf("listing streams: %w", err)
	}
	return out, nil
}

// ListConsumers asks for a stream's consumers page by page (ConsumerPages), and returns
// them all.
func (a *jsAPI) ListConsumers(ctx context.Context, stream string) ([]*jetstream.ConsumerInfo, error) {
	var out []*jetstream.ConsumerInfo
	err := a.ConsumerPages(ctx, stream, func(_ int, infos []*jetstream.ConsumerInfo) {
		out = append(out, infos...)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ConsumerPager is an API that hands a stream's consumer list over a page at a time, as it
// reads it: the plan's reading of the bus keeps each consumer as the plan compares it and lets
// the page go (reconcile's liveConsumers), where a list held whole is, for EVENTS of a 20,000-instance
// mesh, 20,000 infos as the server sent them — most of what a converged plan held. An API
// that does not pass it on (a test's wrapper, a cluster's retries, which retry the whole
// list) is read by ListConsumers.
type ConsumerPager interface {
	// ConsumerPages hands each page of the stream's consumer list to each, in the list's
	// order and one at a time, with the list's length as the server last said it.
	ConsumerPages(ctx context.Context, stream string, each func(total int, infos []*jetstream.ConsumerInfo)) error
}

// EachConsumerPage hands the consumer list of stream to each a page at a time where api
// can (ConsumerPager), and whole otherwise.
func EachConsumerPage(ctx context.Context, api API, stream string, each func(total int, infos []*jetstream.ConsumerInfo)) error {
	if p, ok := api.(ConsumerPager); ok {
		return p.ConsumerPages(ctx, stream, each)
	}
	infos, err := api.ListConsumers(ctx, stream)
	if err != nil {
		return err
	}
	each(len(infos), infos)
	return nil
}

// ConsumerPages asks for a stream's consumers page by page. It goes to the API directly: the
// library's lister needs a stream handle, and getting one costs a STREAM.INFO call per stream
// that the stream list has already answered.
//
// The first page says how many consumers there are and how many a page holds (256), so the
// other pages are asked for together, pageConcurrency at a time: EVENTS of a 5,000-instance
// mesh is twenty pages, and asked for one after another they are most of a diff's wait. A
// page asked for ahead of its turn waits for the pages before it to be handed over, and no
// more than pageConcurrency pages are read and not yet handed over.
func (a *jsAPI) ConsumerPages(ctx context.Context, stream string, each func(total int, infos []*jetstream.ConsumerInfo)) error {
	first, err := a.consumerPage(ctx, stream, 0)
	if err != nil {
		return err
	}
	each(first.Total, first.Consumers)
	read := len(first.Consumers)
	if read == 0 || read >= first.Total {
		return nil
	}
	size := read
	var offsets []int
	for off := size; off < first.Total; off += size {
		offsets = append(offsets, off)
	}
	pages := make([]consumerPage, len(offsets))
	errs := make([]error, len(offsets))
	done := make([]chan struct{}, len(offsets))
	for i := range done {
		done[i] = make(chan struct{})
	}
	sem := make(chan struct{}, pageConcurrency)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i, off := range offsets {
			sem <- struct{}{}
			wg.Go(func() {
				defer close(done[i])
				pages[i], errs[i] = a.consumerPage(ctx, stream, off)
			})
		}
	})
	last, failed := first, false
	for i := range offsets {
		<-done[i]
		// After a page that failed, none is handed over: the list has a hole.
		if failed = failed || errs[i] != nil; !failed {
			each(pages[i].Total, pages[i].Consumers)
			read += len(pages[i].Consumers)
			last = pages[i]
		}
		pages[i] = consumerPage{}
		<-sem
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// Consumers created while the pages were read move the end: read on from where the
	// pages stopped, one page at a time, until one is empty or the latest total is reached.
	for len(last.Consumers) > 0 && read < last.Total {
		if last, err = a.consumerPage(ctx, stream, read); err != nil {
			return err
		}
		each(last.Total, last.Consumers)
		read += len(last.Consumers)
	}
	return nil
}

// pageConcurrency bounds the pages of one stream's consumer list asked for at once. The
// server answers API requests on as many workers as it has cores (at most 16), and a
// reader keeps up to listConcurrency streams' lists going besides.
const pageConcurrency = 4

// consumerPage is one page of a consumer list.
type consumerPage struct {
	Total     int                       `json:"total"`
	Consumers []*jetstream.ConsumerInfo `json:"consumers"`
	Error     *jetstream.APIError       `json:"error"`
}

func (a *jsAPI) consumerPage(ctx context.Context, stream string, offset int) (consumerPage, error) {
	var page consumerPage
	req, _ := json.Marshal(map[string]int{"offset": offset})
	rctx, cancel := bounded(ctx)
	msg, err := a.nc.RequestWithContext(rctx, "$JS.API.CONSUMER.LIST."+stream, req)
	cancel()
	if err != nil {
		return page, fmt.Errorf("listing the consumers of %s: %w", stream, err)
	}
	if err := json.Unmarshal(msg.Data, &page); err != nil {
		return page, fmt.Errorf("listing the consumers of %s: %w", stream, err)
	}
	if page.Error != nil {
		return page, fmt.Errorf("listing the consumers of %s: %w", stream, page.Error)
	}
	shareRepeats(page.Consumers)
	return page, nil
}

// shareRepeats makes the consumers of one page share what each of them repeats: the
// metadata, the same few keys for every consumer meshctl made (its marker, the server's
// own), and the names the server spells out twice. EVENTS of a 20,000-instance mesh lists
// 20,000 consumers, and a map of its own for each is most of what a converged plan holds of
// the bus. The shared map is read, never written.
func shareRepeats(infos []*jetstream.ConsumerInfo) {
	var metadata map[string]string
	for _, c := range infos {
		if c == nil {
			continue
		}
		if metadata != nil && maps.Equal(metadata, c.Config.Metadata) {
			c.Config.Metadata = metadata
		} else {
			metadata = c.Config.Metadata
		}
		if c.Config.Name == c.Name {
			c.Config.Name = c.Name
		}
		if c.Config.Durable == c.Name {
			c.Config.Durable = c.Name
		}
	}
}

func (a *jsAPI) ConsumerInfo(ctx context.Context, stream, name string) (*jetstream.ConsumerInfo, error) {
	rctx, cancel := bounded(ctx)
	msg, err := a.nc.RequestWithContext(rctx, "$JS.API.CONSUMER.INFO."+stream+"."+name, nil)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("reading consumer %s/%s: %w", stream, name, err)
	}
	var info struct {
		jetstream.ConsumerInfo
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		return nil, fmt.Errorf("reading consumer %s/%s: %w", stream, name, err)
	}
	switch {
	case info.Error != nil && info.Error.ErrorCode == jetstream.JSErrCodeConsumerNotFound:
		return nil, jetstream.ErrConsumerNotFound
	case info.Error != nil:
		return nil, fmt.Errorf("reading consumer %s/%s: %w", stream, name, info.Error)
	}
	return &info.ConsumerInfo, nil
}

func (a *jsAPI) CreateStream(ctx context.Context, cfg jetstream.StreamConfig) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	_, err := a.js.CreateStream(ctx, cfg)
	return err
}

func (a *jsAPI) UpdateStream(ctx context.Context, cfg jetstream.StreamConfig) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	_, err := a.js.UpdateStream(ctx, cfg)
	return err
}

func (a *jsAPI) DeleteStream(ctx context.Context, name string) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	err := a.js.DeleteStream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil // already gone: the goal is reached
	}
	return err
}

func (a *jsAPI) CreateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (*jetstream.ConsumerInfo, error) {
	return a.upsertConsumer(ctx, stream, cfg, "create")
}

func (a *jsAPI) UpdateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) error {
	_, err := a.upsertConsumer(ctx, stream, cfg, "update")
	return err
}

// ConsumerNames reads $JS.API.CONSUMER.NAMES page after page (a thousand names a page): the
// server answers it from the stream's own set of consumers, with no config or state to
// gather and encode for each.
func (a *jsAPI) ConsumerNames(ctx context.Context, stream string) ([]string, error) {
	var names []string
	for {
		req, _ := json.Marshal(map[string]int{"offset": len(names)})
		rctx, cancel := bounded(ctx)
		msg, err := a.nc.RequestWithContext(rctx, "$JS.API.CONSUMER.NAMES."+stream, req)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("naming the consumers of %s: %w", stream, err)
		}
		var page struct {
			Total     int                 `json:"total"`
			Consumers []string            `json:"consumers"`
			Error     *jetstream.APIError `json:"error"`
		}
		if err := json.Unmarshal(msg.Data, &page); err != nil {
			return nil, fmt.Errorf("naming the consumers of %s: %w", stream, err)
		}
		if page.Error != nil {
			return nil, fmt.Errorf("naming the consumers of %s: %w", stream, page.Error)
		}
		names = append(names, page.Consumers...)
		if len(page.Consumers) == 0 || len(names) >= page.Total {
			return names, nil
		}
	}
}

// upsertConsumer sends a consumer create or update to the API itself. Of an update's answer
// it trusts only the error, never the config; a creation's answer is the consumer as created.
//
// nats-server answers a create or update with the consumer's "initial info": a snapshot it
// takes each time the consumer becomes leader — at its creation, and at every server start
// for each consumer it restores — and hands out once (server/consumer.go: setLeader calls
// infoWithSnap(true), which stores o.ici; initialInfo returns and clears it). The first
// update of a consumer after a restart is therefore answered with the config as it was
// before the update. nats.go checks that answer (jetstream/consumer.go, upsertConsumer: "check
// whether multiple filter subjects (if used) are reflected in the returned ConsumerInfo")
// and, when filter_subjects were sent and the answer has none, fails with
// ErrConsumerMultipleFilterSubjectsNotSupported — although the server did update the
// consumer. Every one-shot `meshctl apply` starts the embedded bus afresh, so a module going
// from one followed event (filter_subject) to two (filter_subjects) failed every time, while
// two to three passed (the stale answer had filter_subjects too). What the server holds after
// an update is proven by the read after the apply (Session.verify), not by this answer.
//
// A creation's answer is not stale: the plan creates only a consumer the bus did not have, and
// its snapshot is taken as the server creates it, then handed out in this answer. The
// verification therefore takes it for the consumer's config, beside the server's list of names
// that shows the consumer is still there (touched).
func (a *jsAPI) upsertConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig, action string) (*jetstream.ConsumerInfo, error) {
	req, err := json.Marshal(struct {
		Stream string                    `json:"stream_name"`
		Config *jetstream.ConsumerConfig `json:"config"`
		Action string                    `json:"action"`
	}{stream, &cfg, action})
	if err != nil {
		return nil, err
	}
	ctx, cancel := bounded(ctx)
	defer cancel()
	msg, err := a.nc.RequestWithContext(ctx, "$JS.API.CONSUMER.CREATE."+stream+"."+cfg.Durable, req)
	if err != nil {
		return nil, err
	}
	var resp struct {
		jetstream.ConsumerInfo
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, fmt.Errorf("reading the server's answer: %w", err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jetstream.JSErrCodeStreamNotFound {
			return nil, jetstream.ErrStreamNotFound
		}
		return nil, resp.Error
	}
	return &resp.ConsumerInfo, nil
}

func (a *jsAPI) DeleteConsumer(ctx context.Context, stream, name string) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	err := a.js.DeleteConsumer(ctx, stream, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil
	}
	return err
}

// DrainAPI is what taking a stream out of service needs beyond the reconcile's own calls:
// reading a stream's state and messages at execution time, moving a message elsewhere, and
// pausing the consumers that hand its messages out (reconcile's drain.go).
type DrainAPI interface {
	// StreamInfo is a stream's config and state, read now; jetstream.ErrStreamNotFound when
	// it is gone.
	StreamInfo(ctx context.Context, stream string) (*jetstream.StreamInfo, error)
	// NextMsg is the stream's first message at or after seq; ErrNoMessage when there is none.
	NextMsg(ctx context.Context, stream string, seq uint64) (*jetstream.RawStreamMsg, error)
	// NextStored is NextMsg's message as the stream accounts for it (limits.go).
	NextStored(ctx context.Context, stream string, seq uint64) (Stored, error)
	// AccountInfo is the account's JetStream usage and limits.
	AccountInfo(ctx context.Context) (*jetstream.AccountInfo, error)
	// DeleteMsg takes one message out of a stream.
	DeleteMsg(ctx context.Context, stream string, seq uint64) error
	// Publish stores a message in whichever stream takes its subject, and returns the
	// stream's acknowledgement.
	Publish(ctx context.Context, msg *nats.Msg) (*jetstream.PubAck, error)
	// PauseConsumer stops a consumer delivering until until; a zero until resumes it.
	PauseConsumer(ctx context.Context, stream, consumer string, until time.Time) error
}

// ErrNoMessage is NextMsg's answer when no message is at or after the sequence asked for.
var ErrNoMessage = errors.New("no message")

// errNoMessageCode is the JetStream API's "no message found" (JSNoMessageFoundErr).
const errNoMessageCode = 10037

func (a *jsAPI) StreamInfo(ctx context.Context, stream string) (*jetstream.StreamInfo, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	s, err := a.js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	return s.CachedInfo(), nil
}

// storedMsg is a message as $JS.API.STREAM.MSG.GET answers it.
type storedMsg struct {
	Message *storedMsgBody      `json:"message"`
	Error   *jetstream.APIError `json:"error"`
}

type storedMsgBody struct {
	Subject  string    `json:"subject"`
	Sequence uint64    `json:"seq"`
	Header   []byte    `json:"hdrs"`
	Data     []byte    `json:"data"`
	Time     time.Time `json:"time"`
}

// NextMsg asks the API directly, as ListConsumers does: the library's GetMsg needs a stream
// handle, which costs a STREAM.INFO call per message. next_by_subj ">" makes it the next
// message at or after seq on any subject, skipping the gaps acknowledged work leaves in a
// work queue (docs/nats-behaviour.md, "Taking a stream out of service").
func (a *jsAPI) NextMsg(ctx context.Context, stream string, seq uint64) (*jetstream.RawStreamMsg, error) {
	m, err := a.nextMsg(ctx, stream, seq)
	if err != nil {
		return nil, err
	}
	msg := &jetstream.RawStreamMsg{Subject: m.Subject, Sequence: m.Sequence, Data: m.Data, Time: m.Time}
	if len(m.Header) > 0 {
		hdr, err := nats.DecodeHeadersMsg(m.Header)
		if err != nil {
			return nil, fmt.Errorf("reading message %d of %s: %w", m.Sequence, stream, err)
		}
		msg.Header = hdr
	}
	return msg, nil
}

// NextStored reads the message as NextMsg does, and keeps of it its sequence, its time and
// the lengths of its parts, the header's as stored (the library would parse it).
func (a *jsAPI) NextStored(ctx context.Context, stream string, seq uint64) (Stored, error) {
	m, err := a.nextMsg(ctx, stream, seq)
	if err != nil {
		return Stored{}, err
	}
	return Stored{Seq: m.Sequence, Time: m.Time, subject: len(m.Subject), header: len(m.Header), data: len(m.Data)}, nil
}

// nextMsg is the stream's first message at or after seq, as $JS.API.STREAM.MSG.GET answers.
func (a *jsAPI) nextMsg(ctx context.Context, stream string, seq uint64) (*storedMsgBody, error) {
	req, _ := json.Marshal(map[string]any{"seq": seq, "next_by_subj": ">"})
	var got storedMsg
	if err := a.request(ctx, "$JS.API.STREAM.MSG.GET."+stream, req, &got); err != nil {
		return nil, fmt.Errorf("reading the messages of %s: %w", stream, err)
	}
	if got.Error != nil {
		if got.Error.ErrorCode == errNoMessageCode {
			return nil, ErrNoMessage
		}
		return nil, fmt.Errorf("reading the messages of %s: %w", stream, got.Error)
	}
	if got.Message == nil {
		return nil, fmt.Errorf("reading the messages of %s: the server answered without a message", stream)
	}
	return got.Message, nil
}

func (a *jsAPI) AccountInfo(ctx context.Context) (*jetstream.AccountInfo, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	return a.js.AccountInfo(ctx)
}

func (a *jsAPI) DeleteMsg(ctx context.Context, stream string, seq uint64) error {
	// no_erase: the message goes; overwriting its bytes on disk is not what is asked.
	req, _ := json.Marshal(map[string]any{"seq": seq, "no_erase": true})
	var got struct {
		Success bool                `json:"success"`
		Error   *jetstream.APIError `json:"error"`
	}
	if err := a.request(ctx, "$JS.API.STREAM.MSG.DELETE."+stream, req, &got); err != nil {
		return fmt.Errorf("deleting message %d of %s: %w", seq, stream, err)
	}
	if got.Error != nil {
		return fmt.Errorf("deleting message %d of %s: %w", seq, stream, got.Error)
	}
	return nil
}

func (a *jsAPI) request(ctx context.Context, subject string, req []byte, into any) error {
	rctx, cancel := bounded(ctx)
	defer cancel()
	msg, err := a.nc.RequestWithContext(rctx, subject, req)
	if err != nil {
		return err
	}
	return json.Unmarshal(msg.Data, into)
}

func (a *jsAPI) Publish(ctx context.Context, msg *nats.Msg) (*jetstream.PubAck, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	return a.js.PublishMsg(ctx, msg)
}

func (a *jsAPI) PauseConsumer(ctx context.Context, stream, consumer string, until time.Time) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	var err error
	if until.IsZero() {
		_, err = a.js.ResumeConsumer(ctx, stream, consumer)
	} else {
		_, err = a.js.PauseConsumer(ctx, stream, consumer, until)
	}
	return err
}
