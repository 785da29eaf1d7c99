package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/meshbus/meshctl/state"
)

// status lists the refusals watch recorded, with their advice, in text and in JSON.
func TestStatusListsRecentRefusals(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	r := state.Refusal{User: "two.shop", Op: "publish", Subject: "mesh.mod.telegram.tool.status",
		Advice: "module shop does not declare calls: [telegram/status]", Count: 3, FirstAt: at, LastAt: at}
	if err := st.RecordRefusal(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	st.Close()

	code, stdout, stderr := meshctl(t, "status", "--state", dir)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "Refused by the bus") || !strings.Contains(stdout, "two.shop") ||
		!strings.Contains(stdout, "publish mesh.mod.telegram.tool.status") || !strings.Contains(stdout, "3 time(s)") ||
		!strings.Contains(stdout, r.Advice) {
		t.Errorf("status does not list the refusal:\n%s", stdout)
	}
	code, stdout, stderr = meshctl(t, "status", "--state", dir, "-o", "json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var out struct{ Refusals []state.Refusal }
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Refusals) != 1 || out.Refusals[0].Advice != r.Advice || out.Refusals[0].Count != 3 {
		t.Errorf("status -o json refusals: %+v", out.Refusals)
	}
}

// Refusals of one kind are one row, whatever their subjects: a host without its inbox prefix
// refused a new random inbox on each of its connections is one row, with the count and the
// latest subject.
func TestStatusShowsOneRowPerKindOfRefusal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	inboxes := []string{"_INBOX.Xy7Rb2kQ9mN4pL1sT6vW8z.*", "_INBOX.Ab3Cd4Ef5Gh6Ij7Kl8Mn9o.*", "_INBOX.Qr1St2Uv3Wx4Yz5Ab6Cd7e.*"}
	for i, inbox := range inboxes {
		r := state.Refusal{User: "alpha.shop", Op: "subscribe", Rule: "_INBOX.>", Subject: inbox, Advice: "inbox prefix not set: …",
			Count: 1, FirstAt: at, LastAt: at.Add(time.Duration(i) * time.Second)}
		if err := st.RecordRefusal(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	code, stdout, stderr := meshctl(t, "status", "--state", dir)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rows []string
	for _, l := range strings.Split(stdout, "\n") {
		if strings.Contains(l, "alpha.shop") {
			rows = append(rows, l)
		}
	}
	if len(rows) != 1 || !strings.Contains(rows[0], "subscribe _INBOX.> (latest "+inboxes[2]+")") || !strings.Contains(rows[0], "3 time(s)") {
		t.Errorf("status shows, for three refused random inboxes:\n%s", stdout)
	}
}

// A refused subject is whatever a client sent, and the store keeps it as the server logged it:
// status must print it escaped as watch's log does, never the ESC and BEL bytes that would
// erase and overwrite the lines of the terminal it is printed on. So with everything else the
// store holds from outside: a user, a queue group, an apply's outcome.
func TestStatusEscapesWhatCameFromTheBus(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	at := time.Now()
	evil := "mesh.evil\x1b[2K\x1b[1A\x1b]0;owned\a\r\nforged line"
	r := state.Refusal{User: "two.shop\x1b[8m", Op: "subscribe", Subject: evil, Queue: "q\x07\t",
		Advice: evil + " is outside the subjects the mesh derives: no declaration grants it", Count: 1, FirstAt: at, LastAt: at}
	if err := st.RecordRefusal(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RecordApply(ctx, state.ApplyRecord{Started: at, Finished: at, User: "ops\x1b[1A", Host: "h\x9b", Commit: "c\x1b",
		Summary: "1 created\x1b[2K", Outcome: "failed: server said \x1b]0;x\a"}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	code, stdout, stderr := meshctl(t, "status", "--state", dir)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if i := strings.IndexFunc(stdout, func(r rune) bool { return r != '\n' && unicode.IsControl(r) || r == utf8.RuneError }); i >= 0 {
		t.Errorf("status printed a control character or invalid UTF-8 at byte %d:\n%q", i, stdout)
	}
	for _, want := range []string{`mesh.evil\x1b[2K\x1b[1A\x1b]0;owned\a\r\nforged line`, `two.shop\x1b[8m`, `queue group q\a\t`, `ops\x1b[1A@h\x9b`, `failed: server said \x1b]0;x\a`} {
		if !strings.Contains(stdout, want) {
			t.Errorf("status does not show %s escaped:\n%s", want, stdout)
		}
	}
}
