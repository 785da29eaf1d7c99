package wire

import (
	"errors"
	"testing"
)

func TestASealedMembershipOpensOnlyWithItsNodesKey(t *testing.T) {
	pub, priv, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := Seal(pub, []byte("secret"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Open(pub, priv, sealed); err != nil || string(got) != "secret" {
		t.Fatalf("Open = %q, %v", got, err)
	}
	otherPub, otherPriv, _ := GenerateKey()
	if _, err := Open(otherPub, otherPriv, sealed); !errors.Is(err, ErrUnseal) {
		t.Errorf("another node's key opened it: %v", err)
	}
}

// The controller answers an enrolment only under the inbox of the enrolment identity of the node
// the request's subject names: a request must not steer its answer anywhere else.
func TestEnrolReplyStaysUnderTheEnrollingNodesInbox(t *testing.T) {
	t.Parallel()
	if got, err := EnrolReply("mesh.control.one.enrol", []byte(`{"reply": "_INBOX.enrol.one.abc"}`)); err != nil || got != "_INBOX.enrol.one.abc" {
		t.Fatalf("got %q, %v", got, err)
	}
	for _, c := range []struct{ subject, payload string }{
		{"mesh.control.one.enrol", `{"reply": "_INBOX.enrol.two.abc"}`},
		{"mesh.control.one.enrol", `{"reply": "_INBOX.enrol.one."}`},
		{"mesh.control.one.enrol", `{"reply": "_INBOX.enrol.one.>"}`},
		{"mesh.control.one.enrol", `{"reply": "mesh.node.one.declare"}`},
		{"mesh.control.one.enrol", `not json`},
		{"mesh.control.one.report", `{"reply": "_INBOX.enrol.one.abc"}`},
	} {
		if got, err := EnrolReply(c.subject, []byte(c.payload)); !errors.Is(err, ErrNotEnrolment) {
			t.Errorf("%s %s: got %q, %v; want ErrNotEnrolment", c.subject, c.payload, got, err)
		}
	}
}
