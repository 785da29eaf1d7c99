package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/render"
)

// A module's credential an operator issued by hand before its node enrolled, and keeps in the
// agent's directory for the host that uses it, still logs in once the node's agent has enrolled
// and applied its declaration: the agent writes no membership for it, leaves the operator's file
// as it was, and reports its generation applied, with nothing failed.
func TestAnEnrolledAgentLeavesAModuleIssuedByHandWorking(t *testing.T) {
	t.Parallel()
	w := startWorld(t, mesh)
	issued := w.issue("one.shop")
	shop := host.Membership{Address: w.busURL(), User: "one.shop", Password: issued["one.shop"]}
	join(t, shop)
	dir := filepath.Join(t.TempDir(), "agent")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "one.shop.json")
	kept, _ := json.Marshal(shop)
	if err := os.WriteFile(file, kept, 0o600); err != nil {
		t.Fatal(err)
	}

	enrol := w.issueEnrolments("one")
	w.startAgentIn(dir, enrol["one"])
	// The agent reports before it is done with a declaration: the store may have the report
	// before the test hears what the agent applied.
	w.wait("node one reports its declared generation, and the agent is done with it", func() bool {
		return len(w.applied) > 0 && atDeclared(t, w.stateDir, "one")
	})
	w.mu.Lock()
	applied := slices.Clone(w.applied)
	w.mu.Unlock()
	if len(applied) == 0 || !slices.Equal(applied[len(applied)-1].ByHand, []string{"one.shop"}) || len(applied[len(applied)-1].Report.Applied) != 0 {
		t.Errorf("the agent applied %+v; want one.shop left alone as issued by hand", applied)
	}
	if data, err := os.ReadFile(file); err != nil || !bytes.Equal(data, kept) {
		t.Errorf("the operator's membership of one.shop was changed or removed: %q (%v)", data, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if _, err := join(t, shop).Publish(ctx, render.ModuleEvent("shop", "order.placed"), []byte("{}")); err != nil {
		t.Fatalf("the shop, issued by hand, cannot emit after its node enrolled: %v", err)
	}
	if bytes.Contains([]byte(w.logs.String()), []byte(shop.Password)) {
		t.Error("the password issued by hand is in the log")
	}
}
