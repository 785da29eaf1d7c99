package watch

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/bus/bustest"
)

// Watch is in sync only while every server serves the config: an accounts config written and
// left for the operator to reload (reload: none) makes the cycle an error, naming the bus and
// the file, and /healthz 503, cycle after cycle, until the server is reloaded; the next cycle
// then finds it served, and /healthz answers 200 again.
func TestHealthIsNotGreenWhileAServerDoesNotServeTheConfig(t *testing.T) {
	t.Parallel()
	srv := bustest.StartTestServer(t, t.TempDir())
	addr := make(chan string, 1)
	h := startWatch(t, map[string]string{"mesh.yaml": srv.Mesh()}, func(c *Config) {
		c.MetricsAddr = "127.0.0.1:0"
		c.metricsReady = func(a string) { addr <- a }
	})
	base := "http://" + <-addr
	h.waitFor(0, "applying the mesh", func(c Cycle) bool { return c.Outcome == OutcomeOK })
	if code, body := get(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz after the first apply: %d %s; want 200", code, body)
	}

	// The server's reload left to the operator, and a module that needs a new user.
	mark := h.mark()
	h.write("mesh.yaml", regexp.MustCompile(`reload: \{ pid_file: [^}]*\}`).ReplaceAllString(srv.Mesh(), "reload: none")+
		"  - name: audit\n    on: [alpha]\n    follows: [shop/order.placed]\n")
	first := h.waitFor(mark, "applying the module, its user written and not served", func(c Cycle) bool { return c.Applied > 0 })
	if first.Outcome != OutcomeError || first.Err == nil || !strings.Contains(first.Err.Error(), srv.AccountsFile) ||
		!strings.Contains(first.Err.Error(), "not served") {
		t.Fatalf("a cycle leaving the accounts config not served: %s; want an error naming the file", describeCycles([]Cycle{first}))
	}
	if code, body := get(t, base+"/healthz"); code == http.StatusOK || strings.Contains(body, "in sync") {
		t.Errorf("/healthz while the server does not serve the config: %d %q; want 503, not in sync", code, body)
	}
	again := h.waitFor(h.mark(), "the next cycle", func(Cycle) bool { return true })
	if again.Outcome != OutcomeError {
		t.Errorf("the cycle after, the server still not serving the config: %s; want an error", describeCycles([]Cycle{again}))
	}

	// The operator reloads: the next cycle finds it served.
	if err := bus.PIDFileReloader(srv.PIDFile).Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.waitFor(h.mark(), "in sync once the server serves the config", func(c Cycle) bool { return c.Outcome == OutcomeNoop })
	if code, body := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz once the server serves the config: %d %s; want 200", code, body)
	}
}
