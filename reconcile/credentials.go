package reconcile

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/state"
)

// SyncAccounts re-renders the accounts config after a credential was issued, rotated or
// revoked, and makes it live without touching streams or consumers: on an external bus by
// its reload method, on an embedded bus another meshctl process serves by asking that
// process over its control socket, and on an embedded bus that is not running by writing
// the file it will load when it starts. Where a server runs, it succeeds only once the
// server is seen serving the new file (generation.go). It returns what it did, for the
// operator.
//
// It takes the apply lock, waiting for an apply in progress: both write the accounts file,
// and each proves the file it wrote.
func SyncAccounts(ctx context.Context, m *model.Mesh, store *state.Store) (string, error) {
	if m.Bus.Embedded() {
		// Held before waiting for the lock: a one-shot apply that serves the bus and holds
		// the lock would otherwise stop its bus the moment it let go.
		if release, err := bus.Hold(ctx, store.Dir()); err == nil {
			defer release()
		}
	}
	lock, err := state.AcquireLock(ctx, store.Dir(), true, nil)
	if err != nil {
		return "", err
	}
	defer lock.Unlock()
	if err := systemCredential(ctx, store, m, state.DefaultCost); err != nil {
		return "", err
	}
	target, err := desired(ctx, store, m)
	if err != nil {
		return "", err
	}
	line, err := managerLine(ctx, store)
	if err != nil {
		return "", err
	}
	a, _, err := externalAccounts(m, store.Dir())
	if err != nil {
		return "", err
	}
	a = a.withManager(line)
	var what string
	if !m.Bus.Embedded() {
		what = "the accounts config at " + a.Path + " is rewritten and reloaded (" + a.Reloader.Describe() + "), and the server is seen serving it"
		if len(a.Others) > 0 {
			what = fmt.Sprintf("the accounts config of each of the %d servers is rewritten and reloaded, and every server is seen serving it", len(a.Others)+1)
		}
	} else {
		a.Path = filepath.Join(store.Dir(), "bus", "accounts.conf")
		if url, pid, ok := bus.RunningEmbeddedProcess(store.Dir()); ok {
			a.Reloader, a.Target = bus.ControlReloader(store.Dir()), busclient.Target{URL: url}
			what = fmt.Sprintf("the embedded bus served by meshctl pid %d reloaded the accounts config, and is seen serving it", pid)
		} else {
			a.Reloader = atNextStart{}
		}
	}
	if err := mayRewrite(ctx, store, a, target); err != nil {
		return "", err
	}
	removeStaleChecks(a.Path, func(string, ...any) {})
	err = a.write(ctx, target.Rendering())
	switch {
	case errors.Is(err, errAtNextStart):
		return "the embedded bus is not running; it loads the new accounts config when it next starts", nil
	case err != nil:
		return "", err
	}
	return what, nil
}

// atNextStart reloads nothing: the file is read when the embedded bus next starts.
type atNextStart struct{}

func (atNextStart) Reload(context.Context) error { return errAtNextStart }
func (atNextStart) Describe() string             { return "read when the embedded bus next starts" }
