package main

import (
	"context"
	"fmt"
	"time"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/controller"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/state"
)

// rotateWait bounds how long `credentials rotate` waits for the controller to declare the new
// credential of an instance on an enrolled node: a running controller notices the revoked one
// within seconds (controller.DefaultCredentialPoll) and declares in a reconcile; longer means
// no controller runs, and the command says so.
const rotateWait = 30 * time.Second

// declaredNode says whether the controller hands out principal's credential (an instance on an
// enrolled node), and to which node. `credentials issue` refuses such a principal: the password
// it printed would be replaced at the controller's next pass, a credential that stops working
// moments later. `credentials rotate` has the controller declare the new one instead.
func declaredNode(ctx context.Context, e *env, st *state.Store, m *model.Mesh, principal string) (node string, declared bool, code int) {
	node, declared, err := controller.Distributes(ctx, st, m, principal)
	if err != nil {
		e.errorf("%v", err)
		return "", false, exitError
	}
	return node, declared, exitOK
}

// rotateDeclared rotates the credential of an instance on an enrolled node: the old one is
// revoked and the accounts config made live through the same write, reload and check as any
// credential, so it stops working now; the controller then mints the new one, seals it to the
// node's key and declares it in a new generation, which the node's agent writes to
// DIR/<user>.json. No password is printed: the sealed declaration is its only copy. It waits,
// bounded, for the store to record that declaration, and says so when it did not come.
func rotateDeclared(ctx context.Context, e *env, st *state.Store, m *model.Mesh, principal, node string) int {
	before, err := st.Declared(ctx, node)
	if err != nil {
		e.errorf("%v", err)
		return exitError
	}
	if _, err := st.Revoke(ctx, principal); err != nil {
		e.errorf("%v", err)
		return exitError
	}
	what, err := reconcile.SyncAccounts(ctx, m, st)
	if err != nil {
		e.errorf("%s's credential is revoked in the store, but the accounts config could not be made live: %v; the next apply or watch cycle makes it so, and the controller then declares the new one", principal, err)
		return exitError
	}
	fmt.Fprintln(e.stderr, what)
	fmt.Fprintf(e.stderr, "%s's old credential is revoked: it can no longer log in; waiting for the controller to declare the new one to node %s\n", principal, node)
	if m.Bus.Embedded() {
		if _, _, running := bus.RunningEmbeddedProcess(st.Dir()); !running {
			e.errorf("no 'meshctl watch' serves the embedded bus, so no controller runs: %s stays locked until watch runs and declares its new credential to node %s", principal, node)
			return exitError
		}
	}
	oldHash := before.Credentials[principal].Hash
	wctx, cancel := context.WithTimeout(ctx, rotateWait)
	defer cancel()
	for {
		generation, done, err := controller.Redeclared(wctx, st, node, principal, oldHash, before.Generation)
		if err == nil && done {
			fmt.Fprintf(e.stderr, "%s's new credential is declared to node %s, sealed to its key, in generation %d; its agent writes it to %s.json\n",
				principal, node, generation, principal)
			return exitOK
		}
		select {
		case <-ctx.Done():
			e.errorf("interrupted: %s's old credential is revoked; the controller declares the new one to node %s once it notices", principal, node)
			return exitInterrupted
		case <-wctx.Done():
			e.errorf("the controller did not declare %s's new credential within %s: is 'meshctl watch' running, and its log free of errors? %s stays locked until the controller declares it to node %s",
				principal, rotateWait, principal, node)
			return exitError
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// rotateController replaces the controller's password (reconcile.RotateController): the new one
// goes into STATE/controller.password, never printed, and every server is seen serving a config
// that carries it.
func (c credentialChange) rotateController(ctx context.Context, req issueRequest) int {
	if req.out != "" {
		c.e.errorf("the controller's new password goes into %s/controller.password, never elsewhere; -o writes nothing for it", c.st.Dir())
		return exitError
	}
	if c.m.Bus.JWT() {
		return c.rotateControllerJWT(ctx)
	}
	// A store that does not manage the bus changes nothing, itself included.
	if err := reconcile.CheckManager(ctx, c.m, c.st); err != nil {
		c.e.errorf("%v", err)
		return exitError
	}
	what, err := reconcile.RotateController(ctx, c.m, c.st, req.cost)
	behind, err := splitReplicaBehind(err)
	if err != nil {
		c.e.errorf("%v", err)
		return exitError
	}
	fmt.Fprintln(c.e.stderr, what)
	fmt.Fprintf(c.e.stderr, "the controller's password is rotated: %s/controller.password holds the new one, and the previous one no longer logs in; "+
		"hand the new file to every holder of the previous one (a standby watch's --controller-password-file, the CI secret, a backup)\n", c.st.Dir())
	return replicaBehind(c.e, behind)
}
