package busclient

import (
	"os/exec"
	"strings"
	"testing"
)

// What a host links is the client side alone: the host library, the agent, the example host
// and busclient itself import neither the server nor the store, so a node carries none of the
// control host's code and the seam between the two cannot quietly close; and the pure
// packages (the description, its derivation and the plan) link no server either.
func TestTheClientSideLinksNoServer(t *testing.T) {
	t.Parallel()
	roots := []string{
		"github.com/meshbus/meshctl/busclient",
		"github.com/meshbus/meshctl/wire",
		"github.com/meshbus/meshctl/host",
		"github.com/meshbus/meshctl/agent",
		"github.com/meshbus/meshctl/examples/host",
		"github.com/meshbus/meshctl/model",
		"github.com/meshbus/meshctl/render",
		"github.com/meshbus/meshctl/plan",
	}
	for _, root := range roots {
		out, err := exec.Command("go", "list", "-deps", root).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", root, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, banned := range []string{"github.com/nats-io/nats-server", "modernc.org/sqlite", "github.com/meshbus/meshctl/state", "github.com/meshbus/meshctl/bus"} {
				if dep == banned || strings.HasPrefix(dep, banned+"/") {
					t.Errorf("%s links %s", root, dep)
				}
			}
		}
	}
}

// internal/testnats starts the server binary every package's tests may dial, bus's and
// busclient's own included; importing any of meshctl, it would be an arrow running back up
// the floors, and the first package it imports could not use it in its tests.
func TestTestnatsImportsNothingOfMeshctl(t *testing.T) {
	t.Parallel()
	const root = "github.com/meshbus/meshctl/internal/testnats"
	out, err := exec.Command("go", "list", "-deps", root).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", root, err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep != root && strings.HasPrefix(dep, "github.com/meshbus/meshctl/") {
			t.Errorf("%s imports %s", root, dep)
		}
	}
}
