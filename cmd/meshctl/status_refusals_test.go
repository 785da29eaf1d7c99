package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

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
