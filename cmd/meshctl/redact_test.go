package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/meshbus/meshctl/internal/testnats"
)

// No command prints a password written into an address, whichever form defeats a pattern:
// a space, an '@' or a quote in it, or no scheme at all; as bus.listen, bus.url or a bare
// bus value.
func TestNoCommandPrintsAPasswordWrittenIntoAnAddress(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	for _, addr := range []struct{ value, secret string }{
		{"nats://admin:hunter2 x@127.0.0.1:" + port, "hunter2"},
		{"nats://admin:p@ssw0rd@127.0.0.1:" + port, "ssw0rd"},
		{`nats://admin:qu"ote7@127.0.0.1:` + port, "ote7"},
		{"nats://admin:zqx/ash9@127.0.0.1:" + port, "zqx"},
		{"admin:n0scheme@127.0.0.1:" + port, "n0scheme"},
	} {
		quoted := fmt.Sprintf("%q", addr.value)
		for name, yaml := range map[string]string{
			"listen": "bus:\n  listen: " + quoted + "\n",
			"url":    "bus:\n  url: " + quoted + "\n  accounts_file: /nonexistent/accounts.conf\n  reload: none\n",
			"bare":   "bus: " + quoted + "\n",
		} {
			if name == "bare" && !strings.Contains(addr.value, "://") {
				// Without a scheme a bare value is no URL to redact; the loader's quoting
				// of values is what keeps it short.
				continue
			}
			dir := writeMesh(t, map[string]string{"mesh.yaml": yaml + "nodes:\n  - name: one\n"})
			st := filepath.Join(t.TempDir(), "state")
			for _, args := range [][]string{
				{"validate", "-f", dir},
				{"render", "-f", dir},
				{"diff", "-f", dir, "--state", st},
				{"apply", "-f", dir, "--state", st, "--bcrypt-cost", "4"},
				{"credentials", "issue", "node.one", "-f", dir, "--state", st, "--bcrypt-cost", "4"},
			} {
				_, stdout, stderr := meshctl(t, args...)
				// The membership's own password is no leak; the address's is.
				if strings.Contains(stdout+stderr, addr.secret) {
					t.Errorf("bus %s %s: meshctl %s printed the password %q:\n%s%s", name, addr.value, args[0], addr.secret, stdout, stderr)
				}
			}
		}
	}
}

// freePort is a port nothing listens on, for a description that names one.
func freePort(t *testing.T) string {
	t.Helper()
	return strconv.Itoa(testnats.FreePort(t))
}
