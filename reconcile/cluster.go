package reconcile

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/internal/atomicfile"
	"github.com/meshbus/meshctl/model"
)

// A mesh on a cluster. Each server of a cluster reads and reloads its own accounts config —
// nothing propagates one — so an accounts change rolls through the servers one at a time,
// each written, checked, reloaded and proven by a login as the generation principal on that
// server alone (its own Target, never the cluster's pool, which could answer from another).
// A server that refuses its file stops the roll: it and every server changed before it go
// back to the previous file, each proven again, so the cluster never serves two user sets
// because one server would not take the new one. A server that is down is left as it is and
// named: the others are brought up to date, and the next apply finds it behind and finishes
// the job. A server before its first start — no file of its own yet, nothing listening at its
// address — is not left alone: its config includes the file, so it could never start, and a
// new cluster's first apply writes (and copies) every server's file for that start. The single
// server of bus.url, and the embedded bus, are a cluster of one: the same code, one step.

// ErrServerDown is returned (wrapped) when an accounts change reached every server of a
// cluster but some that did not answer: those are named, with the servers seen serving the
// new config (if any), and the next apply (or watch) brings the rest up to date when they
// are back.
var ErrServerDown = errors.New("some servers of the bus are down")

// servers is a and its Others, each one server of the bus, in the order the description
// lists them. Verify, given once for the bus, applies to each.
func (a Accounts) servers() []Accounts {
	first := a
	first.Others = nil
	out := []Accounts{first}
	for _, o := range a.Others {
		o.Others = nil
		if o.StateDir == "" {
			o.StateDir = a.StateDir
		}
		if o.Verify == nil {
			o.Verify = a.Verify
		}
		out = append(out, o)
	}
	return out
}

// name is how messages name the server: its name in a cluster, or the accounts file of a
// single server.
func (a Accounts) name() string {
	if a.Server != "" {
		return "server " + a.Server
	}
	return "the server"
}

// externalAccounts is the external bus's accounts, one per server of the description, and the
// Target that reaches any of them. The error is a CA file (ca_file) that cannot be read.
func externalAccounts(m *model.Mesh, stateDir string) (Accounts, busclient.Target, error) {
	var all []Accounts
	var targets []busclient.Target
	for _, srv := range m.Bus.Servers {
		t, err := serverTarget(m.Bus, srv)
		if err != nil {
			return Accounts{StateDir: stateDir}, busclient.Target{}, err
		}
		a := Accounts{Path: srv.AccountsFile, Reloader: reloaderFor(srv.Reload, t, stateDir), Target: t, StateDir: stateDir, Server: srv.Name}
		if len(srv.Copy) > 0 {
			a.Copy = bus.CopyCommand(srv.Copy, model.CopyFileArg)
		}
		all = append(all, a)
		targets = append(targets, t)
	}
	if len(all) == 0 {
		return Accounts{StateDir: stateDir}, busclient.Target{}, nil
	}
	first := all[0]
	first.Others = all[1:]
	return first, busclient.Cluster(targets), nil
}

// BusTarget is the Target that reaches the external bus m describes through any of its
// servers, recognised as the description says (pins, the CAs' text) and presenting its client
// certificate: what a membership of it names. The error is a CA file that cannot be read.
func BusTarget(m *model.Mesh) (busclient.Target, error) {
	_, t, err := externalAccounts(m, "")
	return t, err
}

// serverTarget is how meshctl reaches srv, a server of the external bus b: its URL, its pins,
// the text of its CA file, and meshctl's own client certificate. The CA's text is what every
// membership carries, so one that holds no certificate is refused here, before anything is
// dialled or issued, rather than on each host that reads it.
func serverTarget(b model.Bus, srv model.Server) (busclient.Target, error) {
	t := busclient.Target{URL: srv.URL, Fingerprint: srv.Fingerprint, CertFile: b.CertFile, KeyFile: b.KeyFile}
	if srv.CAFile == "" {
		return t, nil
	}
	data, err := os.ReadFile(srv.CAFile)
	if err != nil {
		return t, fmt.Errorf("reading the CA of the bus at %s (ca_file): %w", t.Address(), err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(data) {
		return t, fmt.Errorf("the CA of the bus at %s, %s (ca_file): %w", t.Address(), srv.CAFile, busclient.ErrNoCACertificate)
	}
	t.CA = string(data)
	return t, nil
}

// write rolls a new accounts config (a rendering) through the servers, one at a time (see
// above). A server of a cluster already seen serving exactly this rendering is left alone,
// so the apply after one that found a server down changes only that server.
func (a Accounts) write(ctx context.Context, data []byte) error {
	type changed struct {
		s    Accounts
		undo func(context.Context, error) error
	}
	// Asked once, before the first server: a roll begun is finished or undone, never left
	// half done by an owner that just lost its lease.
	if a.Owned != nil {
		if err := a.Owned(); err != nil {
			return fmt.Errorf("the accounts config is left as it is: %w", err)
		}
	}
	// Every server's file first: one open to every user is refused before any server is
	// changed, rather than rolled back from the servers before it.
	for _, s := range a.servers() {
		if _, err := atomicfile.CheckShared(s.Path); err != nil {
			return fmt.Errorf("the accounts config of %s holds password hashes, and is left as it is: %w", s.name(), err)
		}
	}
	var done []changed
	var down, serving, behind, notLive, notLiveWhy []string
	var firstStarts atFirstStart
	for _, s := range a.servers() {
		if s.Server != "" {
			serves, err := s.alreadyServes(ctx, data)
			if err != nil && !s.beforeFirstStart() {
				down = append(down, fmt.Sprintf("%s (%v)", s.name(), err))
				behind = append(behind, s.name())
				continue
			}
			if serves {
				serving = append(serving, s.name())
				continue
			}
		}
		undo, err := s.writeServer(ctx, data)
		var first atFirstStart
		switch {
		case err == nil:
			serving = append(serving, s.name())
		case errors.As(err, &first):
			firstStarts = append(firstStarts, first...)
			behind = append(behind, s.name())
		case errors.Is(err, ErrNotLive):
			notLive = append(notLive, s.name())
			behind = append(behind, s.name())
			// Said once for all the servers it holds for: why a reload is the operator's.
			if why := strings.TrimPrefix(err.Error(), ErrNotLive.Error()+": "); why != ErrNotLive.Error() && !slices.Contains(notLiveWhy, why) {
				notLiveWhy = append(notLiveWhy, why)
			}
		case errors.Is(err, errAtNextStart):
			return err
		default:
			if len(a.Others) == 0 {
				return err
			}
			errs := []error{fmt.Errorf("%s: %w", s.name(), err)}
			// Newest first, the reverse of the roll: each goes back to what it served before.
			for i := len(done) - 1; i >= 0; i-- {
				c := done[i]
				cause := fmt.Errorf("%s did not take the new config", s.name())
				errs = append(errs, fmt.Errorf("%s, changed before it: %w", c.s.name(), c.undo(ctx, cause)))
			}
			if len(firstStarts) > 0 {
				// Not rolled back: a server not running has nothing else to start on.
				errs = append(errs, firstStarts)
			}
			return errors.Join(errs...)
		}
		if undo != nil {
			done = append(done, changed{s, undo})
		}
	}
	var errs []error
	if len(firstStarts) > 0 {
		errs = append(errs, firstStarts)
	}
	if len(down) > 0 {
		// Only servers seen serving the new config are said to: when none is (every server
		// down, or the rest only written), saying the others serve it would be false.
		others := "no server is seen serving the new one"
		switch len(serving) {
		case 0:
		case 1:
			others = serving[0] + " serves the new one"
		default:
			others = strings.Join(serving, ", ") + " serve the new one"
		}
		errs = append(errs, fmt.Errorf("%w: %s did not answer, and its accounts config was not changed; %s, "+
			"and the next apply brings the rest up to date once they are back", ErrServerDown, strings.Join(down, ", "), others))
	}
	if len(notLive) > 0 {
		what := ""
		if len(a.Others) > 0 {
			what = " on " + strings.Join(notLive, ", ")
		}
		err := fmt.Errorf("%w%s", ErrNotLive, what)
		if len(notLiveWhy) > 0 {
			err = fmt.Errorf("%w: %s", err, strings.Join(notLiveWhy, "; "))
		}
		errs = append(errs, err)
	}
	if len(errs) > 0 && len(serving) > 0 {
		return &PartlyServed{Serving: serving, Behind: behind, err: errors.Join(errs...)}
	}
	return errors.Join(errs...)
}

// beforeFirstStart reports whether the server has no accounts config on the control host and
// nothing accepts a connection at its address: a server that cannot start before meshctl
// writes the file its config includes. Its file is written (and copied) like any other, not
// left alone as a server that is down, or a new cluster would never start.
func (a Accounts) beforeFirstStart() bool {
	_, err := os.Stat(a.Path)
	return errors.Is(err, fs.ErrNotExist) && !listening(a.Target)
}

// awaitingFirstStart reports whether some server of a is before its first start and none
// runs: a connection to the bus can only fail, and the servers without a file could never
// start. While any server runs, the plan finds the missing file and writes it.
func (a Accounts) awaitingFirstStart() bool {
	servers := a.servers()
	return slices.ContainsFunc(servers, Accounts.beforeFirstStart) &&
		!slices.ContainsFunc(servers, func(s Accounts) bool { return listening(s.Target) })
}

// alreadyServes reports whether the server is seen serving exactly the rendering data, as
// meshctl last wrote it there; an error means the server did not answer at all.
func (a Accounts) alreadyServes(ctx context.Context, data []byte) (bool, error) {
	g, known := loadGeneration(a.StateDir, a.Server)
	conf, err := os.ReadFile(a.Path)
	if err != nil || !known || !g.describes(a.Path, conf) {
		// Not what meshctl wrote: probe the server with a password no file holds, so a
		// server that is down still reads as down rather than as "to be written".
		g = generation{Password: "-"}
	}
	err = proveOnce(ctx, a.Target, g)
	switch {
	case errors.Is(err, errNotServed):
		return false, nil
	case err != nil:
		return false, err
	}
	rendered, _ := unstamp(conf)
	return bytes.Equal(rendered, data), nil
}

// served reads the accounts config back as a plan compares it: the first server's file
// without its generation principal, and why the bus is not known to serve it ("" when every
// server is seen serving exactly the file meshctl wrote it, and all of them the same users).
// conf is the first server's file. For a cluster the reason ends with which generation each
// server serves, so a diff shows which server is behind.
func (a Accounts) served(ctx context.Context, conf []byte) ([]byte, string, error) {
	servers := a.servers()
	rendered, why, err := servers[0].servedServer(ctx, conf)
	if len(servers) == 1 {
		return rendered, why, err
	}
	if err != nil {
		// The first server is down: its file is still what the plan compares, and the
		// reason says it is not seen serving it.
		rendered, _ = unstamp(conf)
	}
	var reasons, generations []string
	for i, s := range servers {
		r := rendered
		if i > 0 {
			other, rerr := os.ReadFile(s.Path)
			if rerr != nil {
				reasons = append(reasons, fmt.Sprintf("%s has no accounts config meshctl can read at %s (%v)", s.name(), s.Path, rerr))
				generations = append(generations, s.name()+" none")
				continue
			}
			r, why, err = s.servedServer(ctx, other)
			if err != nil {
				r, _ = unstamp(other)
			}
		}
		switch {
		case err != nil:
			reasons = append(reasons, fmt.Sprintf("%s is not seen serving anything (%v)", s.name(), err))
			generations = append(generations, s.name()+" not reachable")
		case why != "":
			reasons = append(reasons, s.name()+": "+why)
			generations = append(generations, s.name()+" not proven")
		default:
			g, _ := loadGeneration(s.StateDir, s.Server)
			generations = append(generations, fmt.Sprintf("%s serves %.12s", s.name(), g.SHA256))
		}
		if i > 0 && !bytes.Equal(r, rendered) {
			reasons = append(reasons, fmt.Sprintf("%s and %s have different users (one missed a change while down?)", servers[0].name(), s.name()))
		}
	}
	if len(reasons) == 0 {
		return rendered, "", nil
	}
	return rendered, strings.Join(reasons, "; ") + "; generations: " + strings.Join(generations, ", "), nil
}

// reloaderFor is how the server at t is reloaded; stateDir holds the password of meshctl's
// system user, for a reload by request.
func reloaderFor(r model.Reload, t busclient.Target, stateDir string) bus.Reloader {
	switch {
	case r.System:
		return systemReloader(t, stateDir)
	case r.PIDFile != "":
		return bus.PIDFileReloader(r.PIDFile)
	case len(r.Command) > 0:
		return bus.CommandReloader(r.Command)
	default:
		return bus.NoReloader()
	}
}

// A cluster's JetStream API answers through its meta leader, and the streams' and consumers'
// own leaders: while one of them is being elected again — the server that led it stopped, or
// the connection moved to another server — a call goes unanswered, or is answered "temporarily
// unavailable" (10008) or "can not handle request" (10009); right after a stream goes from
// one replica to three, a consumer's update to three fails (10126) until the stream's new
// peers are in place. Each of those passes within seconds, so on a cluster every call is
// retried, each attempt bounded, for at most metaRetryWait: an apply outlives a leader change
// instead of failing on it. Every call retried is idempotent (a create of what exists with
// the same config returns it, a delete of what is gone is done).

// metaRetryWait bounds how long a call is retried through a leader change; metaAttemptWait
// bounds one attempt, so a request the old leader took with it is asked again soon.
const (
	metaRetryWait   = 30 * time.Second
	metaAttemptWait = 4 * time.Second
)

// clusterAPI is an API retrying transient cluster errors.
type clusterAPI struct{ API }

// retrying wraps api for a bus of several servers; one server has no leader to lose.
func retrying(api API, t busclient.Target) API {
	if t.Others == "" {
		return api
	}
	return clusterAPI{api}
}

// transient reports whether err is one a leader change explains.
func transient(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case 10008, 10009, 10126:
			return true
		}
		return false
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

func retryCall[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	return retryCallIf(ctx, f, transient)
}

// placing reports whether err is transient, or the server finding no peer to place a new
// replicated stream on while one of them is offline (err 10005): a cluster just started, or a
// server just back, until the meta leader counts it current again. Only for the store's own
// buckets, made once per connection: a plan's create is not held up by a server that is down.
func placing(err error) bool {
	var apiErr *jetstream.APIError
	return transient(err) || errors.As(err, &apiErr) && apiErr.ErrorCode == 10005
}

func retryCallIf[T any](ctx context.Context, f func(context.Context) (T, error), retryable func(error) bool) (T, error) {
	deadline := time.Now().Add(metaRetryWait)
	for {
		actx, cancel := context.WithTimeout(ctx, metaAttemptWait)
		v, err := f(actx)
		cancel()
		if err == nil || !retryable(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func retry(ctx context.Context, f func(context.Context) error) error {
	_, err := retryCall(ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, f(ctx) })
	return err
}

func (a clusterAPI) ListStreams(ctx context.Context) ([]*jetstream.StreamInfo, error) {
	return retryCall(ctx, a.API.ListStreams)
}

func (a clusterAPI) ListConsumers(ctx context.Context, stream string) ([]*jetstream.ConsumerInfo, error) {
	return retryCall(ctx, func(ctx context.Context) ([]*jetstream.ConsumerInfo, error) { return a.API.ListConsumers(ctx, stream) })
}

func (a clusterAPI) CreateStream(ctx context.Context, cfg jetstream.StreamConfig) error {
	return retry(ctx, func(ctx context.Context) error { return a.API.CreateStream(ctx, cfg) })
}

func (a clusterAPI) UpdateStream(ctx context.Context, cfg jetstream.StreamConfig) error {
	return retry(ctx, func(ctx context.Context) error { return a.API.UpdateStream(ctx, cfg) })
}

func (a clusterAPI) DeleteStream(ctx context.Context, name string) error {
	return retry(ctx, func(ctx context.Context) error { return a.API.DeleteStream(ctx, name) })
}

func (a clusterAPI) CreateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (*jetstream.ConsumerInfo, error) {
	return retryCall(ctx, func(ctx context.Context) (*jetstream.ConsumerInfo, error) {
		return a.API.CreateConsumer(ctx, stream, cfg)
	})
}

func (a clusterAPI) ConsumerNames(ctx context.Context, stream string) ([]string, error) {
	return retryCall(ctx, func(ctx context.Context) ([]string, error) { return a.API.ConsumerNames(ctx, stream) })
}

func (a clusterAPI) UpdateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) error {
	return retry(ctx, func(ctx context.Context) error { return a.API.UpdateConsumer(ctx, stream, cfg) })
}

func (a clusterAPI) DeleteConsumer(ctx context.Context, stream, name string) error {
	return retry(ctx, func(ctx context.Context) error { return a.API.DeleteConsumer(ctx, stream, name) })
}

// ConsumerInfo is retried too: a verification reads a consumer from its leader.
func (a clusterAPI) ConsumerInfo(ctx context.Context, stream, name string) (*jetstream.ConsumerInfo, error) {
	return retryCall(ctx, func(ctx context.Context) (*jetstream.ConsumerInfo, error) {
		return a.API.ConsumerInfo(ctx, stream, name)
	})
}

// StreamInfo is retried too: the data-loss guard reads a stream's state from its leader.
func (a clusterAPI) StreamInfo(ctx context.Context, stream string) (*jetstream.StreamInfo, error) {
	return retryCall(ctx, func(ctx context.Context) (*jetstream.StreamInfo, error) { return a.API.StreamInfo(ctx, stream) })
}
