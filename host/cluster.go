package host

import (
	"slices"
	"strings"

	"github.com/meshbus/meshctl/busclient"
)

// NewMembership is the membership of user on the bus t reaches: for a cluster, with every
// server listed, so the host can reach the bus through any of them.
func NewMembership(t busclient.Target, user, password string) Membership {
	m := Membership{Address: t.URL, Fingerprint: t.Fingerprint, User: user, Password: password}
	if t.Others != "" {
		m.Servers = append([]string{t.URL}, strings.Split(t.Others, ",")...)
	}
	return m
}

// target is where the membership's bus is: its address, and every other server it lists. An
// address without a scheme is taken as nats://.
func (m Membership) target() busclient.Target {
	address := withScheme(m.Address)
	var others []string
	for _, s := range m.Servers {
		if s = withScheme(s); s != "" && s != address && !slices.Contains(others, s) {
			others = append(others, s)
		}
	}
	return busclient.Target{URL: address, Fingerprint: m.Fingerprint, Others: strings.Join(others, ",")}
}

func withScheme(address string) string {
	address = strings.TrimSpace(address)
	if address != "" && !strings.Contains(address, "://") {
		return "nats://" + address
	}
	return address
}
