package bus

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// The control socket is how one meshctl process asks another to act on the embedded bus the
// other serves. It replaces signals: a SIGHUP sent to the pid in bus.json killed any process
// that had not subscribed to it, and only `meshctl watch` had, so `credentials issue` beside a
// one-shot `apply` serving the bus ended that apply with exit 129. A request on a socket can
// reach only a process that is listening for it, and it carries the answer back, so the asker
// learns whether the reload took instead of guessing.
//
// Every process that runs the embedded bus serves the socket at StateDir/bus/control.sock
// (0600, in the 0700 bus directory) for as long as the bus runs. The protocol is one JSON line
// each way:
//
//	{"op":"reload"}                     → {"error":""} once the server re-read its config
//	{"op":"hold","pid":N}  → {"error":""}, then the connection stays open
//
// A hold is a lease: while its connection is open, a one-shot process that serves the bus
// keeps it up past its own work (Embedded.WaitReleased), so another process in the middle of
// an apply on that bus — `apply --wait` that queued behind it — does not see it vanish. The
// kernel closes the connection when the holder exits however it exits, so a lease never
// outlives its process.
const controlSockName = "control.sock"

// ErrNotServed means no process serves the embedded bus of a state directory any more: its
// control socket is gone or nobody answers on it.
var ErrNotServed = errors.New("no meshctl process serves the embedded bus")

// controlTimeout bounds reading a request and writing an answer, so a client that connects and
// says nothing cannot pin a goroutine of the server.
const controlTimeout = 5 * time.Second

// reloadTimeout bounds a reload asked over the socket: re-reading the config of a bus with
// thousands of users takes well under a second; a minute means the server is stuck.
const reloadTimeout = time.Minute

type controlRequest struct {
	Op  string `json:"op"`
	PID int    `json:"pid,omitempty"`
}

type controlReply struct {
	Error string `json:"error"`
	// Stopping says the bus is being stopped: the asker is told so as ErrNotServed, since
	// by the time it reads the answer nobody serves the bus.
	Stopping bool `json:"stopping,omitempty"`
}

// errStopping is what a request gets while the bus stops.
var errStopping = errors.New("the embedded bus is stopping")

// Holder is a process that holds a lease on the embedded bus.
type Holder struct {
	PID int
}

func (h Holder) String() string { return fmt.Sprintf("meshctl pid %d", h.PID) }

// control is the server side of the socket.
type control struct {
	e    *Embedded
	ln   net.Listener
	path string
	wg   sync.WaitGroup

	mu      sync.Mutex
	holders map[net.Conn]Holder
	changed chan struct{} // closed and replaced whenever holders changes
	closed  bool
}

// serveControl starts the control socket. The caller holds the bus directory's lock, so a
// socket already at the path is a dead process's and is removed first.
func serveControl(e *Embedded) (*control, error) {
	path := filepath.Join(e.dir, controlSockName)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing the stale control socket %s: %w", path, err)
	}
	var ln net.Listener
	err := withSocketAddr(path, func(addr string) error {
		var err error
		ln, err = net.Listen("unix", addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("serving the control socket %s: %w", path, err)
	}
	// Closing removes the path Listen was given, which may be the /proc alias of a long path;
	// the real path is removed by close itself.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		os.Remove(path)
		return nil, fmt.Errorf("serving the control socket %s: %w", path, err)
	}
	c := &control{e: e, ln: ln, path: path, holders: map[net.Conn]Holder{}, changed: make(chan struct{})}
	c.wg.Add(1)
	go c.accept()
	return c, nil
}

func (c *control) accept() {
	defer c.wg.Done()
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			return // closed
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.serve(conn)
		}()
	}
}

func (c *control) serve(conn net.Conn) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(controlTimeout))
	r := bufio.NewReader(conn)
	line, err := r.ReadBytes('\n')
	if err != nil {
		return
	}
	var req controlRequest
	reply := func(err error) bool {
		rep := controlReply{Stopping: errors.Is(err, errStopping)}
		if err != nil {
			rep.Error = err.Error()
		}
		data, _ := json.Marshal(rep)
		_ = conn.SetWriteDeadline(time.Now().Add(controlTimeout))
		_, werr := conn.Write(append(data, '\n'))
		return werr == nil
	}
	if err := json.Unmarshal(line, &req); err != nil {
		reply(fmt.Errorf("not a control request: %w", err))
		return
	}
	switch req.Op {
	case "reload":
		_ = conn.SetDeadline(time.Now().Add(reloadTimeout))
		reply(c.reload())
	case "hold":
		if !c.hold(conn, Holder{PID: req.PID}) {
			reply(errStopping)
			return
		}
		defer c.release(conn)
		if !reply(nil) {
			return
		}
		// The lease lasts until the holder closes its end (or dies); nothing more is read.
		_ = conn.SetDeadline(time.Time{})
		_, _ = r.ReadByte()
	default:
		reply(fmt.Errorf("unknown control request %q", req.Op))
	}
}

// reload reloads the bus unless it is stopping: a reload racing a shutdown is not one the
// asker could rely on, and it is told so.
func (c *control) reload() error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed || !c.e.srv.Running() {
		return errStopping
	}
	return c.e.Reload()
}

func (c *control) hold(conn net.Conn, h Holder) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.holders[conn] = h
	c.signal()
	return true
}

func (c *control) release(conn net.Conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.holders, conn)
	c.signal()
}

// signal wakes whoever waits on changed; c.mu is held.
func (c *control) signal() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// close stops serving: no new request is taken, every lease connection is closed, and the
// socket file is removed before the bus directory's lock is released, so it never removes
// the socket of the next process to serve the bus.
func (c *control) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	for conn := range c.holders {
		conn.Close()
	}
	c.mu.Unlock()
	c.ln.Close()
	c.wg.Wait()
	os.Remove(c.path)
}

// Holders are the processes holding a lease on this bus now.
func (e *Embedded) Holders() []Holder {
	if e.control == nil {
		return nil
	}
	e.control.mu.Lock()
	defer e.control.mu.Unlock()
	out := make([]Holder, 0, len(e.control.holders))
	for _, h := range e.control.holders {
		out = append(out, h)
	}
	return out
}

// WaitReleased waits until no process holds a lease on this bus, or ctx ends. waiting is told
// who holds one each time the set changes while it is not empty, so the operator knows why a
// finished command has not exited yet. A one-shot command calls it before stopping the bus it
// served; `meshctl watch`, which stops only when told to, does not.
func (e *Embedded) WaitReleased(ctx context.Context, waiting func([]Holder)) error {
	if e.control == nil {
		return nil
	}
	for {
		e.control.mu.Lock()
		n, changed := len(e.control.holders), e.control.changed
		e.control.mu.Unlock()
		if n == 0 {
			return nil
		}
		if waiting != nil {
			waiting(e.Holders())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// ControlReloader reloads the embedded bus that another meshctl process serves from stateDir,
// through its control socket. Reload returns once that process has reloaded the bus, with the
// server's own error if it refused; ErrNotServed (wrapped) when nobody serves it any more.
func ControlReloader(stateDir string) Reloader {
	return controlReloader{path: filepath.Join(stateDir, busDirName, controlSockName)}
}

type controlReloader struct{ path string }

// CheckAccounts makes controlReloader an AccountsChecker that parses nothing itself: the
// process serving the bus parses accounts.conf when it reloads (Embedded.Reload, in memory),
// refuses what its parser refuses, and answers over the socket with the server's reason, so
// a change made by a one-shot command beside it costs one parse there rather than one here
// and one there. What the reload refuses is put back by the caller, as any refused reload is.
func (r controlReloader) CheckAccounts([]byte) (func(ctx context.Context) error, error) {
	return r.Reload, nil
}

func (r controlReloader) Describe() string {
	return "ask the meshctl process serving the embedded bus, over " + r.path
}

func (r controlReloader) Reload(ctx context.Context) error {
	conn, err := dialControl(ctx, r.path)
	if err != nil {
		return fmt.Errorf("reloading the embedded bus: %w", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, reloadTimeout+controlTimeout)
	defer cancel()
	if err := request(ctx, conn, controlRequest{Op: "reload"}); err != nil {
		return fmt.Errorf("reloading the embedded bus through %s: %w", r.path, err)
	}
	return nil
}

// Hold takes a lease on the embedded bus served from stateDir, so that the one-shot process
// serving it keeps it up until release is called (or this process exits). ErrNotServed
// (wrapped) when nobody serves it.
func Hold(ctx context.Context, stateDir string) (release func(), err error) {
	path := filepath.Join(stateDir, busDirName, controlSockName)
	conn, err := dialControl(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("holding the embedded bus: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	if err := request(rctx, conn, controlRequest{Op: "hold", PID: os.Getpid()}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("holding the embedded bus through %s: %w", path, err)
	}
	var once sync.Once
	return func() { once.Do(func() { conn.Close() }) }, nil
}

// dialControl connects to the control socket at path; a missing socket or one nobody listens
// on is ErrNotServed.
func dialControl(ctx context.Context, path string) (net.Conn, error) {
	var conn net.Conn
	err := withSocketAddr(path, func(addr string) error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, "unix", addr)
		return err
	})
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
		return nil, fmt.Errorf("%w (nothing answers on %s)", ErrNotServed, path)
	}
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", path, err)
	}
	return conn, nil
}

// request sends req and reads the answer, within ctx.
func request(ctx context.Context, conn net.Conn, req controlRequest) error {
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	data, _ := json.Marshal(req)
	if _, err := conn.Write(append(data, '\n')); err != nil {
		return fmt.Errorf("%w: %w", ErrNotServed, err)
	}
	line, err := bufio.NewReader(conn).ReadBytes('\n')
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The server closed without answering: it stopped while this was asked.
		return fmt.Errorf("%w: the serving process closed the control socket without answering (%w)", ErrNotServed, err)
	}
	_ = conn.SetDeadline(time.Time{})
	var rep controlReply
	if err := json.Unmarshal(line, &rep); err != nil {
		return fmt.Errorf("an unreadable answer on the control socket: %w", err)
	}
	if rep.Stopping {
		return fmt.Errorf("%w: %s", ErrNotServed, rep.Error)
	}
	if rep.Error != "" {
		return errors.New(rep.Error)
	}
	return nil
}

// maxSocketPath is the longest path a unix socket address holds on Linux (sun_path is 108
// bytes with its terminating NUL); macOS allows 103.
const maxSocketPath = 103

// withSocketAddr calls use with an address for the socket at path. A state directory deep
// enough to push path past the kernel's limit is reached through /proc/self/fd/N/, a
// descriptor of the directory itself: the kernel resolves that alias like any directory, so
// the socket still lives — with its permissions — in the bus directory.
func withSocketAddr(path string, use func(addr string) error) error {
	if len(path) <= maxSocketPath {
		return use(path)
	}
	if runtime.GOOS != "linux" {
		return fmt.Errorf("the socket path %s is %d bytes, more than a unix socket address holds (%d); use a shorter state directory",
			path, len(path), maxSocketPath)
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer dir.Close()
	return use("/proc/self/fd/" + strconv.Itoa(int(dir.Fd())) + "/" + filepath.Base(path))
}
