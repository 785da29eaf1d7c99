package model

import (
	"net"
	"net/url"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/meshbus/meshctl/internal/printable"
)

// Server is one server of the external bus: where it listens, the accounts config it
// includes, how that file gets there and how the server is told to re-read it. Every server
// of a cluster reads and reloads its own config — nothing propagates an accounts file — so
// meshctl writes, reloads and proves each one on its own.
type Server struct {
	// Name is how messages and the state directory name it: its URL's host:port for a server
	// of bus.servers, "" for the single server of bus.url (whose generation record keeps
	// the name it always had).
	Name         string
	URL          string
	AccountsFile string
	Reload       Reload
	// Copy, when set, puts AccountsFile (a file on the control host) onto a server that is
	// not: the program and its arguments, CopyFileArg standing for the local path.
	Copy []string
	// Fingerprint pins this server's certificate: its own, or bus.fingerprint (one or several,
	// separated by spaces).
	Fingerprint string
	// CAFile verifies this server's certificate: its own, or bus.ca_file.
	CAFile string
	Pos    Pos
}

// CopyFileArg is the argument of a copy command that stands for the local accounts file.
const CopyFileArg = "{file}"

type rawServer struct {
	url, accountsFile, caFile name
	fingerprints              []name
	reload                    *rawReload
	copy                      []string
	copyPos                   Pos
	pos                       Pos
	// noAccountsFile: the server, a mapping, has no accounts_file key, which only bus.auth:
	// jwt allows.
	noAccountsFile bool
}

func (d *decoder) server(n *yaml.Node) rawServer {
	f := d.section(n, serverSection)
	s := rawServer{pos: d.pos(n)}
	if _, ok := f["accounts_file"]; !ok && n.Kind == yaml.MappingNode {
		s.noAccountsFile = true
	}
	s.url = d.required(n, f, "url", "server")
	s.accountsFile, _ = d.optional(f, "accounts_file")
	s.fingerprints = d.scalars(f, "fingerprint", "a server's fingerprint")
	s.caFile, _ = d.optional(f, "ca_file")
	if v, ok := f["reload"]; ok {
		s.reload = d.reload(v.val)
	}
	if v, ok := f["copy"]; ok {
		s.copyPos = d.pos(v.val)
		s.copy = d.strings(v.val, "bus.servers.copy")
	}
	return s
}

// value is the reload a description asks for; none given is the operator's reload.
func (r *rawReload) value() Reload {
	if r == nil {
		return Reload{Manual: true}
	}
	return Reload{PIDFile: r.pidFile.val, Command: r.command, Manual: r.manual, System: r.system}
}

// checkURL validates a server's URL (bus.url, or one of bus.servers) and returns it as
// scheme://host:port, or "" after saying what is wrong.
func checkURL(diags *diagnostics, n name, what string) string {
	u, err := url.Parse(n.val)
	switch {
	case err != nil || u.Host == "":
		// The parser's own message may quote the URL, password and all: say what is wrong
		// without repeating it.
		diags.add(n.pos, "%s is not a valid address; write it as nats://host:port or tls://host:port", what)
	case u.User != nil:
		diags.add(n.pos, "%s must not carry a user or password (%s): meshctl dials as the controller with the credential in its state directory", what, plainText(u.Scheme+"://"+u.Host))
	case u.Scheme != "nats" && u.Scheme != "tls":
		diags.add(n.pos, "%s scheme %s is not supported; use nats:// or tls://", what, printable.Quote(u.Scheme))
	default:
		return u.Scheme + "://" + u.Host
	}
	return ""
}

// checkPlaintextURL refuses addr, a server's scheme://host:port, when it is a nats:// URL to
// another host that nothing secures (no pin, no CA, no client certificate), unless the
// operator said the network is trusted. nats:// speaks TLS only where the server insists or
// the client is told how to verify it, and the controller, like every host of the mesh, logs
// in with a password: off this host, plaintext hands it to whoever can see the traffic. what
// names the key ("bus.url", "a server's url").
func checkPlaintextURL(diags *diagnostics, at Pos, addr, what string, secured, allowed bool) {
	u, err := url.Parse(addr)
	if err != nil || u.Scheme != "nats" || secured || allowed {
		return
	}
	if ip := net.ParseIP(u.Hostname()); u.Hostname() == "localhost" || ip != nil && ip.IsLoopback() {
		return
	}
	diags.add(at, "%s %s is plaintext to another host: the controller's password, and every host's, would cross the network in clear text. "+
		"Use tls:// (pinned with fingerprint), or if the network to the server is trusted, say so with bus.allow_plaintext: true", what, addr)
}

// validateServers reads bus.servers into b: the single-server keys are refused beside it
// (each server says its own), and b.URL is the first server's, which is where a one-server
// reading of the description (a membership's first address) looks.
func validateServers(diags *diagnostics, rb *rawBus, b *Bus) {
	for _, k := range []name{rb.url, rb.accountsFile} {
		if k.pos != (Pos{}) {
			diags.add(k.pos, "bus.servers names each server's url and accounts_file; write them there, not beside it")
		}
	}
	if rb.reload != nil {
		diags.add(rb.reload.pos, "bus.servers says how each server reloads; write reload on each server, not beside it")
	}
	if len(rb.servers) == 0 {
		diags.add(rb.serversPos, "bus.servers names no server; list each server of the cluster, or write bus.url for one")
		return
	}
	seen := map[string]Pos{}
	files := map[string]Pos{}
	pinned, verified := 0, 0
	for _, rs := range rb.servers {
		s := Server{AccountsFile: rs.accountsFile.val, Reload: rs.reload.value(), Copy: rs.copy, Pos: rs.pos}
		if rs.noAccountsFile && rb.auth.val != AuthJWT {
			diags.add(rs.pos, "server needs a accounts_file")
		}
		if rs.url.val != "" {
			s.URL = checkURL(diags, rs.url, "a server's url")
		}
		if s.URL != "" {
			s.Name = strings.TrimPrefix(strings.TrimPrefix(s.URL, "nats://"), "tls://")
			if at, dup := seen[s.Name]; dup {
				diags.add(rs.url.pos, "server %s is listed twice (first at %s)", s.Name, at)
			}
			seen[s.Name] = rs.url.pos
		}
		if s.AccountsFile != "" && len(s.Copy) == 0 {
			// Two servers on the control host reading one file would be reloaded as two but
			// prove the same generation twice; each needs its own.
			if at, dup := files[s.AccountsFile]; dup {
				diags.add(rs.accountsFile.pos, "accounts_file %s is already the file of the server at %s: each server includes its own", s.AccountsFile, at)
			}
			files[s.AccountsFile] = rs.accountsFile.pos
		}
		if rs.copyPos != (Pos{}) && (len(rs.copy) == 0 || !slices.Contains(rs.copy, CopyFileArg)) {
			diags.add(rs.copyPos, "a server's copy must be a command with the argument %s, which stands for the local accounts file (e.g. [scp, -q, %s, n2:/etc/nats/mesh-accounts.conf])", CopyFileArg, CopyFileArg)
		}
		s.Fingerprint, s.CAFile = b.Fingerprint, b.CAFile
		if len(rs.fingerprints) > 0 {
			s.Fingerprint = pins(diags, rs.fingerprints, "a server's fingerprint must be the SHA-256 of its leaf certificate: 64 hex digits (colons allowed)")
		}
		if rs.caFile.val != "" {
			s.CAFile = rs.caFile.val
		}
		if s.URL != "" {
			checkPlaintextURL(diags, rs.url.pos, s.URL, "a server's url", b.secured(s.Fingerprint, s.CAFile), b.AllowPlaintext)
		}
		// A fingerprint said wrong is said so above; the server is still meant to be pinned.
		if s.Fingerprint != "" || len(rs.fingerprints) > 0 {
			pinned++
		}
		if s.CAFile != "" {
			verified++
		}
		b.Servers = append(b.Servers, s)
	}
	// One connection reaches any of them and is verified by all their pins and CAs at once:
	// a pin on some would leave the others unchecked, and a CA on some would refuse the
	// others' certificates.
	if pinned > 0 && pinned < len(b.Servers) {
		diags.add(rb.serversPos, "some servers have a fingerprint and some not: pin every server (bus.fingerprint, or fingerprint on each)")
	}
	if verified > 0 && verified < len(b.Servers) {
		diags.add(rb.serversPos, "some servers have a ca_file and some not: give every server its CA (bus.ca_file, or ca_file on each)")
	}
	b.URL = b.Servers[0].URL
	b.AccountsFile = b.Servers[0].AccountsFile
	b.Reload = b.Servers[0].Reload
	if b.Fingerprint == "" {
		b.Fingerprint = b.Servers[0].Fingerprint
	}
}
