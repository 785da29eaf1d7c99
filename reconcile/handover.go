package reconcile

import (
	"context"
	"time"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// ackGraces are the graces of m's seats' former holders at now (render.AckGraces): those the
// next apply begins, from the holders store last applied, and those of the handovers it
// recorded within the last ack wait. A handover's time is when the apply that made it was
// recorded, after the server took the accounts config that made it.
func ackGraces(ctx context.Context, store *state.Store, m *model.Mesh, now time.Time) ([]render.AckGrace, error) {
	holders, err := store.Holders(ctx)
	if err != nil {
		return nil, err
	}
	var longest time.Duration // no handover older than the longest grace can hold one now
	for _, seat := range m.Seats {
		longest = max(longest, render.GraceOf(m, seat))
	}
	changes, err := store.Handovers(ctx, now.Add(-longest))
	if err != nil {
		return nil, err
	}
	handovers := make([]render.Handover, len(changes))
	for i, c := range changes {
		handovers[i] = render.Handover{Seat: c.Seat, From: model.Instance{Node: c.From.Node, Module: c.From.Module}, At: c.At}
	}
	return render.AckGraces(m, holdingOf(holders), handovers, now), nil
}

// graceEnds is when the first grace running after this reconcile ends, as the store now says
// (render.FirstGraceEnd); zero when none does, or when the store cannot say.
func (s *Session) graceEnds(ctx context.Context, m *model.Mesh) time.Time {
	graces, err := ackGraces(ctx, s.Store, m, time.Now())
	if err != nil {
		return time.Time{}
	}
	return render.FirstGraceEnd(graces)
}
