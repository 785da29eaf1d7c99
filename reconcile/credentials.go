package reconcile

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/state"
)

// SyncAccounts re-renders the accounts config after a credential was issued, rotated or
// revoked, and makes it live without touching streams or consumers: on an external bus by
// its reload method, on an embedded bus another meshctl process serves by asking that
// process over its control socket, and on an embedded bus that is not running by writing
// the file it will load when it starts. Where a server runs, it succeeds only once the
// server is seen serving the new file (accounts/generation.go). It returns what it did, for the
// operator.
//
// It takes the apply lock, waiting for an apply in progress: both write the accounts file,
// and each proves the file it wrote.
func SyncAccounts(ctx context.Context, m *model.Mesh, store *state.Store) (string, error) {
	unlock, err := lockAccounts(ctx, m, store)
	if err != nil {
		return "", err
	}
	defer unlock()
	if err := systemCredential(ctx, store, m, state.DefaultCost); err != nil {
		return "", err
	}
	controller, err := store.StoredControllerPassword(ctx)
	if err != nil && !errors.Is(err, state.ErrNoController) {
		return "", err
	}
	target, err := desired(ctx, store, m)
	if err != nil {
		return "", err
	}
	a, what, err := accountsOfStore(ctx, m, store, controller)
	if err != nil {
		return "", err
	}
	if err := accounts.MayRewrite(ctx, store, a, target); err != nil {
		return "", err
	}
	return writeRendering(ctx, a, target, what)
}

// lockAccounts takes the apply lock of store's state directory for a rewrite of the accounts
// config without a plan, waiting for an apply in progress, and on an embedded bus holds it up
// first; unlock lets both go.
func lockAccounts(ctx context.Context, m *model.Mesh, store *state.Store) (unlock func(), err error) {
	release := func() {}
	if m.Bus.Embedded() {
		// Held before waiting for the lock: a one-shot apply that serves the bus and holds
		// the lock would otherwise stop its bus the moment it let go.
		if r, err := bus.Hold(ctx, store.Dir()); err == nil {
			release = r
		}
	}
	var l cycleLock
	if err := l.acquire(ctx, store.Dir(), true, nil); err != nil {
		release()
		return nil, err
	}
	return func() {
		l.release()
		release()
	}, nil
}

// accountsOfStore is the accounts of the bus m names as store writes them with the controller's
// password controller (writtenBy) — on an embedded bus through the meshctl process serving it,
// or for its next start — and what writing them does, for the operator.
func accountsOfStore(ctx context.Context, m *model.Mesh, store *state.Store, controller string) (accounts.File, string, error) {
	line, err := accounts.ManagerLine(ctx, store)
	if err != nil {
		return accounts.File{}, "", err
	}
	a, _, err := accounts.External(m, store.Dir())
	if err != nil {
		return accounts.File{}, "", err
	}
	a = a.WrittenBy(line, controller)
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
	return a, what, nil
}

// writeRendering writes target's rendering through a (accounts.File.Write) and returns what it did:
// what, where a file was written.
func writeRendering(ctx context.Context, a accounts.File, target plan.Target, what string) (string, error) {
	accounts.RemoveStaleChecks(a.Path, func(string, ...any) {})
	before := serverDigests(a)
	err := a.Write(ctx, target.Rendering())
	switch {
	case errors.Is(err, accounts.ErrAtNextStart):
		return "the embedded bus is not running; it loads the new accounts config when it next starts", nil
	case err != nil:
		return "", err
	case maps.Equal(before, serverDigests(a)):
		return "the accounts config on disk is already this store's rendering, and the bus is seen serving it: nothing was written", nil
	}
	return what, nil
}

// serverDigests is the digest of each server's file of a, by path ("" where there is none).
func serverDigests(a accounts.File) map[string]string {
	out := map[string]string{}
	for _, s := range a.Servers() {
		out[s.Path], _, _ = accounts.FileDigest(s.Path)
	}
	return out
}

// atNextStart reloads nothing: the file is read when the embedded bus next starts.
type atNextStart struct{}

func (atNextStart) Reload(context.Context) error { return accounts.ErrAtNextStart }
func (atNextStart) Describe() string             { return "read when the embedded bus next starts" }

// CheckManager returns accounts.ErrNotManager (wrapped) where store may not rewrite the accounts config
// of the bus m names (accounts.MayRewrite): what `credentials` asks before it mints or revokes anything,
// so that a store that does not manage the bus changes nothing, its own store included.
func CheckManager(ctx context.Context, m *model.Mesh, store *state.Store) error {
	if m.Bus.Embedded() {
		return nil // the state directory's own bus
	}
	target, err := desired(ctx, store, m)
	if err != nil {
		return err
	}
	a, _, err := accounts.External(m, store.Dir())
	if err != nil {
		return err
	}
	return accounts.MayRewrite(ctx, store, a, target)
}
