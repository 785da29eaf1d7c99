package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
	"github.com/meshbus/meshctl/wire"
)

// enrol answers an enrolment request at the address its payload carries.
func (l *loop) enrol(ctx context.Context, node string, m jetstream.Msg) Settle {
	if l.mesh == nil {
		// Which nodes exist is the description's to say, and none was handed over yet.
		return Settle{Verb: Nak, Delay: l.cfg.Retry, Reason: "no description reconciled yet to check the node against"}
	}
	ask, err := JudgeEnrolment(l.mesh, m.Subject(), m.Data())
	if errors.Is(err, wire.ErrNotEnrolment) {
		// No address of the node's own to answer at: nothing can be said to anyone.
		return Settle{Verb: Term, Reason: err.Error()}
	}
	if err != nil {
		l.refuse(ask, err)
		return Settle{Verb: Ack, Reason: err.Error()}
	}
	e := state.NodeEnrolment{Node: node, EnrolPrincipal: render.EnrolUser(node), NodePrincipal: render.NodeUser(node),
		PublicKey: ask.Key, Nkey: l.mesh.Bus.Nkeys()}
	var membership wire.Membership
	if l.jwtMesh() {
		// Minted before the store's transaction, which records it as it spends the
		// enrolment identity's user; one minted for an enrolment refused is dropped unused.
		j, err := l.account()
		var user state.JWTUser
		if err == nil {
			membership, user, err = l.mintUser(j, render.DerivePrincipals(l.mesh, nil), e.NodePrincipal)
		}
		if err != nil {
			l.log.Error("controller: cannot mint an enrolling node's user; the request is taken again", "node", node, "error", err)
			return Settle{Verb: Nak, Delay: l.cfg.Retry, Reason: err.Error()}
		}
		e.JWT = &user
	}
	sctx, cancel := l.storeCtx(ctx)
	password, err := l.cfg.Store.EnrolNode(sctx, e, l.cfg.Cost)
	cancel()
	err = l.kept(ctx, err)
	if errors.Is(err, state.ErrNoEnrolmentCredential) {
		err = fmt.Errorf("%w: a replayed or second enrolment of node %s: its enrolment credential was used already "+
			"or never issued; issue a fresh one with `meshctl credentials issue %s`", ErrRefused, node, render.EnrolUser(node))
		l.refuse(ask, err)
		return Settle{Verb: Ack, Reason: err.Error()}
	}
	if err != nil {
		return l.window.After(err, published(m), time.Now())
	}
	l.window.After(nil, published(m), time.Now())
	if !l.jwtMesh() {
		membership = l.membershipOf(e.NodePrincipal, password)
	}
	answer := wire.EnrolAnswer{Node: node}
	if answer.Membership, err = sealedMembership(ask.Key, membership); err != nil {
		return Settle{Verb: Term, Reason: err.Error()}
	}
	// Answered before the credentials change on the bus: the reload that makes the node's
	// credential live also locks the enrolment identity out, and the server disconnects it,
	// answer unheard, if the answer comes after. So the node joins moments after it is told,
	// trying until its credential is live.
	answerErr := l.answer(ask.Reply, answer)
	if err := l.sync(ctx); err != nil {
		l.log.Error("controller: node enrolled, but its credential is not live yet; the next reconcile makes it so",
			"node", node, "error", err)
	}
	if answerErr != nil {
		// The credential is used: a redelivery would be refused as a second enrolment.
		return Settle{Verb: Ack, Reason: fmt.Sprintf("enrolled node %s, but the answer could not be sent (%v): issue a fresh enrolment credential", node, answerErr)}
	}
	l.Mesh(l.mesh) // declared to next, on this goroutine: the pass owns its retry
	return Settle{Verb: Ack, Reason: fmt.Sprintf("enrolled node %s and answered at the address its request carried", node)}
}

// refuse answers a refused enrolment, when there is an address to answer at, and logs it.
func (l *loop) refuse(ask EnrolAsk, why error) {
	l.log.Warn("controller: refused an enrolment", "node", ask.Node, "why", why.Error())
	if ask.Reply == "" {
		return
	}
	if err := l.answer(ask.Reply, wire.EnrolAnswer{Node: ask.Node, Refused: why.Error()}); err != nil {
		l.log.Error("controller: the refusal could not be sent", "node", ask.Node, "error", err)
	}
}

// answer sends an enrolment answer on core NATS and waits for the server to have it.
func (l *loop) answer(reply string, a wire.EnrolAnswer) error {
	data, _ := json.Marshal(a)
	if err := l.conn.Publish(reply, data); err != nil {
		return err
	}
	return l.conn.FlushTimeout(l.cfg.StoreTimeout)
}
