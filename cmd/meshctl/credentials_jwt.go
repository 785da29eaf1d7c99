package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/nats-io/jwt/v2"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/internal/atomicfile"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// With bus.auth: jwt a credential is a user of the mesh's account: issue mints a fresh key and
// a user JWT granting exactly the principal's grants, which logs in at once on any server that
// holds the account (the key it replaces, if any, is revoked by the push that follows); revoke
// revokes the key in the account's JWT, and the push disconnects it on every server. Either
// exits 0 only once every server applies the account's JWT.

// jwtChange issues or revokes (verb) the principal's credential in jwt mode. credsOut, when
// set, is a file to write a standard creds file to (0600) instead of the membership.
func (c credentialChange) jwtChange(ctx context.Context, verb string, req issueRequest, credsOut string) int {
	if verb != "revoke" {
		if code := c.heldByAnAgent(ctx); code != exitOK {
			return code
		}
	}
	j, done, err := reconcile.OpenJWT(ctx, c.m, c.st)
	if err != nil {
		c.e.errorf("%v", err)
		return exitError
	}
	defer done()
	// Every change is kept on the bus too, before the command returns, under the apply lock
	// on the bus, taken after the state directory's as an apply takes them. A store that never
	// applied has no controller to join as, and no copy on any bus yet.
	stop, err := reconcile.KeepOnBus(ctx, c.m, c.st)
	if err != nil && !errors.Is(err, state.ErrNoController) {
		c.e.errorf("%v", err)
		return exitError
	}
	if stop != nil {
		defer stop()
	}
	if verb == "revoke" {
		had, err := j.RevokePrincipals(ctx, []string{c.principal})
		behind, err := splitReplicaBehind(err)
		if err != nil {
			c.e.errorf("%v", err)
			return exitError
		}
		if len(had) == 0 {
			c.e.errorf("%s has no credential to revoke", c.principal)
			return exitError
		}
		if code := c.pushJWT(ctx, j, "revoke", behind); code != exitOK {
			return code
		}
		fmt.Fprintf(c.e.stderr, "%s is revoked: every server applies the account's JWT that revokes it, and disconnected it\n", c.principal)
		return exitOK
	}
	// The file is claimed before anything is minted: one that exists is refused unchanged.
	var file *membershipFile
	out := req.out
	if credsOut != "" {
		out = credsOut
	}
	if out != "" {
		if file, err = claimMembershipFile(out, req.force); err != nil {
			c.e.errorf("%v", err)
			return exitError
		}
	}
	reach, err := accounts.BusTarget(c.m)
	if err != nil {
		c.e.errorf("%v", err)
		return exitError
	}
	p, _ := c.desired.Principal(c.principal)
	creds, err := j.Issue(ctx, p, req.operation)
	behind, err := splitReplicaBehind(err)
	if err != nil {
		if file != nil {
			file.abandon()
		}
		c.e.errorf("%v", err)
		return exitError
	}
	code := c.pushJWT(ctx, j, "issue", behind)
	if err := c.deliverCreds(creds, reach, file, credsOut != ""); err != nil {
		c.e.errorf("%s's credential is minted, but %v; issue it again", c.principal, err)
		return exitError
	}
	return code
}

// heldByAnAgent refuses to issue or rotate here a user an enrolled node's agent holds: the
// node's own, or an instance's the controller declares to it. A key minted here replaces the
// agent's, which the push then revokes, and the agent would be left holding a dead one.
func (c credentialChange) heldByAnAgent(ctx context.Context) int {
	if node, enrolled, code := enrolledNode(ctx, c.e, c.st, c.desired, c.principal); code != exitOK {
		return code
	} else if enrolled {
		c.e.errorf("node %s enrolled: its agent holds the user the controller minted for it, and a key issued here would revoke it; to replace it, enrol the node again: 'meshctl credentials issue %s', then the agent enrols again with that credential",
			node, render.EnrolUser(node))
		return exitError
	}
	if node, declared, code := declaredNode(ctx, c.e, c.st, c.m, c.principal); code != exitOK {
		return code
	} else if declared {
		c.e.errorf("%s runs on node %s, which enrolled: the controller hands its user out, sealed to the node, and a key issued here would revoke the agent's; to replace it, 'meshctl credentials revoke %s', and the controller declares a fresh one to the node's agent",
			c.principal, node, c.principal)
		return exitError
	}
	return exitOK
}

// pushJWT pushes the account's JWT for the mesh as the store holds it now, and says which
// servers do not apply it. behind is a change of the store its copy on the bus did not take,
// said as the push's own: the change is made, and the command exits 2 all the same.
func (c credentialChange) pushJWT(ctx context.Context, j *accounts.JWT, verb string, behind error) int {
	_, _, err := j.Sync(ctx, c.desired.Principals)
	if b, failed := splitReplicaBehind(err); failed != nil {
		c.e.errorf("the credential is %sd in the store, but not every server applies the account's JWT that carries it: %v; the next apply pushes it", verb, failed)
		return exitError
	} else if b != nil {
		behind = b
	}
	if behind != nil {
		c.e.errorf("every server applies the account's JWT, but %v", behind)
		return exitError
	}
	return exitOK
}

// deliverCreds hands over the credential once: into file, as a creds file (asCreds) or a
// membership, or the membership on stdout.
func (c credentialChange) deliverCreds(creds accounts.Creds, reach busclient.Target, file *membershipFile, asCreds bool) error {
	if asCreds {
		if err := file.write(creds.File); err != nil {
			return fmt.Errorf("its creds file could not be written to %s: %w", file.path, err)
		}
		fmt.Fprintf(c.e.stderr, "%s's credential is minted; its creds file, the only copy of its seed, is %s (0600)\n", c.principal, file.path)
		return nil
	}
	kp, err := jwtUserKey(creds)
	if err != nil {
		return err
	}
	mem := c.membership(kp, true, reach)
	mem.JWT = creds.JWT
	line := membershipLine(mem)
	if file != nil {
		if err := file.write(line); err != nil {
			return fmt.Errorf("its membership could not be written to %s: %w", file.path, err)
		}
		fmt.Fprintf(c.e.stderr, "%s's credential is minted; its membership, the only copy of its seed, is in %s (0600)\n", c.principal, file.path)
		return nil
	}
	fmt.Fprintf(c.e.stderr, "%s's credential is minted; the membership below is the only copy of its seed\n", c.principal)
	_, _ = c.e.stdout.Write(line)
	return nil
}

// jwtUserKey is the seed of a credential's creds file.
func jwtUserKey(creds accounts.Creds) (string, error) {
	kp, err := jwt.ParseDecoratedUserNKey(creds.File)
	if err != nil {
		return "", err
	}
	seed, err := kp.Seed()
	return string(seed), err
}

// jwtCredentials is each principal's user in jwt mode, as credentials list shows a credential:
// when its JWT in force was issued, and by which operation.
func jwtCredentials(ctx context.Context, st *state.Store) ([]state.Credential, error) {
	users, err := st.JWTUsers(ctx)
	if err != nil {
		return nil, err
	}
	var creds []state.Credential
	for _, u := range users {
		creds = append(creds, state.Credential{Principal: u.Principal, MintedAt: u.IssuedAt, Operation: u.Operation})
	}
	return creds, nil
}

// rotateControllerJWT replaces the controller's user in jwt mode: a fresh key and user JWT go
// into STATE/controller.creds, and the push that follows revokes the previous key on every
// server. The new user logs in as soon as it is written (a user JWT signed by the account's key
// needs no push); the previous one is refused only once every server applies the push, which
// is what exit 0 says.
func (c credentialChange) rotateControllerJWT(ctx context.Context) int {
	j, done, err := reconcile.OpenJWT(ctx, c.m, c.st)
	if err != nil {
		c.e.errorf("%v", err)
		return exitError
	}
	defer done()
	p, _ := c.desired.Principal(render.ControllerUser)
	creds, err := j.Issue(ctx, p, "credentials rotate")
	behind, err := splitReplicaBehind(err)
	if err != nil {
		c.e.errorf("%v", err)
		return exitError
	}
	path := filepath.Join(c.st.Dir(), reconcile.ControllerCredsFile)
	if err := atomicfile.Write(path, creds.File); err != nil {
		c.e.errorf("the controller's new user is minted, but %s could not be written: %v; rotate it again", path, err)
		return exitError
	}
	if code := c.pushJWT(ctx, j, "rotate", behind); code != exitOK {
		return code
	}
	fmt.Fprintf(c.e.stderr, "the controller's user is rotated: %s holds the new creds, and every server applies the account's JWT that revokes the previous key; "+
		"hand the new file to every holder of the previous one (a standby watch, the CI secret, a backup)\n", path)
	return exitOK
}
