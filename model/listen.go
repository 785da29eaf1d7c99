package model

import (
	"net"
	"regexp"
	"strconv"
	"strings"

	"github.com/meshbus/meshctl/internal/printable"
)

var (
	// listenPort: 1–65535, or 0 (or nats-server's -1) for a free port chosen each time the
	// bus starts, which tests and throwaway meshes use.
	listenPort = regexp.MustCompile(`^(-1|0|[1-9][0-9]{0,4})$`)
	hostName   = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$`)
)

// checkListen checks bus.listen, the embedded bus's host:port, and reports whether it is
// usable. The value is never quoted when it holds a user or password.
func checkListen(diags *diagnostics, n name, allowPlaintext bool) bool {
	v := n.val
	switch {
	case strings.Contains(v, "://"):
		diags.add(n.pos, "bus.listen is where the embedded bus listens, host:port such as 127.0.0.1:4222, not a URL")
		return false
	case strings.Contains(v, "@"):
		diags.add(n.pos, "bus.listen must not carry a user or password: it is only where the embedded bus listens, host:port such as 127.0.0.1:4222")
		return false
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		diags.add(n.pos, "bus.listen %s must be host:port, such as 127.0.0.1:4222", printable.Quote(v))
		return false
	}
	if p, err := strconv.Atoi(port); err != nil || !listenPort.MatchString(port) || p > 65535 {
		diags.add(n.pos, "bus.listen port %s must be a number from 1 to 65535 (or 0 for a free port each time the bus starts)", printable.Quote(port))
		return false
	}
	ip := net.ParseIP(host)
	if host != "" && ip == nil && !hostName.MatchString(host) {
		diags.add(n.pos, "bus.listen host %s is neither an IP address nor a host name", printable.Quote(host))
		return false
	}
	if loopback := host == "localhost" || ip != nil && ip.IsLoopback(); loopback || allowPlaintext {
		return true
	}
	where := printable.Quote(v)
	if host == "" || ip != nil && ip.IsUnspecified() {
		where += " (every interface)"
	}
	// The embedded bus serves no TLS, and every principal logs in with a password: off the
	// loopback interface, each connection would hand it to whoever can see the traffic.
	diags.add(n.pos, "bus.listen %s is not a loopback address, and the embedded bus serves no TLS: every node's and module's password would cross the network in clear text. Listen on 127.0.0.1, or if the network between the hosts is trusted, say so with bus.allow_plaintext_listen: true", where)
	return false
}
