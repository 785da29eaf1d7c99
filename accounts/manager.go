package accounts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/internal/printable"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// One manager per bus.
//
// The accounts config is the key to every host of the mesh: it holds each principal's hash,
// and a state store knows only the hashes it minted. A second store in front of the same bus —
// a rebuilt control host, a CI runner with a fresh directory, a colleague's laptop — does not
// let its controller in with the file in use, and installing its own rendering "so the
// controller can log in" replaced every other principal's hash with a lock: every host out,
// and "0 changes" said. So a store installs a file that lets its controller in only where no
// other store manages the bus:
//
//   - the file in use names no working controller (the operator's first file, an account with
//     nobody in it), or
//   - it names this store as its manager (ManagerLine: every file meshctl writes says which
//     store wrote it — the store's identity survives a copy of the state directory, a restore
//     from backup), or, for a file written before files named their manager, this store's own
//     record of exactly that file (generation.go).
//
// Where the file in use is not on this host (a server elsewhere, copied to by bus.servers[].copy),
// the server is asked: a server that refuses this store's controller has users, and so a
// manager. Anything else is ErrNotManager, which changes nothing and names the manager.

// ErrNotManager is returned (wrapped) when another state store manages the bus: this one
// changes nothing on it.
var ErrNotManager = errors.New("another meshctl state store manages this bus")

// managerPrefix starts the line naming, at the top of every accounts file meshctl writes, the
// store that wrote it. The line is a comment to the server, and no secret: an identity, a host,
// a directory and a time.
const managerPrefix = "# meshctl manager: "

// Manager is what an accounts file says of the store that wrote it.
type Manager struct {
	Store   string    `json:"store"` // the store's identity (state's ID)
	Host    string    `json:"host"`
	Dir     string    `json:"dir"` // the state directory, as that host named it
	Written time.Time `json:"written"`
}

func (m Manager) String() string {
	// Quoted, each of them: the line is read back from a file, and an error prints it.
	return fmt.Sprintf("state store %s in %s on host %s (last wrote the accounts config %s)",
		printable.Quote(m.Store), printable.Quote(m.Dir), printable.Quote(m.Host), m.Written.UTC().Format(time.RFC3339))
}

// ManagerLine is the line that names store's state directory as the manager of the file it
// writes now.
func ManagerLine(ctx context.Context, store *state.Store) (string, error) {
	id, err := store.ID(ctx)
	if err != nil {
		return "", err
	}
	host, _ := os.Hostname()
	dir := store.Dir()
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	data, err := json.Marshal(Manager{Store: id, Host: host, Dir: dir, Written: time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return "", err
	}
	return managerPrefix + string(data) + "\n", nil
}

// CutManagerLine reads conf's manager line, when its first line is one, and returns the rest.
func CutManagerLine(conf []byte) (Manager, []byte, bool) {
	rest, ok := bytes.CutPrefix(conf, []byte(managerPrefix))
	if !ok {
		return Manager{}, conf, false
	}
	line, after, found := bytes.Cut(rest, []byte("\n"))
	if !found {
		return Manager{}, conf, false
	}
	var m Manager
	if json.Unmarshal(line, &m) != nil {
		return Manager{}, conf, false
	}
	return m, after, true
}

// WrittenBy sets what every server's file of a is stamped with: the line naming the store that
// writes it, and the controller's password its generation principals are derived from.
func (a File) WrittenBy(manager, controller string) File {
	a.Manager, a.controller = manager, controller
	others := make([]File, len(a.Others))
	for i, o := range a.Others {
		o.Manager, o.controller = manager, controller
		others[i] = o
	}
	a.Others = others
	return a
}

// MayInstall says whether store may install a rendering of its own in a's place, where the file
// in use does not let its controller in (see above); password is its controller's, tried on the
// server when the file in use is not on this host.
func MayInstall(ctx context.Context, store *state.Store, a File, t busclient.Target, password string) error {
	data, err := os.ReadFile(a.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return serverUnmanaged(ctx, a.Path, t, password)
	}
	if err != nil {
		return fmt.Errorf("reading the accounts config in use: %w", err)
	}
	return fileUnmanaged(ctx, store, a, data)
}

// fileUnmanaged is MayInstall for the file in use, data.
func fileUnmanaged(ctx context.Context, store *state.Store, a File, data []byte) error {
	users, err := parseUsers(a.asServed(data))
	if err != nil {
		// Not a file a meshctl wrote, nor one any server would serve: the rendering replaces it.
		return nil
	}
	if u, ok := users[render.ControllerUser]; !ok || u.Password == "" || u.Password == render.LockedHash {
		return nil // no controller logs in with it: nobody manages the bus yet
	}
	id, err := store.ID(ctx)
	if err != nil {
		return err
	}
	m, _, named := CutManagerLine(data)
	switch {
	case named && m.Store == id:
		return nil // this store's own file: its controller's credential was rotated
	case !named:
		if g, ok := loadGeneration(a.StateDir, a.Server); ok && g.describes(a.Path, data) {
			return nil // written by this store before files named their manager
		}
		return fmt.Errorf("%w: the accounts config at %s lets in a controller whose credential this store (%s) did not mint, "+
			"and does not name the store that wrote it; %s", ErrNotManager, a.Path, store.Dir(), WayOut)
	}
	return fmt.Errorf("%w: the accounts config at %s was written by %s, not by this one (%s); %s",
		ErrNotManager, a.Path, m, store.Dir(), WayOut)
}

// WayOut is what an operator does about ErrNotManager.
const WayOut = "nothing was changed. Run meshctl with the managing state directory (--state), or from the control " +
	"host that holds it (a state directory restored from a backup of it is the same store); if that host is lost, " +
	"rebuild its store in a new directory from the bus: 'meshctl state restore --controller-password-file FILE'"

// serverUnmanaged is MayInstall where the file in use is not on this host: the server says
// whether it has a manager by refusing this store's controller.
func serverUnmanaged(ctx context.Context, path string, t busclient.Target, password string) error {
	if len(t.URL) == 0 {
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := busclient.DialAlone(dctx, t, busclient.Credential{User: render.ControllerUser, Password: password})
	if err == nil {
		c.Close()
		return nil // it lets the controller in: a server with no users at all
	}
	if errors.Is(err, nats.ErrAuthorization) {
		return fmt.Errorf("%w: there is no accounts config at %s on this host, and the server at %s refuses this store's "+
			"controller: its users are another store's; %s", ErrNotManager, path, t.Address(), WayOut)
	}
	// A server not answering has nobody logged in to lock out: its first file is written
	// here, for the operator to start it with (docs/external-server.md, "The first start").
	return nil
}

// MayRewrite is MayInstall for what rewrites the accounts config without a plan (SyncAccounts,
// for `credentials`): the file in use must be this store's to replace, and target's rendering
// in its place must lock out no host by a credential this store neither minted nor revoked
// (plan.LockedOut), which a plan's guard would refuse.
func MayRewrite(ctx context.Context, store *state.Store, a File, target plan.Target) error {
	password, _ := store.StoredControllerPassword(ctx) // none yet: nothing on a server lets it in
	data, err := os.ReadFile(a.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return serverUnmanaged(ctx, a.Path, a.Target, password)
	}
	if err != nil {
		return fmt.Errorf("reading the accounts config in use: %w", err)
	}
	// The file meshctl last wrote, with the controller hash the store holds, is known to let
	// the controller in without a parse of every user and a bcrypt (controller.go).
	admitted := password != "" && (KnownToAdmitController(store, a, a.Path, digest(data)) || AdmitsController(data, password))
	if !admitted {
		if err := fileUnmanaged(ctx, store, a, data); err != nil {
			return err
		}
	}
	live, _ := Unstamp(data)
	if names, n := plan.LockedOut(live, ReadServedUsers, target); n > 0 {
		return fmt.Errorf("%w: rewriting the accounts config at %s would lock out %d user(s) that log in today (%s) "+
			"with credentials this state store neither minted nor revoked; %s", ErrNotManager, a.Path, n, strings.Join(names, ", "), WayOut)
	}
	return AuthUnchanged(a.Path, live, target)
}

// ErrAuthChange is returned (wrapped) where the accounts config would be rewritten without a
// plan — `credentials issue`, `rotate`, `revoke` — while the description's bus.auth is not
// the one the config in use was written for and hosts log in with credentials of the old
// kind: rewriting it would change bus.auth behind the apply that must allow it.
var ErrAuthChange = errors.New("the description changes bus.auth, which only an apply may do")

// AuthUnchanged refuses a rewrite of the accounts config at path, in use as live, with target's
// rendering, when that would lock hosts out for a change of bus.auth.
func AuthUnchanged(path string, live []byte, target plan.Target) error {
	n := plan.Reissues(live, ReadServedUsers, target)
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%w: %d host(s) log in with credentials of the kind the accounts config at %s was written for, "+
		"which the description's bus.auth no longer uses; nothing was changed: run 'meshctl apply --allow-reissue' first "+
		"(or restore bus.auth in the description)", ErrAuthChange, n, path)
}
