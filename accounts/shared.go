package accounts

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// A bus shared with the operator's own accounts (bus.accounts: account).
//
// The file then holds the MESH account alone, and the operator's config includes it inside its
// own accounts block, beside accounts and a system account meshctl never reads: the file is the
// whole block's rendering without its first and last lines (render.AccountOnly), checked with
// the server's parser inside a block of its own (File.check), and read back as the whole block
// (Unstamp), so plans, generations and proofs are those of the whole block. The generation
// principal is a user of MESH, so its login proves the file as before. meshctl writes no
// system user: a server reloaded by request is asked as the operator's, whose credential the
// description names by its files (operatorSystemReloader).

// accountOnlyFile reports whether conf is a file render.AccountOnly wrote.
func accountOnlyFile(conf []byte) bool {
	_, ok := render.WholeBlock(conf)
	return ok
}

// inShape reports whether conf, the file on disk, is not known to be of the other shape than
// a writes: a file meshctl stamped with the whole block where a writes the account alone, or
// the account alone where a writes the whole block, is written again, since the server's
// config includes the one a writes. A file meshctl did not stamp is not known to be either.
func (a File) inShape(conf []byte) bool {
	alone := accountOnlyFile(conf)
	if a.AccountOnly && !alone {
		_, stamped := Unstamp(conf)
		return !stamped
	}
	return a.AccountOnly == alone
}

// notInShape is why a file not inShape is written again, for a plan.
func (a File) notInShape() string {
	if a.AccountOnly {
		return fmt.Sprintf("the accounts config at %s holds the whole accounts block, and bus.accounts: account writes the MESH "+
			"account alone, which the server's config includes inside its own accounts block; it is written and reloaded again", a.Path)
	}
	return fmt.Sprintf("the accounts config at %s holds the MESH account alone, and bus.accounts writes the whole accounts "+
		"block, which the server's config includes at its top level; it is written and reloaded again", a.Path)
}

// asServed is data, the file at a.Path, as the server reads it: inside the server's own
// accounts block where the file holds the account alone.
func (a File) asServed(data []byte) []byte {
	if a.AccountOnly {
		return render.WithinAccounts(data)
	}
	return data
}

// operatorSystemReload reloads the server at t by a request as the operator's system user
// (bus.system_user), its secret read from its file at each reload, so a password the operator
// changes is used from the next reload on.
type operatorSystemReload struct {
	t    busclient.Target
	user model.SystemUser
}

// operatorSystemReloader is how a server of a bus shared with the operator's accounts is
// reloaded by request (reload: system).
func operatorSystemReloader(t busclient.Target, user model.SystemUser) bus.Reloader {
	return operatorSystemReload{t: t, user: user}
}

func (r operatorSystemReload) reloader() bus.Reloader {
	// The operator's user is no principal of the mesh's, with no inbox of its own: the
	// server's default prefix.
	return bus.SystemReloader(r.t, r.credential, "_INBOX")
}

func (r operatorSystemReload) Describe() string {
	return r.reloader().Describe() + " as the operator's system user " + r.name()
}

// name is how messages name the user: by its name, or by its seed's file.
func (r operatorSystemReload) name() string {
	if r.user.SeedFile != "" {
		return "(nkey seed in " + r.user.SeedFile + ")"
	}
	return r.user.User
}

func (r operatorSystemReload) Reload(ctx context.Context) error {
	err := r.reloader().Reload(ctx)
	if errors.Is(err, bus.ErrReloadByOperator) {
		// Not "written, reload by hand": the user is the operator's, never in a file of
		// meshctl's, so a server that refuses it refuses it for good.
		return fmt.Errorf("reloading %s: the server does not let in the operator's system user %s (bus.system_user): "+
			"check its credential, and that the server's system account names it", r.t.Address(), r.name())
	}
	return err
}

// credential reads the user's secret from its file; an error names the file, never its text.
func (r operatorSystemReload) credential() (busclient.Credential, error) {
	path := r.user.PasswordFile
	if r.user.SeedFile != "" {
		path = r.user.SeedFile
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return busclient.Credential{}, fmt.Errorf("reading the operator's system user's credential (bus.system_user): %w", err)
	}
	secret := strings.TrimSpace(string(data))
	if secret == "" {
		return busclient.Credential{}, fmt.Errorf("the operator's system user's credential file %s (bus.system_user) is empty", path)
	}
	if r.user.SeedFile != "" {
		kp, err := busclient.UserKey(secret)
		if err != nil {
			return busclient.Credential{}, fmt.Errorf("the operator's system user's seed file %s (bus.system_user): %w", path, err)
		}
		// An nkey user is named by its public key, no secret, in what a connection says.
		pub, err := kp.PublicKey()
		if err != nil {
			return busclient.Credential{}, fmt.Errorf("the operator's system user's seed file %s (bus.system_user): %w", path, err)
		}
		return busclient.Credential{User: pub, Seed: secret}, nil
	}
	return busclient.Credential{User: r.user.User, Password: secret}, nil
}
