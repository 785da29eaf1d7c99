package wire

import (
	"fmt"
	"slices"
)

// Membership is what a host needs to join the bus: exactly the JSON line `meshctl credentials
// issue` prints, and what the controller seals to a node (EnrolAnswer, Instance). The user and
// password ride beside the address, not inside it: a credential embedded in a URL leaks into
// every log line that prints a connection, so the host joins them once, when it dials.
type Membership struct {
	// Address is the bus's URL without credentials: nats://host:port or tls://host:port.
	Address string `json:"address"`
	// Fingerprint is the hex SHA-256 of the bus's leaf certificate, or empty for a bus that
	// presents none (the embedded default on loopback) or is verified by a CA. A cluster whose
	// servers present different certificates, or a planned rotation, lists each, separated by
	// spaces: any of them is the bus.
	Fingerprint string `json:"fingerprint"`
	// CA is the PEM of the authorities that sign the bus's certificates (bus.ca_file): the
	// host verifies the server's certificate by it and by the server's name, so a certificate
	// the CA renews is accepted with this membership unchanged. Without it, and without a
	// fingerprint, a tls:// address is verified against the system's roots.
	CA string `json:"ca,omitempty"`
	// CertFile and KeyFile name the host's own client certificate and its key, files on the
	// host, presented to a server that asks for one (verify: true in its tls block).
	CertFile string `json:"cert_file,omitempty"`
	KeyFile  string `json:"key_file,omitempty"`
	User     string `json:"user"`
	// Password is a password principal's secret; Seed is an nkey principal's (an `SU…` user
	// seed, `bus.auth: nkey`). A membership carries exactly one of the two.
	Password string `json:"password,omitempty"`
	Seed     string `json:"seed,omitempty"`
	JWT      string `json:"jwt,omitempty"`
	// Servers, for a bus of several servers, is every server's URL, Address first (NewMembership):
	// the host connects to whichever answers and moves on when its server goes away. A
	// membership of one server has none, as before clusters.
	Servers []string `json:"servers,omitempty"`
}

// NewMembership is the membership of user on the bus whose servers are at urls, the first the
// one a host dials first, pinned by fingerprint, with its secret: the seed of its nkey where
// nkey (bus.auth: nkey), else its password. The line `meshctl credentials issue` prints and the
// memberships the controller seals are both built here, so the two cannot drift.
func NewMembership(urls []string, fingerprint, user, secret string, nkey bool) Membership {
	m := Membership{Fingerprint: fingerprint, User: user}
	if len(urls) > 0 {
		m.Address = urls[0]
	}
	if len(urls) > 1 {
		m.Servers = slices.Clone(urls)
	}
	if nkey {
		m.Seed = secret
	} else {
		m.Password = secret
	}
	return m
}

// String names the address and user and never the password or seed, so a Membership printed
// by mistake does not put a secret in a log.
func (m Membership) String() string {
	return fmt.Sprintf("user %q at %s (secret redacted)", m.User, m.Address)
}

// GoString is String for %#v, which would otherwise print every field.
func (m Membership) GoString() string { return "wire.Membership{" + m.String() + "}" }
