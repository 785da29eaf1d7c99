package accounts

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// One authority: whoever holds the controller's password.
//
// meshctl logs in as two principals beside the controller: its system user, which asks a
// server to reload (reload: system), and each accounts file's generation principal, whose
// login proves which file a server serves (generation.go). Were their passwords minted by
// each state directory, a store restored from the bus, a standby or a CI runner starting from
// an empty directory would each be an authority of its own: unable to prove the file the
// servers serve, they would rewrite it and reload every server for nothing, and unknown to a
// server reloaded by request, never reload it again. So both passwords follow from the
// controller's (state.DerivedPassword): the system user's from it alone, a generation
// principal's from it, the digest of the rendering the file was stamped from, and the server's
// name. Whoever holds the controller's password computes the same passwords, proves a server
// serves a rendering with one login, and has nothing to write to a converged bus.
//
// What an earlier meshctl wrote, with passwords of its own, works too: a record that describes
// the file on disk proves it with the password it holds, whatever made it; a system user's
// hash that refuses the derived password is replaced once (state.SystemPassword), the server
// reloaded as the user it still knows (systemReload); and a file neither a record nor a
// derivation proves is written once more, as the plan shows.

// generationPurpose is state.DerivedPassword's purpose for a generation principal;
// accountOnlyPurpose its purpose in a file of the MESH account alone (bus.accounts: account).
const (
	generationPurpose  = "generation principal"
	accountOnlyPurpose = "generation principal, MESH account alone"
)

// generationPassword is the generation principal's password of a file stamped, for server
// ("" for the single server of bus.url or the embedded bus), from the rendering whose digest
// is renderedDigest, by the holder of controller: derived from the three, and from the file's
// shape (accountOnly) — the two shapes of one rendering are two files, and a server that
// refuses the one while serving the other must not be seen serving it. Without a controller
// password (nothing minted yet) it is random, known to this state directory alone.
func generationPassword(controller, renderedDigest, server string, accountOnly bool) (string, error) {
	if controller != "" {
		purpose := generationPurpose
		if accountOnly {
			purpose = accountOnlyPurpose
		}
		return state.DerivedPassword(controller, purpose, renderedDigest, server), nil
	}
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(raw[:]), nil
}

// derivedGeneration is the generation a's controller would have stamped conf, the file at
// a.Path, with: that of the rendering conf carries. ok is false where a knows no controller.
// Only a login as it shows that conf carries it.
func (a File) derivedGeneration(conf, rendered []byte) (generation, bool) {
	if a.controller == "" {
		return generation{}, false
	}
	sum := digest(rendered)
	alone := accountOnlyFile(conf)
	pw, _ := generationPassword(a.controller, sum, a.Server, alone)
	return generation{File: absPath(a.Path), SHA256: digest(conf), Password: pw, Controller: controllerHashIn(rendered), Rendered: sum,
		AccountOnly: alone}, true
}

// generationOf is the generation conf, the file on disk at a.Path, carries as far as this
// store knows: the record of the file meshctl last wrote there, where it describes conf
// (recorded); otherwise, for a file meshctl stamped (stamped, rendered being conf unstamped),
// the one a's controller would have stamped its rendering with. ok is false where neither is
// known.
func (a File) generationOf(conf, rendered []byte, stamped bool) (g generation, recorded, ok bool) {
	if g, ok := loadGeneration(a.StateDir, a.Server); ok && g.describes(a.Path, conf) {
		return g, true, true
	}
	if !stamped {
		return generation{}, false, false
	}
	g, ok = a.derivedGeneration(conf, rendered)
	return g, false, ok
}

// previousGeneration is the generation of previous, the file on disk at a.Path before a write
// (existed says there was one), as this store knows it: its record (recorded), or the one
// derived from its rendering where a login shows the server serves it. A file the login does
// not prove — stamped by an earlier meshctl with a password of its own, edited by hand, or not
// loaded — is not known: it is written anew rather than reloaded.
func (a File) previousGeneration(ctx context.Context, previous []byte, existed bool) (g generation, recorded, known bool) {
	if !existed {
		return generation{}, false, false
	}
	rendered, stamped := Unstamp(previous)
	g, recorded, known = a.generationOf(previous, rendered, stamped)
	if !known || recorded {
		return g, recorded, known
	}
	if notServed, err := a.serving(ctx, g); err != nil || notServed != "" {
		return generation{}, false, false
	}
	return g, false, true
}

// serveAgain makes the server serve the file on disk, the rendering as meshctl stamped it,
// with generation g (previousGeneration): recorded where this store had no record of it, the
// server having been seen serving it; otherwise left alone where a login shows the server
// serves it, and reloaded and proven where it does not.
func (a File) serveAgain(ctx context.Context, g generation, recorded bool) error {
	if !recorded {
		return saveGeneration(a.StateDir, a.Server, g)
	}
	if notServed, err := a.serving(ctx, g); err == nil && notServed == "" {
		return nil
	}
	return a.reloadAgain(ctx, g)
}

// systemReload reloads the server at t by a request as meshctl's system user
// (bus.SystemReloader): with the password derived from the controller's password in stateDir,
// and, where the server does not let that in, with one it may still know the user by, until it
// loads a file carrying the derived one's hash — that of the controller's previous password
// during a rotation (previous), and the one an earlier meshctl minted at random and kept in
// stateDir (state.ReadLegacySystemPassword).
type systemReload struct {
	t        busclient.Target
	stateDir string
	previous string
}

// systemReloader is how a server of the description reloaded by request (reload: system) is
// reloaded, with the system user's passwords of the state directory stateDir.
func systemReloader(t busclient.Target, stateDir string) bus.Reloader {
	return systemReload{t: t, stateDir: stateDir}
}

func (r systemReload) Describe() string { return r.reloader("").Describe() }

func (r systemReload) reloader(password string) bus.Reloader {
	return bus.SystemReloader(r.t, func() (busclient.Credential, error) {
		return busclient.Credential{User: render.SystemUser, Password: password}, nil
	}, render.Inbox(render.SystemUser))
}

func (r systemReload) Reload(ctx context.Context) error {
	controller, err := state.ReadControllerPassword(r.stateDir)
	if err != nil {
		return fmt.Errorf("reloading %s: %w", r.t.Address(), err)
	}
	passwords := []string{state.SystemPasswordFor(controller)}
	if r.previous != "" {
		passwords = append(passwords, state.SystemPasswordFor(r.previous))
	}
	if legacy := state.ReadLegacySystemPassword(r.stateDir); legacy != "" {
		passwords = append(passwords, legacy)
	}
	for i, pw := range slices.Compact(passwords) {
		// Each refused login is ErrReloadByOperator, and the next password is tried; the last
		// one's answer is the reload's.
		err = r.reloader(pw).Reload(ctx)
		if i > 0 && errors.Is(err, nats.ErrConnectionClosed) {
			// Asked as a system user the new config no longer knows, the server closes the
			// connection the moment it reloads, before it answers: the proof that follows
			// every reload says whether it took.
			return nil
		}
		if !errors.Is(err, bus.ErrReloadByOperator) {
			return err
		}
	}
	return err
}

// AfterRotation is a with every server reloaded by request told the controller's previous
// password, whose system user the servers still know until they load the rotated config.
func (a File) AfterRotation(previous string) File {
	set := func(s File) File {
		if r, ok := s.Reloader.(systemReload); ok {
			r.previous = previous
			s.Reloader = r
		}
		return s
	}
	a = set(a)
	others := make([]File, len(a.Others))
	for i, o := range a.Others {
		others[i] = set(o)
	}
	a.Others = others
	return a
}
