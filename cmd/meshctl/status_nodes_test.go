package main

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/controller"
	"github.com/meshbus/meshctl/state"
	"github.com/meshbus/meshctl/watch"
)

// Status shows each node of the live mesh: enrolled or not, the generation declared and the one
// reported, in text and in JSON.
func TestStatusShowsTheNodesOfTheLiveMesh(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state")
	st, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Mint(ctx, []string{"enrol.one"}, bcrypt.MinCost, "issue"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.EnrolNode(ctx, state.NodeEnrolment{Node: "one", EnrolPrincipal: "enrol.one", NodePrincipal: "node.one",
		PublicKey: make([]byte, 32)}, bcrypt.MinCost); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordDeclaration(ctx, "one", state.Declared{Generation: 2, Digest: "d", DeclaredAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordReport(ctx, state.Report{Node: "one", Generation: 2, ReportedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordReport(ctx, state.Report{Node: "two", Generation: 0, ReportedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"status", "--state", dir}, &out, &errOut); code != exitOK {
		t.Fatalf("status exited %d: %s", code, errOut.String())
	}
	text := out.String()
	if !strings.Contains(text, "Nodes:") || !lineHolds(text, "one", "2", "2", "at the declared generation") ||
		!lineHolds(text, "two", "no", "not enrolled") {
		t.Errorf("status does not show the nodes:\n%s", text)
	}
	out.Reset()
	if code := run(ctx, []string{"status", "--state", dir, "-o", "json"}, &out, &errOut); code != exitOK {
		t.Fatalf("status -o json exited %d: %s", code, errOut.String())
	}
	var got struct {
		Nodes []struct {
			Node     string `json:"node"`
			Enrolled bool   `json:"enrolled"`
			Declared uint64 `json:"declared_generation"`
			Reported uint64 `json:"reported_generation"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || len(got.Nodes) != 2 || !got.Nodes[0].Enrolled || got.Nodes[0].Declared != 2 || got.Nodes[0].Reported != 2 {
		t.Errorf("status -o json nodes = %+v (%v)", got.Nodes, err)
	}
}

// lineHolds reports whether some line of text holds every one of words, in order.
func lineHolds(text string, words ...string) bool {
	for _, line := range strings.Split(text, "\n") {
		rest, ok := line, true
		for _, w := range words {
			i := strings.Index(rest, w)
			if i < 0 {
				ok = false
				break
			}
			rest = rest[i+len(w):]
		}
		if ok {
			return true
		}
	}
	return false
}

// Status shows the last heartbeat watch recorded for each node, marks a node that had gone
// silent, and says when the heartbeats are what a watch that stopped left behind.
func TestStatusShowsTheHeartbeatsWatchRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state")
	st, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"one", "two"} {
		if err := st.RecordReport(ctx, state.Report{Node: n, ReportedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	now := time.Now().Truncate(time.Second)
	write := func(h watch.Heartbeats) {
		t.Helper()
		data, _ := json.Marshal(h)
		if err := os.WriteFile(filepath.Join(dir, watch.HeartbeatsFileName), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(watch.Heartbeats{WrittenAt: now, Nodes: map[string]controller.Seen{
		"one": {At: now.Add(-5 * time.Second), Generation: 2},
		"two": {At: now.Add(-time.Minute)},
	}})

	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"status", "--state", dir}, &out, &errOut); code != exitOK {
		t.Fatalf("status exited %d: %s", code, errOut.String())
	}
	text := out.String()
	one := now.Add(-5 * time.Second).Local().Format(time.DateTime)
	two := now.Add(-time.Minute).Local().Format(time.DateTime)
	if !lineHolds(text, "LAST HEARTBEAT") || !lineHolds(text, "one", one) || lineHolds(text, "one", one+" (silent)") ||
		!lineHolds(text, "two", two+" (silent)") || strings.Contains(text, "no watch records them now") {
		t.Errorf("status does not show the heartbeats:\n%s", text)
	}
	out.Reset()
	if code := run(ctx, []string{"status", "--state", dir, "-o", "json"}, &out, &errOut); code != exitOK {
		t.Fatalf("status -o json exited %d: %s", code, errOut.String())
	}
	var got struct {
		Nodes []controller.NodeStatus `json:"nodes"`
		Beats struct {
			Current bool `json:"current"`
		} `json:"heartbeats"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || len(got.Nodes) != 2 || got.Nodes[0].Heartbeat == nil ||
		got.Nodes[0].Heartbeat.Generation != 2 || got.Nodes[0].Silent || !got.Nodes[1].Silent || !got.Beats.Current {
		t.Errorf("status -o json = %s (%v)", out.String(), err)
	}

	// Left behind by a watch that stopped an hour ago.
	write(watch.Heartbeats{WrittenAt: now.Add(-time.Hour), Nodes: map[string]controller.Seen{"one": {At: now.Add(-time.Hour)}}})
	out.Reset()
	if code := run(ctx, []string{"status", "--state", dir}, &out, &errOut); code != exitOK {
		t.Fatalf("status exited %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "no watch records them now") {
		t.Errorf("status does not say the heartbeats are old:\n%s", out.String())
	}
}

// Status says, for each node's module instances, who holds the credential: the node's agent
// (the controller minted it for a declaration), the host an operator issued it to by hand, or
// nobody. In text and in JSON.
func TestStatusSaysWhoHoldsEachInstancesCredential(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state")
	st, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	inv := state.Inventory{Nodes: []string{"one", "two"}, Instances: []state.Instance{
		{Node: "one", Module: "audit"}, {Node: "one", Module: "mail"}, {Node: "one", Module: "shop"}, {Node: "two", Module: "shop"}}}
	if err := st.SaveInventory(ctx, inv, 0); err != nil {
		t.Fatal(err)
	}
	for principal, op := range map[string]string{"enrol.one": "credentials issue", "one.shop": "credentials issue",
		"one.audit": state.OpDeclare, "two.shop": "credentials rotate"} {
		if _, err := st.Mint(ctx, []string{principal}, bcrypt.MinCost, op); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.EnrolNode(ctx, state.NodeEnrolment{Node: "one", EnrolPrincipal: "enrol.one", NodePrincipal: "node.one",
		PublicKey: make([]byte, 32)}, bcrypt.MinCost); err != nil {
		t.Fatal(err)
	}
	st.Close()

	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"status", "--state", dir}, &out, &errOut); code != exitOK {
		t.Fatalf("status exited %d: %s", code, errOut.String())
	}
	text := out.String()
	for _, want := range [][]string{{"one.audit", "agent"}, {"one.mail", "none"}, {"one.shop", "by hand"}, {"two.shop", "by hand"}} {
		if !lineHolds(text, want...) {
			t.Errorf("status does not say %s's credential is held %s:\n%s", want[0], want[1], text)
		}
	}
	out.Reset()
	if code := run(ctx, []string{"status", "--state", dir, "-o", "json"}, &out, &errOut); code != exitOK {
		t.Fatalf("status -o json exited %d: %s", code, errOut.String())
	}
	var got struct {
		Nodes []struct {
			Node      string `json:"node"`
			Instances []struct {
				User       string `json:"user"`
				Credential string `json:"credential"`
			} `json:"instances"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	held := map[string]string{}
	for _, n := range got.Nodes {
		for _, in := range n.Instances {
			held[n.Node+" "+in.User] = in.Credential
		}
	}
	want := map[string]string{"one one.audit": "agent", "one one.mail": "none", "one one.shop": "hand", "two two.shop": "hand"}
	if !maps.Equal(held, want) {
		t.Errorf("status -o json says the instances' credentials are held %v, want %v", held, want)
	}
}
