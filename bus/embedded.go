package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/meshbus/meshctl/internal/atomicfile"
	"github.com/meshbus/meshctl/internal/backoff"
	"github.com/meshbus/meshctl/internal/redact"
	"github.com/meshbus/meshctl/model"
)

// File names under StateDir/bus.
const (
	busDirName       = "bus"
	serverConfName   = "server.conf"
	accountsConfName = "accounts.conf"
	jetStreamDirName = "jetstream"
	resolverDirName  = "jwt"
	busRecordName    = "bus.json"
	lockName         = "lock"
)

// ErrAlreadyRunning means another embedded bus holds the state directory. nats-server 2.15.2 does
// not lock its JetStream store, so two servers on one store would both write it; use
// RunningEmbedded's URL instead of starting a second.
var ErrAlreadyRunning = errors.New("an embedded bus is already running from this state directory")

// lockRetry bounds how long StartEmbedded asks again for a state directory's lock that no
// recorded bus holds.
const lockRetry = 5 * time.Second

// lockHeld is called each time StartEmbedded finds the lock held by no recorded bus: a test's
// hook.
var lockHeld = func() {}

// EmbeddedOptions configure the bus meshctl runs in-process when the mesh names no bus.url.
type EmbeddedOptions struct {
	// StateDir is meshctl's state directory; everything of the bus lives under StateDir/bus:
	// server.conf, accounts.conf, the jetstream/ store, bus.json and a lock file.
	StateDir string
	// Listen is host:port; when empty, the description's default (model.DefaultListen), the
	// loopback interface only: a bus reachable from elsewhere is a decision an operator makes by
	// naming an address, not a default. Port -1 or 0 picks a free port (tests).
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
	// Entries, when set, splits an accounts config into its users' entries, as whoever writes
	// the config lays it out; ok is false for a config it does not know. A reload then parses
	// only the entries that changed (entries.go).
	Entries func(accounts []byte) (layout AccountsLayout, ok bool)
	// Operator, when set, starts the bus in operator mode: the server trusts the operator,
	// keeps account JWTs in a NATS resolver under StateDir/bus/jwt, preloaded with
	// Operator.Preload, and takes every account change as a JWT pushed over the system
	// account. It then has no accounts file: InitialAccounts must be nil, accounts.conf is
	// neither written nor read, and Reload and CheckAccounts refuse (ErrOperatorMode).
	Operator *OperatorMode
}

// embeddedResolverInterval is how often the embedded bus's resolver asks a peer for the JWTs it
// lacks. It has none, so this only sets the server's own pace; pushes apply at once.
const embeddedResolverInterval = "2m"

// Embedded is a running in-process bus.
type Embedded struct {
	srv      *server.Server
	dir      string
	url      string
	conf     serverConfig
	reloadMu sync.Mutex // one reload at a time, so the last to finish read the latest file
	entries  func([]byte) (AccountsLayout, bool)
	// served is the accounts config the server serves, split, with its users as parsed (nil
	// where it does not split): what a parse of the next reuses.
	served atomic.Pointer[servedAccounts]
	// authenticates is whether the config in force names users (every connection then shows
	// its user once through its CONNECT); held under reloadMu.
	authenticates bool
	unlock        func()
	stopOnce      sync.Once
	stopped       chan struct{} // closed once the server has stopped and the state directory is free
	// halfWritten are the consumers a killed server left half-written, removed at start.
	halfWritten []string
	control     *control // the control socket other meshctl processes reach this bus through
	// operatorMode: the bus runs in operator mode and has no accounts file.
	operatorMode bool
}

// RemovedHalfWritten names ("STREAM/CONSUMER") the consumers a killed server had left
// half-written in the store, which the start removed so they are created whole again.
func (e *Embedded) RemovedHalfWritten() []string { return e.halfWritten }

// defaultAccounts is the first accounts.conf of a fresh state directory. JetStream must be
// enabled on the account itself: once any account is configured, the server's jetstream block
// alone leaves a MESH user with "JetStream not enabled for account".
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
// is built from those two files parsed in memory, as Reload parses them (serverConfig), with
// server.conf as its config file, so the server's own reload from file reads the same but for
// one block: an accounts config that names no system account is given an empty one for the
// server's default, $SYS, with no users (addSystemAccount), which reload and JetStream need
// nothing more from.
//
// In operator mode (Operator set) server.conf holds the operator-mode statements instead of
// the include (OperatorMode.Statements, the resolver's directory StateDir/bus/jwt), and no
// accounts.conf is written: the accounts are the JWTs the resolver holds, pushed over the
// operator's system account.
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
	if o.Operator != nil && o.InitialAccounts != nil {
		return nil, errors.New("starting the embedded bus: in operator mode its accounts are JWTs, not an accounts file")
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
	if errors.Is(err, ErrAlreadyRunning) {
		if _, ok := RunningEmbedded(stateDir); !ok {
			// Held with no bus recorded: a bus starting, or, for a moment after a bus stopped,
			// a child process that a fork gave a copy of the lock's file and that has not yet
			// exec'd (which closes it). Asked again, within a bound.
			wait, cancel := context.WithTimeout(ctx, lockRetry)
			backoff.Retry(wait, backoff.Backoff{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond}, func() bool {
				lockHeld()
				unlock, err = lockDir(filepath.Join(dir, lockName))
				return !errors.Is(err, ErrAlreadyRunning)
			})
			cancel()
		}
	}
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
	settings, err := serverSettings(o, dir)
	if err != nil {
		return nil, fmt.Errorf("starting the embedded bus: %w", err)
	}
	confPath := filepath.Join(dir, serverConfName)
	conf := serverConfig{settings: settings, path: confPath, noLog: o.Logger == nil, operatorMode: o.Operator != nil}
	if err := atomicfile.Write(confPath, []byte(conf.file())); err != nil {
		return nil, fmt.Errorf("starting the embedded bus: %w", err)
	}
	accPath := filepath.Join(dir, accountsConfName)
	var accounts []byte
	if !conf.operatorMode {
		if accounts, err = os.ReadFile(accPath); errors.Is(err, fs.ErrNotExist) {
			accounts = o.InitialAccounts
			if accounts == nil {
				accounts = []byte(defaultAccounts)
			}
			err = atomicfile.Write(accPath, accounts)
		}
		if err != nil {
			return nil, fmt.Errorf("starting the embedded bus: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("starting the embedded bus: %w", err)
	}
	halfWritten, err := removeHalfWrittenConsumers(filepath.Join(dir, jetStreamDirName))
	if err != nil {
		return nil, fmt.Errorf("starting the embedded bus: %w", err)
	}

	opts, served, err := conf.parse(accounts, o.Entries, nil)
	if err != nil {
		read := confPath + " and its include " + accPath
		if conf.operatorMode {
			read = confPath
		}
		return nil, fmt.Errorf("starting the embedded bus: reading %s: %w", read, err)
	}
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
	e := &Embedded{srv: srv, dir: dir, url: srv.ClientURL(), conf: conf, halfWritten: halfWritten, stopped: make(chan struct{}),
		authenticates: len(opts.Users) > 0, entries: o.Entries, operatorMode: conf.operatorMode}
	e.served.Store(served)
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
		return model.DefaultListen
	}
	return o.Listen
}

// serverSettings are server.conf's own settings, each one statement on one line: server_name,
// listen, the jetstream block and the tls block when configured; in operator mode, then, the
// operator-mode statements, whose blocks take several lines. Port 0 is written as -1:
// nats-server reads a configured port 0 as "the default, 4222" (setBaselineOptions) and only -1
// as "any free port".
func serverSettings(o EmbeddedOptions, dir string) ([]string, error) {
	// The value is never quoted whole: written as a URL, it may carry a password.
	host, port, err := net.SplitHostPort(listenOf(o))
	if err != nil || redact.URL(listenOf(o)) != listenOf(o) {
		return nil, fmt.Errorf("listen address %s is not host:port", redact.URL(listenOf(o)))
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < -1 || n > 65535 {
		return nil, fmt.Errorf("listen address %s: port must be a number from -1 to 65535", redact.URL(listenOf(o)))
	}
	if n == 0 {
		n = -1
	}
	name := o.ServerName
	if name == "" {
		name = "meshctl"
	}
	settings := []string{
		"server_name: " + confQuote(name),
		"listen: " + confQuote(net.JoinHostPort(host, strconv.Itoa(n))),
		// The store is the server's setting, never the accounts file's (docs/design-rules.md).
		jetStreamSetting(dir),
	}
	if o.TLSCert != "" {
		cert, err := filepath.Abs(o.TLSCert)
		if err != nil {
			return nil, err
		}
		key, err := filepath.Abs(o.TLSKey)
		if err != nil {
			return nil, err
		}
		settings = append(settings, fmt.Sprintf("tls { cert_file: %s; key_file: %s }", confQuote(cert), confQuote(key)))
	}
	if o.Operator != nil {
		statements, err := o.Operator.Statements(filepath.Join(dir, resolverDirName), embeddedResolverInterval)
		if err != nil {
			return nil, err
		}
		settings = append(settings, statements...)
	}
	return settings, nil
}

// jetStreamSetting is the jetstream block of a server whose bus directory is dir.
func jetStreamSetting(dir string) string {
	return fmt.Sprintf("jetstream { store_dir: %s }", confQuote(filepath.Join(dir, jetStreamDirName)))
}

// serverConfig is how the embedded server is configured: server.conf's own settings and the
// accounts config it includes, parsed together in memory.
//
// A reload from file (Server.Reload) parses server.conf with its include again and, besides,
// computes a SHA-256 over a JSON encoding of every token of the parsed tree (the config digest
// /varz shows): at 7,001 users that digest took half of the reload's time and the parse a
// third, while meshctl had just parsed the same accounts config to check it. Parsed from memory,
// a change costs the server one parse and no digest; the options are those of the file — the
// settings are server.conf's statements, the accounts text stands where the include does, after
// them, so a key in both is the accounts file's as it is in the file — and the server's config
// file is still server.conf, which a reload from file or a restart reads the same way. The
// config digest is empty: nothing of meshctl's reads it, and the embedded bus has no monitoring
// port that would show it.
type serverConfig struct {
	settings []string // one statement each, in server.conf's order
	path     string   // server.conf, the server's config file
	noLog    bool     // no logger was given: the server logs nothing
	// operatorMode: the settings put the server in operator mode, and there is no accounts
	// config to include.
	operatorMode bool
}

// file is server.conf's text: the settings, one a line, and the include of accounts.conf.
func (c serverConfig) file() string {
	var b strings.Builder
	b.WriteString("# Written by meshctl each time it starts the embedded bus; edits here are overwritten.\n")
	if c.operatorMode {
		b.WriteString("# Operator mode: the accounts are JWTs in the resolver's directory, pushed over the\n")
		b.WriteString("# system account; nothing here changes when they do.\n")
	} else {
		b.WriteString("# The users live in accounts.conf, which apply replaces and the bus reloads.\n")
		b.WriteString("# meshctl adds an empty block for the system account, $SYS, when accounts.conf\n")
		b.WriteString("# names none: a reload then rebuilds its exports rather than rewriting them.\n")
	}
	for _, s := range c.settings {
		b.WriteString(s + "\n")
	}
	if !c.operatorMode {
		fmt.Fprintf(&b, "include %s\n", confQuote(accountsConfName))
	}
	return b.String()
}

// options parses the settings and accounts, the text of accounts.conf, as the server reads
// server.conf and its include. The settings go on the accounts' first line, ahead of it, so a
// line the parser names is the line of the accounts text (in operator mode, whose statements
// take several lines, there is no accounts text). The text must be self-contained
// (render's is): an include in it would resolve against the working directory, not the bus
// directory.
func (c serverConfig) options(accounts []byte) (*server.Options, error) {
	var text strings.Builder
	text.Grow(len(accounts) + 512)
	for _, s := range c.settings {
		text.WriteString(s + "; ")
	}
	text.Write(accounts)
	opts := &server.Options{}
	if err := opts.ProcessConfigString(text.String()); err != nil {
		return nil, err
	}
	addSystemAccount(opts)
	// A reload refuses a config file that differs from the one the server started with.
	opts.ConfigFile = c.path
	// Signals belong to meshctl, not to a library inside it; a reload is Reload().
	opts.NoSigs = true
	opts.NoLog = c.noLog
	return opts, nil
}

// addSystemAccount gives options that configure accounts but no system account an empty block
// for the server's default one, $SYS, as server.conf's comment says. Without one, every reload
// rewrites, unlocked for the reader, the account of the system account's $JS.API.> export that
// the response timer of the last JetStream request reads; with one, the reload rebuilds that
// account's exports and the timer keeps the export it had (docs/nats-behaviour.md, "Reload").
// The block cannot be written into server.conf: the accounts file's own accounts block would
// replace it. Options with no accounts (an open bus) get none: the server would then give the
// global account a login of its own, and a client's user and password would be refused.
func addSystemAccount(opts *server.Options) {
	if len(opts.Accounts) == 0 || opts.SystemAccount != "" || len(opts.TrustedOperators) > 0 {
		return
	}
	for _, a := range opts.Accounts {
		if a.Name == server.DEFAULT_SYSTEM_ACCOUNT {
			return
		}
	}
	opts.Accounts = append(opts.Accounts, server.NewAccount(server.DEFAULT_SYSTEM_ACCOUNT))
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

// Reload re-reads accounts.conf and applies it with the server's own settings, as a reload of
// server.conf would (serverConfig): removed users are disconnected, new permissions apply to live
// connections at once (docs/nats-behaviour.md, "Reload"). A config the server refuses — one it
// cannot parse, or one changing what it cannot reload — leaves it on the config it had, and is the
// error.
func (e *Embedded) Reload() error {
	if e.operatorMode {
		return fmt.Errorf("reloading the embedded bus: %w", ErrOperatorMode)
	}
	e.reloadMu.Lock()
	defer e.reloadMu.Unlock()
	return e.reloadFile(nil)
}

// reloadFile reloads accounts.conf; parsed, when not nil, is that file's text already parsed
// (the check that came before it). e.reloadMu is held.
func (e *Embedded) reloadFile(parsed *CheckedAccounts) error {
	accounts, err := os.ReadFile(e.AccountsFile())
	if err != nil {
		return fmt.Errorf("reloading the embedded bus: %w", err)
	}
	var opts *server.Options
	var served *servedAccounts
	if parsed != nil && bytes.Equal(parsed.accounts, accounts) {
		opts, served, parsed.opts = parsed.opts, parsed.served, nil
	}
	if opts == nil {
		if opts, served, err = e.conf.parse(accounts, e.entries, e.served.Load()); err != nil {
			return fmt.Errorf("reloading the embedded bus: %s: %w", e.AccountsFile(), err)
		}
	}
	if e.authenticates {
		e.waitForConnects()
	}
	if err := e.srv.ReloadOptions(opts); err != nil {
		return fmt.Errorf("reloading the embedded bus from %s: %w", e.AccountsFile(), err)
	}
	e.authenticates = len(opts.Users) > 0
	e.served.Store(served)
	return nil
}

// connectWait bounds how long a reload waits for connections still connecting: a client
// sends its CONNECT as soon as it is accepted, and one that sends none (a port probe) is
// not waited for past this.
const connectWait = time.Second

// waitForConnects waits, at most connectWait, until every client connection has been through
// its CONNECT. A reload checks every connection against the new users, reading what the client
// sent in its CONNECT, and nats-server 2.15 reads it without the lock under which a connection
// still connecting writes it: a data race (reloadAuthorization's isClientAuthorized against
// processConnect), which the race detector reports and which could judge a half-read login.
// A connection that has been through its CONNECT shows its user in Connz, read under that lock
// (on a bus whose config names users, which is when Reload waits).
// A client accepted in the moment between this and the reload is not covered; the moment is
// the reload's own few milliseconds, where before it was the whole reload.
func (e *Embedded) waitForConnects() {
	deadline := time.Now().Add(connectWait)
	for {
		cz, err := e.srv.Connz(&server.ConnzOptions{Username: true, Limit: math.MaxInt32})
		if err != nil {
			return
		}
		connecting := false
		for _, c := range cz.Conns {
			if c.AuthorizedUser == "" {
				connecting = true
				break
			}
		}
		if !connecting || time.Now().After(deadline) {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// CheckedAccounts is an accounts config parsed as the embedded bus will read it, kept for the
// reload that makes it live (Embedded.CheckAccounts).
type CheckedAccounts struct {
	e        *Embedded
	accounts []byte
	opts     *server.Options // nil once used: the server keeps the options it is given
	served   *servedAccounts // what the parse after the reload reuses
}

// CheckAccounts parses accounts as this bus will read it from accounts.conf, with the server's
// own settings: ErrRefusedByParser (wrapped) when the server would refuse it. Otherwise the
// parse is kept: once accounts.conf holds exactly these bytes, the returned value's Reload
// makes the change live without parsing it again, so a change costs the server one parse.
func (e *Embedded) CheckAccounts(accounts []byte) (*CheckedAccounts, error) {
	if e.operatorMode {
		return nil, fmt.Errorf("checking an accounts config for the embedded bus: %w", ErrOperatorMode)
	}
	opts, served, err := e.conf.parse(accounts, e.entries, e.served.Load())
	if err != nil {
		return nil, refusedByParser(err)
	}
	return &CheckedAccounts{e: e, accounts: accounts, opts: opts, served: served}, nil
}

// Reload is the bus's Reload, from the parse CheckAccounts made when accounts.conf holds the
// text it checked, and from the file as it is otherwise (rewritten since, or reloaded twice):
// what the server serves is always the file on disk.
func (c *CheckedAccounts) Reload(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("reloading the embedded bus: %w", err)
	}
	c.e.reloadMu.Lock()
	defer c.e.reloadMu.Unlock()
	return c.e.reloadFile(c)
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
