package hosttest

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/backoff"
)

// probeSubjects are the subjects of the probe user, no principal's and no stream's.
const probeSubjects = "meshtest.probe.>"

// probes are one connection to each server of a cluster, as a user of the mesh's account that
// may only publish and hear probeSubjects.
type probes struct {
	conns map[string]*nats.Conn // by server URL
}

func newProbes(t testing.TB, a *JWTAccount) *probes {
	t.Helper()
	creds := a.Mint(t, "meshtest.probe", accounts.Grants{Publish: []string{probeSubjects}, Subscribe: []string{probeSubjects}})
	seed := SeedOf(t, creds)
	p := &probes{conns: map[string]*nats.Conn{}}
	for _, url := range a.Cluster.URLs() {
		nc, err := nats.Connect(url, nats.UserJWTAndSeed(creds.JWT, seed))
		if err != nil {
			t.Fatalf("connecting the probe to %s: %v", url, err)
		}
		t.Cleanup(nc.Close)
		p.conns[url] = nc
	}
	return p
}

// targetOf is user's servers: StartJWTCluster's principals each name a server first in turn,
// every other principal the first.
func (b *Mesh) targetOf(user string) busclient.Target {
	if b.probes == nil {
		return b.target
	}
	urls := b.JWT.Cluster.URLs()
	first := max(slices.Index(b.Desired.Users(), user), 0) % len(urls)
	var servers []busclient.Target
	for i := range urls {
		servers = append(servers, busclient.Target{URL: urls[(first+i)%len(urls)]})
	}
	return busclient.Cluster(servers)
}

// WaitRouted waits until every subscription h has made so far is known to every server of
// StartJWTCluster's cluster, so that a counterpart joined through any of them reaches it. A
// server tells the others of its clients' subscriptions over its routes, an account's in the
// order it took them: once a probe subscription made through h's server after h's own is heard
// from another server, that server knows h's too. On a bus of one server it returns at once.
func (b *Mesh) WaitRouted(ctx context.Context, h *host.Host) error {
	if b.probes == nil {
		return nil
	}
	// The flush returns once h's server has taken every subscription h sent before it.
	if err := h.Conn().FlushWithContext(ctx); err != nil {
		return fmt.Errorf("flushing %s's subscriptions: %w", h.User(), err)
	}
	from := h.Conn().ConnectedUrl()
	home, ok := b.probes.conns[from]
	if !ok {
		return fmt.Errorf("%s is joined to %s, not a server of the cluster", h.User(), from)
	}
	for url, other := range b.probes.conns {
		if url == from {
			continue
		}
		if err := probe(ctx, home, other); err != nil {
			return fmt.Errorf("a subscription made through %s did not reach %s: %w", from, url, err)
		}
	}
	return nil
}

// probe subscribes through home and publishes through other until other's message is heard.
func probe(ctx context.Context, home, other *nats.Conn) error {
	subject := "meshtest.probe." + rand.Text()
	heard := make(chan *nats.Msg, 64)
	sub, err := home.ChanSubscribe(subject, heard)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	if err := home.FlushWithContext(ctx); err != nil {
		return err
	}
	if !backoff.Retry(ctx, backoff.Backoff{Min: 5 * time.Millisecond, Max: 100 * time.Millisecond}, func() bool {
		if other.Publish(subject, nil) != nil || other.FlushWithContext(ctx) != nil {
			return false
		}
		select {
		case <-heard:
			return true
		default:
			return false
		}
	}) {
		return ctx.Err()
	}
	return nil
}
