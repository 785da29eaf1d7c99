package plan

import (
	"testing"

	"github.com/meshbus/meshctl/render"
)

// A renamed seat's old queue moves into the new one, each message readdressed; no other
// stream has a move.
func TestTheMoveOfARenamedSeatsQueue(t *testing.T) {
	t.Parallel()
	d := &render.Desired{Formerly: map[string]string{"mailer": "postbox", "sms-out": "postbox"}}
	m := moveOf(d, "SEAT_SMS_OUT")
	if m == nil || m.Seat != "postbox" || m.Stream != "SEAT_POSTBOX" {
		t.Fatalf("move %+v", m)
	}
	for subject, want := range map[string]string{
		"mesh.seat.sms-out.accept.send":     "mesh.seat.postbox.accept.send",
		"mesh.seat.sms-out.accept.send.now": "mesh.seat.postbox.accept.send.now",
		"mesh.seat.sms-out.accept.":         "",
		"mesh.seat.mailer.accept.send":      "",
		"mesh.seat.sms-out.event.sent":      "",
	} {
		got, ok := m.Readdress(subject)
		if got != want || ok != (want != "") {
			t.Errorf("%s moves to %q (%v), want %q", subject, got, ok, want)
		}
	}
	for _, stream := range []string{"SEAT_POSTBOX", "EVENTS", "SEAT_OTHER"} {
		if m := moveOf(d, stream); m != nil {
			t.Errorf("%s has a move: %+v", stream, m)
		}
	}
}
