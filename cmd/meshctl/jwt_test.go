package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshbus/meshctl/internal/testnats/opmode"
)

// jwtCluster is an operator-mode cluster whose operator, SYSTEM and OTHER the nats CLI made,
// and the mesh's account MESH an admin added with it: what `bus.auth: jwt` manages.
func jwtCluster(t *testing.T) *opmode.Cluster {
	t.Helper()
	c := opmode.StartCluster(t, opmode.ClusterOptions{ResolverInterval: "1h"})
	c.Operator.Run(t, "auth", "account", "add", "MESH", "--operator", c.Operator.Name, "--defaults")
	return c
}

// jwtDescription is a mesh on c in operator mode, its bus and modules apart.
func jwtDescription(c *opmode.Cluster, modules string) map[string]string {
	var servers strings.Builder
	for _, u := range c.URLs() {
		fmt.Fprintf(&servers, "    - url: %s\n", u)
	}
	// The test servers hold 256MB of files each: the streams are kept small.
	bus := fmt.Sprintf("bus:\n  auth: jwt\n  servers:\n%s  operator:\n    store: %s\n    account: MESH\n    system_creds: %s\n"+
		"  jetstream:\n    streams:\n      control: {max_bytes: 16MiB}\n      events: {max_bytes: 16MiB}\n      nodes: {max_bytes: 16MiB}\n      seats: {max_bytes: 16MiB}\n",
		servers.String(), filepath.Dir(filepath.Dir(c.Operator.StoreDir)), c.Operator.SystemUserCreds)
	return map[string]string{"bus.yaml": bus, "mesh.yaml": "nodes: [{name: one}, {name: two}]\nmodules:\n" + modules}
}

const jwtModules = `  - {name: shop, on: [one], emits: [order.placed]}
  - {name: audit, on: [two], follows: [shop/order.placed]}
`

func TestApplyAndDiffOnAnOperatorModeCluster(t *testing.T) {
	t.Parallel()
	c := jwtCluster(t)
	desc := writeMesh(t, jwtDescription(c, jwtModules))
	st := t.TempDir()
	code, out, errOut := meshctl(t, "apply", "-f", desc, "--state", st)
	t.Logf("apply: %d\n%s\n%s", code, out, errOut)
	code, out, errOut = meshctl(t, "diff", "-f", desc, "--state", st)
	t.Logf("diff: %d\n%s\n%s", code, out, errOut)
}
