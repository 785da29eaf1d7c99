package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/backoff"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
	"github.com/meshbus/meshctl/wire"
)

// maxRedeclare caps the backoff between attempts at a declaration that keeps failing: each
// attempt may mint and ask for a reconcile, and a bus that refuses every plan (data at stake)
// must not be asked every few seconds for as long as it does.
const maxRedeclare = time.Minute

// declarePass declares to the enrolled nodes, arming the redeclare timer when a declaration
// failed: after Retry, doubling with each failure in a row up to maxRedeclare.
func (l *loop) declarePass(ctx context.Context) {
	// What the next polls compare the store with is the hashes as this pass found them, with
	// what it minted and revoked itself: its own doing is no change to act on, but another
	// process's is, even one made while the pass ran (a revocation between a node's
	// declaration going out and the pass's end), which a digest read after the pass would
	// take in as seen.
	sctx, cancel := l.storeCtx(ctx)
	found, ferr := l.storedCredentials(sctx)
	cancel()
	own := map[string]string{}
	published, err := l.declareAll(ctx, own)
	if l.mesh != nil && ferr == nil {
		for u, h := range own {
			if h == "" {
				delete(found, u)
			} else {
				found[u] = h
			}
		}
		l.credentials = digestOf(found)
	}
	switch {
	case err != nil && ctx.Err() != nil:
		// Cut off by the session's end — watch stopping, or the connection lost, after which
		// the session that joins again declares anew: no failure to retry or alert on.
	case err != nil:
		l.failedPasses++
		wait := backoff.After(l.cfg.Retry, max(maxRedeclare, l.cfg.Retry), l.failedPasses)
		l.log.Error("controller: declaring to the nodes failed; trying again", "error", err, "retry_in", wait)
		l.redeclare.Reset(wait)
	default:
		l.failedPasses = 0
	}
	if l.cfg.Observe != nil {
		l.cfg.Observe(Event{Declared: published, Err: err})
	}
}

// credentialsChanged reports whether the store's credentials changed since the last declaration
// pass. Another process changes them without a word to this one — `credentials rotate` revokes
// an instance's credential and has the bus reloaded through its control socket — and the
// controller, the only carrier of an enrolled node's credentials, must declare the new one then,
// not at watch's next resync. A store it cannot read says nothing changed: the next poll asks
// again.
func (l *loop) credentialsChanged(ctx context.Context) bool {
	if l.mesh == nil || l.credentials == "" {
		return false
	}
	d, err := l.credentialDigest(ctx)
	return err == nil && d != l.credentials
}

// credentialDigest identifies every principal's hash in the store.
func (l *loop) credentialDigest(ctx context.Context) (string, error) {
	sctx, cancel := l.storeCtx(ctx)
	defer cancel()
	creds, err := l.storedCredentials(sctx)
	if err != nil {
		return "", err
	}
	return digestOf(creds), nil
}

// digestOf identifies every principal's hash in hashes.
func digestOf(hashes map[string]string) string {
	users := make([]string, 0, len(hashes))
	for u := range hashes {
		users = append(users, u)
	}
	slices.Sort(users)
	sum := sha256.New()
	for _, u := range users {
		fmt.Fprintf(sum, "%s\x00%s\x00", u, hashes[u])
	}
	return hex.EncodeToString(sum.Sum(nil))
}

// errNotConnected is why a declaration pass did nothing while the controller was off the bus.
var errNotConnected = errors.New("the controller is not connected to the bus; the declarations wait for it")

// declareAll declares to every enrolled node in the description what it runs, where that
// changed, and returns the nodes it published to. A converged pass publishes nothing and mints
// nothing. What it minted and revoked goes into own (declare).
func (l *loop) declareAll(ctx context.Context, own map[string]string) ([]string, error) {
	if l.mesh == nil {
		return nil, nil
	}
	if !l.conn.IsConnected() {
		// Off the bus (nats.go reconnecting): a declaration would mint and have the bus
		// reloaded only to fail at its publish, and the retry would mint again. Nothing is
		// minted until it can go out.
		return nil, errNotConnected
	}
	sctx, cancel := l.storeCtx(ctx)
	enrolled, err := l.cfg.Store.Enrolments(sctx)
	cancel()
	if err != nil {
		return nil, err
	}
	// Read once a pass: only an operator's command changes it, never the pass itself.
	sctx, cancel = l.storeCtx(ctx)
	byHand, err := issuedByHand(sctx, l.cfg.Store, l.jwtMesh())
	cancel()
	if err != nil {
		return nil, err
	}
	var errs []error
	var published []string
	for _, e := range enrolled {
		if !slices.ContainsFunc(l.mesh.Nodes, func(n model.Node) bool { return n.Name == e.Node }) {
			continue
		}
		did, err := l.declare(ctx, e, byHand, own)
		if err != nil {
			errs = append(errs, fmt.Errorf("declaring to node %s: %w", e.Node, err))
		}
		if did {
			published = append(published, e.Node)
		}
	}
	return published, errors.Join(errs...)
}

// declare publishes node's declaration when it changed: a new generation carrying every
// instance's membership sealed to the node's key — the sealed copy kept from last time where the
// credential is unchanged, a fresh one minted where it is new or was revoked (ChangeOf decides
// which), and none for an instance in byHand, whose credential an operator issued by hand.
// Credentials are made live before the node hears of them; those of instances that left the
// node are revoked. The hash of each credential it minted goes into own, and "" for each it
// revoked.
//
// An instance issued by hand keeps its credential when its node enrols, rather than the
// enrolment refusing the node: the host using it works, and what an operator of a running bus
// expects of a node joining is that nothing that works stops. The agent is given no membership
// for it and leaves the instance's file alone; revoking the credential (`meshctl credentials
// revoke`) hands the instance to the agent, declared a fresh one at the next pass.
func (l *loop) declare(ctx context.Context, e state.Enrolment, byHand map[string]bool, own map[string]string) (published bool, err error) {
	d := DeclarationFor(l.mesh, e.Node)
	for i := range d.Instances {
		d.Instances[i].ByHand = byHand[d.Instances[i].User]
	}
	last, err := l.cfg.Store.Declared(ctx, e.Node)
	if err != nil {
		return false, err
	}
	stored, err := l.storedCredentials(ctx)
	if err != nil {
		return false, err
	}
	change := changeFor(l.jwtMesh(), last, stored, &d)
	if !change.Changed() {
		return false, nil
	}
	minted, stored, live, err := l.renew(ctx, change, own)
	if err != nil {
		return false, err
	}
	// What the store holds now, the users just minted included, is what is declared: their
	// JWTs are part of the declaration and of its digest, and their keys are recorded.
	after := changeFor(l.jwtMesh(), last, stored, &d)
	change.Digest = after.Digest
	creds, err := l.sealMemberships(&d, e.PublicKey, last, change.Keep, minted, stored, l.jwtMesh())
	if err != nil {
		return false, err
	}
	if live {
		if err := l.sync(ctx); err != nil {
			return false, fmt.Errorf("making the node's credentials live: %w", err)
		}
	}
	d.Generation = last.Generation + 1
	if err := l.publishDeclaration(ctx, d, change.Digest, creds); err != nil {
		return false, err
	}
	if l.declared != nil {
		l.declared[e.Node] = d.Generation
	}
	l.log.Info("controller: declared to a node what it runs", "node", e.Node, "generation", d.Generation,
		"instances", len(d.Instances), "minted", len(change.Mint), "kept", len(change.Keep), "by_hand", len(change.ByHand),
		"departed", len(change.Departed))
	l.sayByHand(d)
	return true, nil
}

// sayByHand logs, once for as long as it lasts, each instance of d declared without a
// membership because its credential was issued by hand: an operator who expected the agent to
// carry it learns why the agent wrote none, and how to hand it over.
func (l *loop) sayByHand(d wire.Declaration) {
	if l.byHand == nil {
		l.byHand = map[string]bool{}
	}
	now := map[string]bool{}
	for _, in := range d.Instances {
		now[in.User] = in.ByHand
	}
	for u := range l.byHand {
		if inst, _ := host.InstanceOf(u); inst.Node == d.Node && !now[u] {
			delete(l.byHand, u) // the agent's now, or gone: said again should it come back
		}
	}
	for _, in := range d.Instances {
		if !in.ByHand || l.byHand[in.User] {
			continue
		}
		l.byHand[in.User] = true
		l.log.Info("controller: kept a credential issued by hand; the node's agent is given no membership for it and leaves it alone",
			"node", d.Node, "user", in.User, "to_hand_it_to_the_agent", "meshctl credentials revoke "+in.User)
	}
}

// renew mints the credentials change mints and revokes those of the departed, and returns the
// minted memberships with the store's credentials after (storedCredentials), and whether they
// must be made live on the bus before the node hears of them; each of those principals' new
// credential ("" once revoked) goes into own.
func (l *loop) renew(ctx context.Context, change DeclarationChange, own map[string]string) (minted map[string]wire.Membership,
	creds map[string]string, live bool, err error) {
	if l.jwtMesh() {
		minted, live, err = l.renewJWT(ctx, change)
		if err != nil {
			return nil, nil, false, err
		}
	} else {
		var secrets map[string]string
		if l.mesh.Bus.Nkeys() {
			secrets, err = l.cfg.Store.MintNkeys(ctx, change.Mint, state.OpDeclare)
		} else {
			secrets, err = l.cfg.Store.Mint(ctx, change.Mint, l.cfg.Cost, state.OpDeclare)
		}
		if err = l.kept(ctx, err); err != nil {
			return nil, nil, false, err
		}
		for _, u := range change.Departed {
			if _, err := l.cfg.Store.Revoke(ctx, u); l.kept(ctx, err) != nil {
				return nil, nil, false, err
			}
		}
		minted = make(map[string]wire.Membership, len(secrets))
		for u, secret := range secrets {
			minted[u] = l.membershipOf(u, secret)
		}
		live = change.ChangesCredentials()
	}
	if creds, err = l.storedCredentials(ctx); err != nil {
		return nil, nil, false, err
	}
	for _, u := range slices.Concat(change.Mint, change.Departed) {
		own[u] = creds[u]
	}
	return minted, creds, live, nil
}

// sealMemberships gives each instance of d its membership — the sealed copy declared last time
// for the users in keep, its freshly minted one sealed to key for the others but those issued
// by hand, which get none — and returns the credentials to record with the declaration, each
// with its credential in stored (in a jwt mesh, its user's key alone).
func (l *loop) sealMemberships(d *wire.Declaration, key []byte, last state.Declared, keep []string,
	minted map[string]wire.Membership, stored map[string]string, jwtMesh bool) (map[string]state.DeclaredCredential, error) {
	creds := map[string]state.DeclaredCredential{}
	for i := range d.Instances {
		in := &d.Instances[i]
		if in.ByHand {
			continue // the operator's: nothing sealed, nothing recorded, never departed
		}
		if slices.Contains(keep, in.User) {
			in.Membership = last.Credentials[in.User].Sealed
		} else {
			var err error
			if in.Membership, err = sealedMembership(key, minted[in.User]); err != nil {
				return nil, err
			}
		}
		hash := stored[in.User]
		if jwtMesh {
			hash, _ = splitJWTCredential(hash)
		}
		creds[in.User] = state.DeclaredCredential{Hash: hash, Sealed: in.Membership}
	}
	return creds, nil
}

// publishDeclaration publishes d to its node and records it, with its digest and the
// credentials it carries, as what the node was declared last.
func (l *loop) publishDeclaration(ctx context.Context, d wire.Declaration, digest string, creds map[string]state.DeclaredCredential) error {
	data, err := json.Marshal(d)
	if err != nil {
		return err
	}
	if _, err := l.js.Publish(ctx, render.DeclareSubject(d.Node), data); err != nil {
		return fmt.Errorf("publishing generation %d: %w", d.Generation, err)
	}
	return l.kept(ctx, l.cfg.Store.RecordDeclaration(ctx, d.Node, state.Declared{Generation: d.Generation, Digest: digest,
		DeclaredAt: time.Now(), Credentials: creds}))
}
