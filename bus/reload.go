package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/meshbus/meshctl/busclient"
	"github.com/nats-io/nats.go"
)

// Reloader makes a written accounts file live on the server that includes it.
type Reloader interface {
	// Reload asks the server to re-read its configuration. For a signal it returns once the
	// signal is sent: the server reloads moments later, so the caller verifies by outcome (a new
	// user can log in) rather than by the return.
	Reload(ctx context.Context) error
	// Describe says how, for plans and logs: "SIGHUP to the pid in /run/nats.pid".
	Describe() string
}

// ErrReloadByOperator is NoReloader's answer: the accounts file is written, and the server that
// includes it has not re-read it.
var ErrReloadByOperator = errors.New("written but not yet live: reload the server")

// NoReloader is for a bus meshctl cannot reload itself; Reload returns ErrReloadByOperator so the
// caller reports the change as pending rather than applied.
func NoReloader() Reloader { return noReloader{} }

type noReloader struct{}

func (noReloader) Reload(context.Context) error { return ErrReloadByOperator }
func (noReloader) Describe() string             { return "none: the operator reloads the server" }

// PIDFileReloader sends SIGHUP, nats-server's reload signal, to the pid written in path (the
// server's `-P`/`pid_file`). The pid is read on every Reload, since a restarted server has a new
// one.
func PIDFileReloader(path string) Reloader { return pidFileReloader{path} }

type pidFileReloader struct{ path string }

func (r pidFileReloader) Describe() string { return "SIGHUP to the pid in " + r.path }

func (r pidFileReloader) Reload(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("reloading the bus: %w", err)
	}
	data, err := os.ReadFile(r.path)
	if err != nil {
		return fmt.Errorf("reloading the bus: reading its pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return fmt.Errorf("reloading the bus: pid file %s holds %q, not a pid", r.path, strings.TrimSpace(string(data)))
	}
	// Checked first, so a stale pid file reads as "not running" rather than as whatever a
	// signal to a missing process says.
	if !ProcessAlive(pid) {
		return fmt.Errorf("reloading the bus: pid %d from %s is not running (a stale pid file?)", pid, r.path)
	}
	p, err := os.FindProcess(pid)
	if err == nil {
		err = p.Signal(syscall.SIGHUP)
	}
	if err != nil {
		return fmt.Errorf("reloading the bus: signalling pid %d from %s: %w", pid, r.path, err)
	}
	return nil
}

// CommandReloader runs argv (no shell) to reload the bus — `nats-server --signal reload=<pid>`,
// `systemctl reload nats`, `docker kill -s HUP nats` — and fails if it exits non-zero.
func CommandReloader(argv []string) Reloader { return commandReloader{append([]string(nil), argv...)} }

type commandReloader struct{ argv []string }

func (r commandReloader) Describe() string { return "run " + strings.Join(r.argv, " ") }

// maxReloadOutput bounds how much of a failed command's output goes into the error: enough to
// read the reason, not a page of logs in every error line.
const maxReloadOutput = 2048

func (r commandReloader) Reload(ctx context.Context) error {
	if len(r.argv) == 0 {
		return errors.New("reloading the bus: no reload command given")
	}
	out, err := exec.CommandContext(ctx, r.argv[0], r.argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("reloading the bus: %s: %w%s", r.Describe(), err, commandOutput(out))
	}
	return nil
}

// An AccountsChecker is a Reloader that checks an accounts config with its server's own settings
// and keeps that parse for the reload that makes it live: the embedded bus in this process
// (Embedded.Reloader). A change then costs the server one parse of the whole config, where a
// check followed by a reload parses it twice.
type AccountsChecker interface {
	Reloader
	// CheckAccounts parses accounts as the server will read them from its accounts file:
	// ErrRefusedByParser (wrapped) when it would refuse them. reload makes them live once the
	// file holds exactly these bytes; it reloads the file as it is otherwise.
	CheckAccounts(accounts []byte) (reload func(ctx context.Context) error, err error)
}

type embeddedReloader struct{ e *Embedded }

func (r embeddedReloader) CheckAccounts(accounts []byte) (func(ctx context.Context) error, error) {
	c, err := r.e.CheckAccounts(accounts)
	if err != nil {
		return nil, err
	}
	return c.Reload, nil
}

func (r embeddedReloader) Reload(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("reloading the embedded bus: %w", err)
	}
	return r.e.Reload()
}

func (r embeddedReloader) Describe() string { return "reload the embedded bus in-process" }

// SystemReloader asks the server at t — that server alone — to re-read its config, with a
// request to `$SYS.REQ.SERVER.<its id>.RELOAD` as a user of its system account (nats-server
// 2.10 and later). Unlike a signal it is answered: a reload the server refuses comes back as
// the server's own reason, at once, instead of as a proof that times out. credential gives
// the user to log in as, read at each reload; inbox is the prefix of the inbox it hears the
// answer at, the one subject its grants let it subscribe.
//
// A server that does not let the user in has not loaded an accounts config carrying its
// current password — the first time reload: system is asked for, or after the user was revoked
// and minted anew, the file is written and nothing has made the server read it yet — so that
// answer is ErrReloadByOperator: written, not live, for the operator to reload once by hand.
func SystemReloader(t busclient.Target, credential func() (busclient.Credential, error), inbox string) Reloader {
	return systemReloader{t: t, credential: credential, inbox: inbox}
}

type systemReloader struct {
	t          busclient.Target
	credential func() (busclient.Credential, error)
	inbox      string
}

// reloadRequest is the reload request's subject for the server with this id.
func reloadRequest(id string) string { return "$SYS.REQ.SERVER." + id + ".RELOAD" }

// systemAnswerWait bounds the wait for a server's answer to a reload request: it answers once
// the reload is done or refused, and a reload of tens of thousands of users takes seconds.
const systemAnswerWait = 30 * time.Second

func (r systemReloader) Describe() string {
	return "a request to " + reloadRequest("<id>") + " at " + r.t.Address()
}

func (r systemReloader) Reload(ctx context.Context) error {
	cred, err := r.credential()
	if err != nil {
		return fmt.Errorf("reloading %s: %w", r.t.Address(), err)
	}
	notYet := fmt.Errorf("%w: the server does not let meshctl's system user %s in, so it has not loaded an accounts "+
		"config carrying its current password (the first such file, or the first after the user was revoked): reload "+
		"that server once by hand (nats-server --signal reload=PID), and meshctl reloads it by request from then on",
		ErrReloadByOperator, cred.User)
	c, err := busclient.DialAlone(ctx, r.t, cred, nats.CustomInboxPrefix(r.inbox))
	if errors.Is(err, nats.ErrAuthorization) {
		return notYet
	}
	if err != nil {
		return fmt.Errorf("reloading %s: %w", r.t.Address(), err)
	}
	defer c.Close()
	if !c.AuthRequired() {
		// A server whose accounts name no user yet lets anyone in, as nobody in particular:
		// the login says nothing of the system user.
		return notYet
	}
	subject := reloadRequest(c.ConnectedServerId())
	ctx, cancel := context.WithTimeout(ctx, systemAnswerWait)
	defer cancel()
	msg, err := c.RequestWithContext(ctx, subject, nil)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("reloading %s: nothing answers %s: the server's system account is not $SYS "+
			"(its config sets system_account?), or the server is older than 2.10", r.t.Address(), subject)
	case err != nil:
		return fmt.Errorf("reloading %s: asking %s: %w", r.t.Address(), subject, err)
	}
	var answer struct {
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &answer); err != nil {
		return fmt.Errorf("reloading %s: the answer to %s is not the server's: %w", r.t.Address(), subject, err)
	}
	if answer.Error != nil {
		return fmt.Errorf("reloading %s: the server refused: %s", r.t.Address(), answer.Error.Description)
	}
	return nil
}

// CopyCommand runs argv (no shell) to put an accounts file written on the control host onto
// the server that includes it — scp, rsync, a configuration tool — with every argument
// fileArg replaced by the local file's path. It fails when the command exits non-zero.
func CopyCommand(argv []string, fileArg string) func(ctx context.Context, path string) error {
	argv = slices.Clone(argv)
	return func(ctx context.Context, path string) error {
		if len(argv) == 0 {
			return errors.New("copying the accounts config: no copy command given")
		}
		args := slices.Clone(argv)
		for i, a := range args {
			if a == fileArg {
				args[i] = path
			}
		}
		out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("copying the accounts config: %s: %w%s", strings.Join(argv, " "), err, commandOutput(out))
		}
		return nil
	}
}

// commandOutput is a failed command's output as an error's tail, bounded.
func commandOutput(out []byte) string {
	text := strings.TrimSpace(string(out))
	if text == "" {
		return ""
	}
	if len(text) > maxReloadOutput {
		text = text[:maxReloadOutput] + "… (truncated)"
	}
	return ": " + text
}
