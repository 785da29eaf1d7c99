package busclient

import (
	"context"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
)

// A bus of several servers — a cluster — is one Target with Others: a client connection
// starts at whichever answers and moves to another when its server goes away, while what
// concerns one server alone (its accounts file, its reload, the proof that it serves that
// file) dials that server's own Target, never the pool, so an answer cannot come from a
// different server than the one asked.

// Cluster is the Target of a bus of several servers: a connection to it starts at any of
// them and moves to another when its server goes away; every server's fingerprint pins it,
// and every server's CA verifies it. The client certificate is the first server's: a host
// presents the same one to whichever server it reaches.
func Cluster(servers []Target) Target {
	if len(servers) == 0 {
		return Target{}
	}
	t := servers[0]
	var urls, pins, cas []string
	for _, s := range servers {
		urls = append(urls, s.URL)
		if s.Fingerprint != "" && !slices.Contains(pins, s.Fingerprint) {
			pins = append(pins, s.Fingerprint)
		}
		if s.CA != "" && !slices.Contains(cas, s.CA) {
			cas = append(cas, s.CA)
		}
	}
	t.Others = strings.Join(urls[1:], ",")
	t.Fingerprint = strings.Join(pins, " ")
	t.CA = strings.Join(cas, "\n")
	return t
}

// ServerURLs is the URL of every server t reaches: its URL, then its Others. A membership
// lists them so (wire.NewMembership), the first the one a host dials first.
func (t Target) ServerURLs() []string {
	if t.Others == "" {
		return []string{t.URL}
	}
	return append([]string{t.URL}, strings.Split(t.Others, ",")...)
}

// servers is t's URL and its Others, each the Target of one server.
func (t Target) servers() []Target {
	var out []Target
	for _, u := range t.ServerURLs() {
		out = append(out, Target{URL: u})
	}
	return out
}

// urls is the comma-separated server list nats.Connect takes.
func (t Target) urls() string {
	if t.Others == "" {
		return t.URL
	}
	return t.URL + "," + t.Others
}

// pins is every fingerprint t lists, normalised: any of them is the bus.
func (t Target) pins() ([]string, error) {
	var out []string
	for _, f := range strings.Fields(t.Fingerprint) {
		n, err := normalFingerprint(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// DialAlone connects to t's server and no other: a server of a cluster tells a client about
// its peers, and nats.go, refused by the server it asked, tries them — so a login proving
// what one server serves would pass on another. It never reconnects either.
func DialAlone(ctx context.Context, t Target, cred Credential, opts ...nats.Option) (*Conn, error) {
	t.Others = ""
	return Dial(ctx, t, cred, append(opts, nats.IgnoreDiscoveredServers(), nats.NoReconnect())...)
}
