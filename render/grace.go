package render

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/meshbus/meshctl/model"
)

// PullWindow is how long a pull request a former holder sent before the handover may still be
// answered: the server hands a waiting request messages until it expires, whatever the
// requester's grants say since, and the client libraries ask for 30 seconds by default
// (nats.go's Consume and Fetch, nats.js, nats-py). A push consumer has none: the reload that
// takes the delivery grant away drops the subscription at once.
const PullWindow = 30 * time.Second

// GraceOf is how long a seat's former holder may go on acknowledging after a handover: the
// longest its worker waits for an acknowledgement (its ack wait, or the longest step of its
// backoff), and on a pull consumer the pull window before it, in which a request sent before
// the handover may still be handed work.
func GraceOf(m *model.Mesh, seat model.Seat) time.Duration {
	wait := seat.Consumer.AckWait
	for _, b := range seat.Consumer.Backoff {
		wait = max(wait, b)
	}
	if m.Bus.Consumers != model.ConsumersPush {
		wait += PullWindow
	}
	return wait
}

// AckGrace is a seat's former holder that may still acknowledge the work it took before the
// seat was handed over, until Until, and nothing else of the seat: it may not bind the seat's
// worker, take new work, hear the seat's accepts or report its events. Without it a holder
// replaced in the middle of its work, still running, would see each acknowledgement refused,
// and the new holder would do that work again one ack wait later. After one ack wait the server
// has handed every delivery the former holder left unacknowledged to the new one, and an
// acknowledgement from it would only say that the work was done twice.
type AckGrace struct {
	Seat   string         `json:"seat"`
	Holder model.Instance `json:"holder"`
	// Until is when the grace ends: GraceOf after the apply that handed the seat over was
	// recorded. It is zero in the plan that hands the seat over, whose grace starts once that
	// apply is.
	Until time.Time `json:"until,omitzero"`
	// For is how long the grace lasts from that apply (GraceOf), as a Go duration ("1m0s").
	For string `json:"for"`
}

// Handover is a change of a seat's holder that an apply brought the bus to: From held the seat
// until the apply that was recorded At.
type Handover struct {
	Seat string
	From model.Instance
	At   time.Time
}

// AckGraces are the graces (AckGrace) of m's seats' former holders at now: of each holder last
// applied (applied) that m takes its seat from, starting with the apply to come; and of each
// handover's From whose ack wait after the handover runs past now. None for a former holder
// that m makes the seat's holder again or has no longer, or of a seat m has no longer: the
// first takes all of the seat's work again, and neither of the others has anything left to
// acknowledge. One for each seat and former holder, the latest; sorted by seat and holder.
func AckGraces(m *model.Mesh, applied []model.Holding, handovers []Handover, now time.Time) []AckGrace {
	if len(applied) == 0 && len(handovers) == 0 {
		return nil
	}
	seats := make(map[string]time.Duration, len(m.Seats)) // each seat's grace (GraceOf)
	for _, s := range m.Seats {
		seats[s.Name] = GraceOf(m, s)
	}
	holder := make(map[string]model.Instance, len(m.Holding))
	for _, h := range m.Holding {
		holder[h.Seat] = h.Holder
	}
	var modules map[string]*model.Module // made for the first former holder that needs it
	former := func(seat string, inst model.Instance) bool {
		if _, ok := seats[seat]; !ok {
			return false
		}
		if h, holds := holder[seat]; holds && h == inst {
			return false
		}
		if modules == nil {
			modules = modulesOf(m)
		}
		mod := modules[inst.Module]
		return mod != nil && slices.Contains(mod.On, inst.Node)
	}
	type key struct {
		seat string
		inst model.Instance
	}
	graces := map[key]AckGrace{}
	for _, h := range handovers {
		until := h.At.Add(seats[h.Seat])
		k := key{h.Seat, h.From}
		if now.Before(until) && former(h.Seat, h.From) && until.After(graces[k].Until) {
			graces[k] = AckGrace{Seat: h.Seat, Holder: h.From, Until: until, For: seats[h.Seat].String()}
		}
	}
	for _, h := range applied {
		if former(h.Seat, h.Holder) {
			// Handed over by the apply to come: its grace, a newer one than any before, starts
			// when that apply is recorded.
			graces[key{h.Seat, h.Holder}] = AckGrace{Seat: h.Seat, Holder: h.Holder, For: seats[h.Seat].String()}
		}
	}
	out := make([]AckGrace, 0, len(graces))
	for _, g := range graces {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b AckGrace) int {
		return cmp.Or(strings.Compare(a.Seat, b.Seat), strings.Compare(a.Holder.Node, b.Holder.Node),
			strings.Compare(a.Holder.Module, b.Holder.Module))
	})
	return out
}

// FirstGraceEnd is when the first of graces to end ends, zero when none has an end yet: the
// moment a reconcile takes that former holder's acknowledgements away.
func FirstGraceEnd(graces []AckGrace) time.Time {
	var first time.Time
	for _, g := range graces {
		if !g.Until.IsZero() && (first.IsZero() || g.Until.Before(first)) {
			first = g.Until
		}
	}
	return first
}

// acksOf indexes graces by former holder: the seats whose work each may still acknowledge.
func acksOf(graces []AckGrace) map[model.Instance][]string {
	if len(graces) == 0 {
		return nil
	}
	acks := map[model.Instance][]string{}
	for _, g := range graces {
		acks[g.Holder] = append(acks[g.Holder], g.Seat)
	}
	return acks
}
