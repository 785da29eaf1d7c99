package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/state"
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
