package controller

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/wire"
)

// maxControlLine is the server's max_control_line by default: a protocol line longer than this
// closes the connection that sent it, and nats.go does not reconnect after it.
const maxControlLine = 4096

// maxServerPayload is the server's max_payload by default, the largest message anyone can send.
const maxServerPayload = 1 << 20

// FuzzControlMessage feeds the controller's reading of control traffic — the subject, the
// payload, and the generation last declared to the node — and holds what it accepts to the
// bounds, checked here on their own terms rather than by the code under test: no panic, an
// answer address the controller can publish to without losing its connection, under the
// requester's own enrolment inbox, a key of the exact size, a report's generation one that was
// declared and its users the node's own instances, and nothing read from a payload above its
// bound. Its corpus (testdata/fuzz/FuzzControlMessage and the seeds below) runs with every
// `go test`; .ci/run fuzzes it for a minute, and what that finds is kept there.
func FuzzControlMessage(f *testing.F) {
	key := b64(make([]byte, wire.KeySize))
	for _, s := range []struct {
		subject, payload string
		declared         uint64
	}{
		{"mesh.control.one.enrol", `{"reply":"_INBOX.enrol.one.abc","key":"` + key + `"}`, 0},
		{"mesh.control.three.enrol", `{"reply":"_INBOX.enrol.three.abc","key":"` + key + `"}`, 0},
		{"mesh.control.one.enrol", `{"reply":"_INBOX.enrol.one.` + strings.Repeat("ab.", 1400) + `c","key":"` + key + `"}`, 0},
		{"mesh.control.one.enrol", `{"reply":"_INBOX.enrol.one.a\u001b[2K","key":"` + key + `"}`, 0},
		{"mesh.control.one.enrol", `{"reply":"_INBOX.enrol.one.>"}`, 0},
		{"mesh.control.one.report", `{"generation":3,"applied":["one.shop"],"failed":{"(removing)":"read-only"}}`, 3},
		{"mesh.control.one.report", `{"generation":18446744073709551615}`, 3},
		{"mesh.control.one.report", `{"generation":-1}`, 3},
		{"mesh.control.two.heartbeat", `{"at":"2026-01-02T03:04:05Z","generation":4}`, 0},
		{"mesh.control.two.heartbeat", `{}`, 0},
		{"mesh.control..report", `{"generation":1}`, 1},
	} {
		f.Add(s.subject, []byte(s.payload), s.declared)
	}
	m := load(f, twoNodes)
	f.Fuzz(func(t *testing.T, subject string, payload []byte, declared uint64) {
		kind, node := Classify(subject)
		if kind != KindUnknown {
			checkNode(t, node)
			if want := map[Kind]string{KindReport: render.ReportSubject(node), KindEnrol: render.EnrolSubject(node),
				KindHeartbeat: render.HeartbeatSubject(node)}[kind]; subject != want {
				t.Fatalf("Classify(%q) = %v, %q: not the subject render spells (%q)", subject, kind, node, want)
			}
		}

		if reply, err := wire.EnrolReply(subject, payload); err == nil {
			checkEnrolPayload(t, subject, payload)
			checkReply(t, subject, reply)
		} else if !errors.Is(err, wire.ErrNotEnrolment) {
			t.Fatalf("EnrolReply: %v, not ErrNotEnrolment", err)
		}

		// A refused request is answered too: what it carries must be as fit to use as an
		// accepted one's.
		ask, err := JudgeEnrolment(m, subject, payload)
		switch {
		case err == nil || errors.Is(err, ErrRefused):
			if kind != KindEnrol || ask.Node != node {
				t.Fatalf("JudgeEnrolment took %q as node %q's enrolment", subject, ask.Node)
			}
			checkEnrolPayload(t, subject, payload)
			checkReply(t, subject, ask.Reply)
			if len(ask.Key) != wire.KeySize {
				t.Fatalf("an enrolment with a key of %d bytes was accepted", len(ask.Key))
			}
		case !errors.Is(err, wire.ErrNotEnrolment):
			t.Fatalf("JudgeEnrolment: %v, neither ErrRefused nor ErrNotEnrolment", err)
		}

		r, err := JudgeReport(node, payload, declared)
		switch {
		case err == nil || errors.Is(err, ErrSuperseded):
			if len(payload) > MaxReportSize {
				t.Fatalf("a report of %d bytes was read", len(payload))
			}
			if r.Generation == 0 || r.Generation > declared || (err == nil) != (r.Generation == declared) {
				t.Fatalf("a report of generation %d, with %d declared, was judged %v", r.Generation, declared, err)
			}
			for _, u := range r.Applied {
				checkInstance(t, node, u)
			}
			for u, why := range r.Failed {
				if u != wire.ReportRemoval {
					checkInstance(t, node, u)
				}
				if len(why) > MaxReasonLen {
					t.Fatalf("a reason of %d bytes was accepted", len(why))
				}
			}
		case !errors.Is(err, ErrNotReport):
			t.Fatalf("JudgeReport: %v, neither ErrSuperseded nor ErrNotReport", err)
		}

		if _, err := JudgeHeartbeat(payload); err == nil && len(payload) > MaxHeartbeatSize {
			t.Fatalf("a heartbeat of %d bytes was read", len(payload))
		} else if err != nil && !errors.Is(err, ErrNotHeartbeat) {
			t.Fatalf("JudgeHeartbeat: %v, not ErrNotHeartbeat", err)
		}
	})
}

// checkNode fails unless node is a name the model could have given a node.
func checkNode(t *testing.T, node string) {
	t.Helper()
	if node == "" || len(node) > model.MaxNameLen || strings.Trim(node, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
		t.Fatalf("Classify read the node %q", node)
	}
}

func checkEnrolPayload(t *testing.T, subject string, payload []byte) {
	t.Helper()
	if len(payload) > wire.MaxEnrolRequestSize {
		t.Fatalf("an enrolment request of %d bytes on %q was read", len(payload), subject)
	}
}

// checkReply fails unless reply lies under the inbox of the enrolment identity of the node
// subject names, is made of subject tokens, and fits on the controller's PUB line with the
// largest payload there is.
func checkReply(t *testing.T, subject, reply string) {
	t.Helper()
	node := strings.TrimSuffix(strings.TrimPrefix(subject, "mesh.control."), ".enrol")
	if !strings.HasPrefix(reply, "_INBOX.enrol."+node+".") {
		t.Fatalf("an answer to %q would go to %q", subject, reply)
	}
	if line := "PUB " + reply + " " + strconv.Itoa(maxServerPayload) + "\r\n"; len(line) > maxControlLine {
		t.Fatalf("an answer at an address of %d bytes would close the controller's connection", len(reply))
	}
	for _, tok := range strings.Split(reply, ".") {
		if tok == "" || strings.ContainsAny(tok, "*>") || strings.IndexFunc(tok, func(r rune) bool { return r <= ' ' || r >= 0x7f }) >= 0 {
			t.Fatalf("an answer address with the token %q was accepted: %q", tok, reply)
		}
	}
}

// checkInstance fails unless user is a module instance of node.
func checkInstance(t *testing.T, node, user string) {
	t.Helper()
	module, ok := strings.CutPrefix(user, node+".")
	if !ok || module == "" || len(module) > model.MaxNameLen || strings.Contains(module, ".") {
		t.Fatalf("a report of node %q names %q", node, user)
	}
}
