package plan

import (
	"strings"

	"github.com/meshbus/meshctl/render"
)

// Move is where a work queue's messages go before it is deleted: the old queue of a renamed
// seat moves into the seat's new one, each message readdressed from the old name to the new,
// so renaming a seat loses none of the work queued under its old name.
type Move struct {
	// Seat is the seat, by its current name.
	Seat string `json:"seat"`
	// Stream is the work queue that takes the messages.
	Stream string `json:"stream"`
	// From and To are the subject prefixes of the old and the new name's accepts: a message
	// on From+"send" is moved as To+"send".
	From string `json:"from"`
	To   string `json:"to"`
}

// Readdress is the subject a message on subject is moved to, and false for a subject that is
// not addressed to the old name (which no derived work queue takes).
func (m Move) Readdress(subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, m.From)
	if !ok || rest == "" {
		return "", false
	}
	return m.To + rest, true
}

// moveOf is the move of a stream that is the work queue of a seat's former name, or nil.
func moveOf(d *render.Desired, stream string) *Move {
	for old, seat := range d.Formerly {
		if render.SeatStreamName(old) == stream {
			// AcceptSubject with no accept is the prefix every accept of the seat shares.
			return &Move{Seat: seat, Stream: render.SeatStreamName(seat),
				From: render.AcceptSubject(old, ""), To: render.AcceptSubject(seat, "")}
		}
	}
	return nil
}

// movedWork says how much work a move takes, when the bus was read and some is queued.
func movedWork(messages uint64) string {
	switch messages {
	case 0:
		return ""
	case 1:
		return ", and its 1 queued message moves there before it is deleted"
	}
	return ", and its " + plural(messages, "queued message") + " move there before it is deleted"
}
