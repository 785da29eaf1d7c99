package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// A bus of several servers — a cluster — is one Target with Others: a client connection
// starts at whichever answers and moves to another when its server goes away, while what
// concerns one server alone (its accounts file, its reload, the proof that it serves that
// file) dials that server's own Target, never the pool, so an answer cannot come from a
// different server than the one asked.

// Cluster is the Target of a bus of several servers: a connection to it starts at any of
// them and moves to another when its server goes away; every server's fingerprint pins it.
func Cluster(servers []Target) Target {
	if len(servers) == 0 {
		return Target{}
	}
	t := servers[0]
	var urls, pins []string
	for _, s := range servers {
		urls = append(urls, s.URL)
		if s.Fingerprint != "" && !slices.Contains(pins, s.Fingerprint) {
			pins = append(pins, s.Fingerprint)
		}
	}
	t.Others = strings.Join(urls[1:], ",")
	t.Fingerprint = strings.Join(pins, " ")
	return t
}

// servers is t's URL and its Others, each the Target of one server.
func (t Target) servers() []Target {
	out := []Target{{URL: t.URL}}
	if t.Others != "" {
		for _, u := range strings.Split(t.Others, ",") {
			out = append(out, Target{URL: u})
		}
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

// SystemReloader asks one server to reload through the system account: it logs in to t alone
// as user, with the password read from passwordFile on every reload (so a rotated password
// needs no restart of meshctl), and requests $SYS.REQ.SERVER.<that server's id>.RELOAD. Unlike
// a signal, the server answers once it has re-read its config, with the error when it refused
// it (nats-server 2.10 or later).
func SystemReloader(t Target, user, passwordFile string) Reloader {
	return systemReloader{t: Target{URL: t.URL, Fingerprint: t.Fingerprint}, user: user, passwordFile: passwordFile}
}

type systemReloader struct {
	t                  Target
	user, passwordFile string
}

func (r systemReloader) Describe() string {
	return fmt.Sprintf("ask %s through the system account as %q", r.t.Address(), r.user)
}

// systemReloadWait bounds the wait for a server's answer to a reload request: a server
// re-reading thousands of users answers well within it.
const systemReloadWait = 10 * time.Second

// ErrReloadRefused is returned (wrapped) when the server answered a reload request with an
// error: it did not take its config, and the error says why.
var ErrReloadRefused = errors.New("the server refused to reload")

func (r systemReloader) Reload(ctx context.Context) error {
	data, err := os.ReadFile(r.passwordFile)
	if err != nil {
		return fmt.Errorf("reloading %s: reading the system user's password file: %w", r.t.Address(), err)
	}
	password := strings.TrimSpace(string(data))
	c, err := Dial(ctx, r.t, Credential{User: r.user, Password: password})
	if err != nil {
		return fmt.Errorf("reloading %s through the system account: %w", r.t.Address(), err)
	}
	defer c.Close()
	id := c.ConnectedServerId()
	ctx, cancel := context.WithTimeout(ctx, systemReloadWait)
	defer cancel()
	msg, err := c.RequestWithContext(ctx, "$SYS.REQ.SERVER."+id+".RELOAD", nil)
	if err != nil {
		return fmt.Errorf("reloading %s through the system account (is %q a user of the system account?): %w", r.t.Address(), r.user, err)
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("reloading %s: the server's answer does not read: %w", r.t.Address(), err)
	}
	if resp.Error != nil {
		return fmt.Errorf("reloading %s: %w: %s", r.t.Address(), ErrReloadRefused, resp.Error.Description)
	}
	return nil
}
