package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/meshbus/meshctl/state"
)

func init() {
	register("state", command{summary: "rebuild a lost state directory from the store kept on the bus (state restore)", run: runState})
}

const stateHelp = `
Usage: meshctl state restore -f DIR --state NEWDIR --controller-password-file FILE
       meshctl state restore -f DIR --state NEWDIR --controller-creds FILE   (bus.auth: jwt)

On an external bus or cluster, meshctl keeps a copy of its state store on the bus itself:
every credential's hash and revocation, every enrolled node's key and sealed membership,
every declaration, the holder changes and the apply history, in a JetStream bucket only
the controller may read or write, written before each command that changed the store
returns. Never a password: the controller's password stays with the operator.

restore rebuilds the store in NEWDIR (a new control host, after a lost disk) from that
copy, joining the bus as the controller with the password in FILE — knowing it is what
proves the same authority. It is the same store: every issued credential still logs in,
enrolled agents keep taking their declarations without enrolling again, the bus still
names it as its manager, and a diff afterwards is clean. meshctl's own system user and
the proof of which accounts config a server serves follow from the controller's
password, so the restored store sees each server serve its config with one login, and
writes and reloads nothing there; a config it cannot prove that way (one an earlier
meshctl wrote) is written once more, with the same users, and seen served.

With bus.auth: jwt the copy also holds each principal's user key and the user JWT last
issued for it, and the keys still to revoke; the controller logs in with its creds, not
a password. restore joins the bus with the creds in --controller-creds FILE (the lost
host's STATE/controller.creds, kept with your other secrets), checks they are the
restored store's controller, and keeps them in NEWDIR/controller.creds. It writes
nothing to the servers: every issued user still logs in, a plan afterwards is the one the
lost store would have made, and a revocation through it takes effect. The controller is
not minted anew: a new key would be a second controller until a push revoked the old
one, and a standby restored that way would revoke its leader's. The operator store
(bus.operator) is the admin's, read where the description names it.

NEWDIR must hold no store. The embedded bus keeps its store beside it, in its state
directory: the two are lost together, and there is nothing on the bus to restore.

Example:
  meshctl state restore -f mesh/ --state /var/lib/meshctl --controller-password-file /root/controller.password
  meshctl state restore -f mesh/ --state /var/lib/meshctl --controller-creds /root/controller.creds
`

func runState(ctx context.Context, e *env, args []string) int {
	f := newFlags(e, "state", stateHelp)
	dir := f.dirFlag()
	sf := f.restorableStateFlag()
	positional, done, code := f.parse(args)
	if done {
		return code
	}
	if len(positional) != 1 || positional[0] != "restore" {
		e.errorf("state: want the verb restore (meshctl state restore -f DIR --state NEWDIR --controller-password-file FILE, or with bus.auth: jwt --controller-creds FILE)")
		return exitError
	}
	m, code := loadDescription(ctx, e, *dir)
	if code != exitOK {
		return code
	}
	if m.Bus.JWT() && *sf.credsFile == "" {
		e.errorf("state restore: --controller-creds is required with bus.auth: jwt: the controller's creds are what prove this is the store that manages the bus")
		return exitError
	}
	if !m.Bus.JWT() && *sf.passwordFile == "" {
		e.errorf("state restore: --controller-password-file is required: the controller's password is what proves this is the store that manages the bus")
		return exitError
	}
	if ok, err := state.Exists(*sf.dir); err != nil || ok {
		if err == nil {
			err = fmt.Errorf("%s holds a state store already; restore into a new directory", *sf.dir)
		}
		e.errorf("state restore: %v", err)
		return exitError
	}
	return sf.restoreIfEmpty(ctx, e, m)
}

// readPasswordFile reads a password kept alone in a file, as STATE/controller.password keeps
// it: one line, its end trimmed.
func readPasswordFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	pw := strings.TrimRight(string(data), "\r\n")
	if pw == "" {
		return "", fmt.Errorf("%s holds no password", path)
	}
	return pw, nil
}
