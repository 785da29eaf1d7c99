package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/meshbus/meshctl/internal/atomicfile"
	"github.com/meshbus/meshctl/internal/redact"
)

// File names under StateDir/bus.
const (
	busDirName       = "bus"
	serverConfName   = "server.conf"
	accountsConfName = "accounts.conf"
	jetStreamDirName = "jetstream"
	busRecordName    = "bus.json"
	lockName         = "lock"
)

// DefaultListen is where the embedded bus listens when EmbeddedOptions.Listen is empty: the
// loopback interface only, because a bus reachable from elsewhere is a decision an operator makes
// by naming an address, not a default.
const DefaultListen = "127.0.0.1:4222"

// ErrAlreadyRunning means another embedded bus holds the state directory. nats-server 2.15.2 does
// not lock its JetStream store, so two servers on one store would both write it; use
// RunningEmbedded's URL instead of starting a second.
var ErrAlreadyRunning = errors.New("an embedded bus is already running from this state directory")

// EmbeddedOptions configure the bus meshctl runs in-process when the mesh names no bus.url.
type EmbeddedOptions struct {
	// StateDir is meshctl's state directory; everything of the bus lives under StateDir/bus:
	// server.conf, accounts.conf, the jetstream/ store, bus.json and a lock file.
	StateDir string
	// Listen is host:port, DefaultListen when empty. Port -1 or 0 picks a free port (tests).
	Listen string
	// ServerName is the server's name, "meshctl" when empty.
	ServerName string
	// InitialAccounts is written to accounts.conf when that file does not exist yet; an existing
	// one is never overwritten, because it is what the last apply made live. When nil, the first
	// accounts.conf is a MESH account with JetStream enabled and no users.
	InitialAccounts []byte
	// TLSCert and TLSKey, when set, are PEM file paths written into server.conf's tls block; the
	// bus then accepts only TLS clients.
	TLSCert, TLSKey string
	// Logger receives the server's log; nil discards it. Its Fatalf is never called — a fatal
	// server error is returned by StartEmbedded instead, because the usual Fatalf exits the
	// process.
	Logger server.Logger
}

// Embedded is a running in-process bus.
type Embedded struct {
	srv      *server.Server
	dir      string
	url      string
	unlock   func()
	stopOnce sync.Once
	stopped  chan struct{} // closed once the server has stopped and the state directory is free
	// halfWritten are the consumers a killed server left half-written, removed at start.
	halfWritten []string
	control     *control // the control socket other meshctl processes reach this bus through
}

// RemovedHalfWritten names ("STREAM/CONSUMER") the consumers a killed server had left
// half-written in the store, which the start removed so they are created whole again.
func (e *Embedded) RemovedHalfWritten() []string { return e.halfWritten }

// defaultAccounts is the first accounts.conf of a fresh state directory. JetStream must be
// enabled on the account itself: once any account is configured, the server's jetstream block
// alone leaves a MESH user with "JetStream not enabled for account" (seed 000).
const defaultAccounts = `# Written by meshctl when the embedded bus first started; each apply replaces it.
accounts {
  MESH {
    jetstream: enabled
  }
}
`

// StartEmbedded runs nats-server in this process from StateDir/bus/server.conf.
//
// It writes server.conf (0600) afresh on every start — listen, server_name, a jetstream block
// with the store under StateDir/bus/jetstream, the tls block when configured, and
// `include "accounts.conf"` — and accounts.conf only when it does not exist. The include is
// relative: nats-server resolves an include against the directory of the file that contains it
// (conf/parse.go joins it to that directory, so even a leading '/' stays inside it). The server
// is built with server.ProcessConfigFile so that Reload re-reads the same files. No system
// account is configured: the server creates its default $SYS with no users, which reload and
// JetStream need nothing more from.
//
// It then records the bus in StateDir/bus/bus.json for RunningEmbedded and serves the control
// socket StateDir/bus/control.sock, through which other meshctl processes reload the bus and
// hold it up (control.go), until Shutdown. It returns
// ErrAlreadyRunning (wrapped) when another bus holds this state directory. ctx is checked before
// starting; starting itself (recovering the JetStream store) is not interruptible.
func StartEmbedded(ctx context.Context, o EmbeddedOptions) (*Embedded, error) {
	if o.StateDir == "" {
		return nil, errors.New("starting the embedded bus: no state directory given")
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return nil, errors.New("starting the embedded bus: TLS needs both a certificate and a key file")
	}
	stateDir, err := filepath.Abs(o.StateDir)
	if err != nil {
		return nil, fmt.Errorf("starting the embedded bus: %w", err)
	}
	dir := filepath.Join(stateDir, busDirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("starting the embedded bus: %w", err)
	}
	unlock, err := lockDir(filepath.Join(dir, lockName))
	if err != nil {
		if errors.Is(err, ErrAlreadyRunning) {
			if u, ok := RunningEmbedded(stateDir); ok {
				return nil, fmt.Errorf("starting the embedded bus in %s: %w at %s", dir, err, u)
			}
		}
		return nil, fmt.Errorf("starting the embedded bus in %s: %w", dir, err)
	}
	e, err := startLocked(ctx, o, dir)
	if err != nil {
		unlock()
		return nil, err
	}
	ctl, err := serveControl(e)
	if err != nil {
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
		unlock()
		return nil, fmt.Errorf("starting the embedded bus: %w", err)
	}
	e.control = ctl
	// The control socket stops with the lock: Shutdown releases the lock last, and the socket
	// file must be gone before another process may serve the bus and create its own.
	e.unlock = func() {
		ctl.close()
		unlock()
	}
	return e, nil
}

// startLocked is StartEmbedded once the state directory is ours.
func startLocked(ctx context.Context, o EmbeddedOptions, dir string) (*Embedded, error) {
	conf, err := serverConf(o, dir)
	if err != nil {
		return nil, fmt.Errorf("starting the embedded bus: %w", err)
	}
	confPath := filepath.Join(dir, serverConfName)
	if err := atomicfile.Write(confPath, []byte(conf)); err != nil {
		return nil, fmt.Errorf("starting the embedded bus: %w", err)
	}
	accPath := filepath.Join(dir, accountsConfName)
	if _, err := os.Stat(accPath); errors.Is(err, fs.ErrNotExist) {
		initial := o.InitialAccounts
		if initial == nil {
			initial = []byte(defaultAccounts)
		}
		if err := atomicfile.Write(accPath, initial); err != nil {
			return nil, fmt.Errorf("starting the embedded bus: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("starting the embedded bus: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("starting the embedded bus: %w", err)
	}
	halfWritten, err := removeHalfWrittenConsumers(filepath.Join(dir, jetStreamDirName))
	if err != nil {
		return nil, fmt.Errorf("starting the embedded bus: %w", err)
	}

	opts, err := server.ProcessConfigFile(confPath)
	if err != nil {
		return nil, fmt.Errorf("starting the embedded bus: reading %s: %w", confPath, err)
	}
	// Signals belong to meshctl, not to a library inside it; a reload is Reload().
	opts.NoSigs = true
	opts.NoLog = o.Logger == nil
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("starting the embedded bus from %s: %w", confPath, err)
	}
	logs := &startLog{next: o.Logger}
	srv.SetLogger(logs, false, false)

	// Start returns once the client listener is up or has failed (server.go AcceptLoop); a
	// failure is only logged, with Fatalf, so without catching it a port already in use would
	// surface as ReadyForConnections timing out ten seconds later.
	srv.Start()
	if msg := logs.fatal(); msg != "" {
		srv.Shutdown()
		srv.WaitForShutdown()
		if holder := portHolder(listenOf(o)); holder != "" {
			msg += "; " + holder + " (stop it, or give this mesh another bus.listen)"
		}
		return nil, fmt.Errorf("starting the embedded bus on %s: %s", listenOf(o), msg)
	}
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("starting the embedded bus on %s: not ready for connections after 10s", listenOf(o))
	}
	e := &Embedded{srv: srv, dir: dir, url: srv.ClientURL(), halfWritten: halfWritten, stopped: make(chan struct{})}
	rec, err := json.Marshal(busRecord{URL: e.url, PID: os.Getpid(), Started: time.Now().UTC()})
	if err == nil {
		err = atomicfile.Write(filepath.Join(dir, busRecordName), rec)
	}
	if err != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("starting the embedded bus: recording it for other meshctl processes: %w", err)
	}
	return e, nil
}

func listenOf(o EmbeddedOptions) string {
	if o.Listen == "" {
		return DefaultListen
	}
	return o.Listen
}

// serverConf renders server.conf. Port 0 is written as -1: nats-server reads a configured port 0
// as "the default, 4222" (setBaselineOptions) and only -1 as "any free port".
func serverConf(o EmbeddedOptions, dir string) (string, error) {
	// The value is never quoted whole: written as a URL, it may carry a password.
	host, port, err := net.SplitHostPort(listenOf(o))
	if err != nil || redact.URL(listenOf(o)) != listenOf(o) {
		return "", fmt.Errorf("listen address %s is not host:port", redact.URL(listenOf(o)))
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < -1 || n > 65535 {
		return "", fmt.Errorf("listen address %s: port must be a number from -1 to 65535", redact.URL(listenOf(o)))
	}
	if n == 0 {
		n = -1
	}
	name := o.ServerName
	if name == "" {
		name = "meshctl"
	}
	var b strings.Builder
	b.WriteString("# Written by meshctl each time it starts the embedded bus; edits here are overwritten.\n")
	b.WriteString("# The users live in accounts.conf, which apply replaces and the bus reloads.\n")
	fmt.Fprintf(&b, "server_name: %s\n", confQuote(name))
	fmt.Fprintf(&b, "listen: %s\n", confQuote(net.JoinHostPort(host, strconv.Itoa(n))))
	// The store belongs to whoever runs the server, not to the accounts file (seed 002).
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %s\n}\n", confQuote(filepath.Join(dir, jetStreamDirName)))
	if o.TLSCert != "" {
		cert, err := filepath.Abs(o.TLSCert)
		if err != nil {
			return "", err
		}
		key, err := filepath.Abs(o.TLSKey)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "tls {\n  cert_file: %s\n  key_file: %s\n}\n", confQuote(cert), confQuote(key))
	}
	fmt.Fprintf(&b, "include %s\n", confQuote(accountsConfName))
	return b.String(), nil
}

// confQuote writes s as a double-quoted nats-server config string. Quoted, a value is never read
// as a variable reference or a number, whatever it holds.
func confQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\t", `\t`, "\r", `\r`)
	return `"` + r.Replace(s) + `"`
}

// URL is the address clients dial, e.g. nats://127.0.0.1:4222 (tls:// when TLS is configured).
func (e *Embedded) URL() string { return e.url }

// AccountsFile is StateDir/bus/accounts.conf, the file apply replaces before a Reload.
func (e *Embedded) AccountsFile() string { return filepath.Join(e.dir, accountsConfName) }

// ConfigFile is StateDir/bus/server.conf, the file the server was started from and re-reads.
func (e *Embedded) ConfigFile() string { return filepath.Join(e.dir, serverConfName) }

// Server is the running nats-server, for what this package does not wrap.
func (e *Embedded) Server() *server.Server { return e.srv }

// Reload re-reads server.conf and its include, applying a changed accounts.conf to live
// connections (removed users are disconnected, new permissions apply at once — NATS-FACTS.md).
func (e *Embedded) Reload() error {
	if err := e.srv.Reload(); err != nil {
		return fmt.Errorf("reloading the embedded bus from %s: %w", e.ConfigFile(), err)
	}
	return nil
}

// ConfigLoadTime is when the server last loaded its configuration; it advances on every
// successful Reload, which is how a caller verifies a reload took.
func (e *Embedded) ConfigLoadTime() time.Time { return e.srv.ConfigTime() }

// Reloader is Reload as a Reloader, for code that reloads whichever bus it was given.
func (e *Embedded) Reloader() Reloader { return embeddedReloader{e} }

// Shutdown stops the server, waits until it has stopped, removes bus.json and releases the state
// directory. Calling it again, or after StopForExit, waits for the same stop.
func (e *Embedded) Shutdown() {
	e.stopOnce.Do(e.stop)
	<-e.stopped
}

// stop stops the server cleanly and then frees the state directory.
func (e *Embedded) stop() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	e.removeRecord()
	if e.unlock != nil {
		e.unlock()
	}
	close(e.stopped)
}

// removeRecord removes bus.json when it is this process's own: a file naming another pid is not
// ours to remove.
func (e *Embedded) removeRecord() {
	path := filepath.Join(e.dir, busRecordName)
	if rec, err := readBusRecord(path); err == nil && rec.PID == os.Getpid() && rec.URL == e.url {
		os.Remove(path)
	}
}

// busRecord is bus.json: how a second meshctl process finds the bus a `meshctl watch` keeps up.
type busRecord struct {
	URL     string    `json:"url"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
}

func readBusRecord(path string) (busRecord, error) {
	var rec busRecord
	data, err := os.ReadFile(path)
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return rec, fmt.Errorf("%s: %w", path, err)
	}
	return rec, nil
}

// RunningEmbedded reads StateDir/bus/bus.json and returns its URL when the recorded process is
// alive and the address accepts a TCP connection. A missing, unreadable or stale file (the
// process that wrote it crashed, or the pid was reused by something not listening there) is
// ok=false, not an error: the caller then starts a bus of its own.
func RunningEmbedded(stateDir string) (url string, ok bool) {
	url, _, ok = RunningEmbeddedProcess(stateDir)
	return url, ok
}

// RunningEmbeddedProcess is RunningEmbedded with the pid of the process serving the bus, for
// telling the operator who serves it. That process is asked to reload the bus through its
// control socket (ControlReloader), never by a signal.
func RunningEmbeddedProcess(stateDir string) (url string, pid int, ok bool) {
	rec, err := readBusRecord(filepath.Join(stateDir, busDirName, busRecordName))
	if err != nil || rec.URL == "" || !ProcessAlive(rec.PID) {
		return "", 0, false
	}
	host, err := hostOf(rec.URL)
	if err != nil {
		return "", 0, false
	}
	c, err := net.DialTimeout("tcp", host, time.Second)
	if err != nil {
		return "", 0, false
	}
	c.Close()
	return rec.URL, rec.PID, true
}

func hostOf(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	if u.Port() == "" {
		return "", fmt.Errorf("%s names no port", u.Redacted())
	}
	return u.Host, nil
}

// ProcessAlive reports whether pid names a running process on this host. Signal 0 checks
// without delivering anything; EPERM means it exists but is not ours to signal. pid ≤ 0 would
// address a process group, never one process, so it is never alive here.
func ProcessAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, syscall.EPERM)
}

// startLog is the embedded server's logger: it forwards to the caller's logger and keeps the
// first fatal message, which the server only logs, so that StartEmbedded can return it.
type startLog struct {
	next server.Logger

	mu       sync.Mutex
	firstErr string
}

func (l *startLog) fatal() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.firstErr
}

// Fatalf records the message and forwards it as an error: a logger's own Fatalf usually exits
// the process, and an embedded bus failing must not take meshctl down with it.
func (l *startLog) Fatalf(format string, v ...any) {
	l.mu.Lock()
	if l.firstErr == "" {
		l.firstErr = fmt.Sprintf(format, v...)
	}
	l.mu.Unlock()
	if l.next != nil {
		l.next.Errorf(format, v...)
	}
}

func (l *startLog) Noticef(format string, v ...any) {
	if l.next != nil {
		l.next.Noticef(format, v...)
	}
}

func (l *startLog) Warnf(format string, v ...any) {
	if l.next != nil {
		l.next.Warnf(format, v...)
	}
}

func (l *startLog) Errorf(format string, v ...any) {
	if l.next != nil {
		l.next.Errorf(format, v...)
	}
}

func (l *startLog) Debugf(format string, v ...any) {
	if l.next != nil {
		l.next.Debugf(format, v...)
	}
}

func (l *startLog) Tracef(format string, v ...any) {
	if l.next != nil {
		l.next.Tracef(format, v...)
	}
}
