package reconcile

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// SyncAccounts re-renders the accounts config after a credential was issued, rotated or
// revoked, and makes it live without touching streams or consumers: on an external bus by
// its reload method, on an embedded bus served by a running `meshctl watch` by asking it
// to reload, and on an embedded bus that is not running by writing the file it will load
// when it starts. It returns what it did, for the operator.
func SyncAccounts(ctx context.Context, m *model.Mesh, store *state.Store) (string, error) {
	hashes, err := store.Hashes(ctx)
	if err != nil {
		return "", err
	}
	data := render.AccountsConfig(render.Derive(m).Principals, hashes)
	a := Accounts{Path: m.Bus.AccountsFile, Reloader: reloaderFor(m.Bus.Reload)}
	what := "the accounts config at " + a.Path + " is rewritten and reloaded (" + a.Reloader.Describe() + ")"
	if m.Bus.Embedded() {
		a.Path = filepath.Join(store.Dir(), "bus", "accounts.conf")
		if _, pid, ok := bus.RunningEmbeddedProcess(store.Dir()); ok {
			a.Reloader = signalReloader{pid: pid}
			what = fmt.Sprintf("the embedded bus served by meshctl pid %d reloads the accounts config", pid)
		} else {
			a.Reloader = atNextStart{}
			what = "the embedded bus is not running; it loads the new accounts config when it next starts"
		}
	}
	if err := a.write(ctx, data); err != nil {
		return "", err
	}
	return what, nil
}

// atNextStart reloads nothing: the file is read when the embedded bus next starts.
type atNextStart struct{}

func (atNextStart) Reload(context.Context) error { return nil }
func (atNextStart) Describe() string             { return "read when the embedded bus next starts" }
