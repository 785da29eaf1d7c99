package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/bus/bustest"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/lockedbuf"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// Right after enrolling, the bus refuses the node until the controller's reload makes its
// credential live: the agent says it is waiting for that reload (INFO), not that something is
// wrong. Past the grace, or for a node that enrolled earlier, a refusal is a warning again,
// saying what it means if it goes on. Neither is taken for the node's removal: the bus never
// let this credential in.
func TestARefusalRightAfterEnrollingIsTheExpectedWait(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mesh.yaml"), []byte(mesh), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	principals := render.Derive(m).Principals
	const password = "the-node-password-not-live-yet"
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	b := bustest.StartTestBus(t, render.AccountsConfig(principals, nil)) // node.one is locked
	membership := host.Membership{Address: b.URL(), User: render.NodeUser("one"), Password: password}

	for _, c := range []struct {
		name       string
		enrolledAt time.Time
		want, not  string
	}{
		{"just enrolled", time.Now(), "level=INFO msg=\"agent: waiting for the controller's reload", "level=WARN"},
		{"enrolled long ago", time.Time{}, "level=WARN msg=\"agent: the bus refuses the node's credential", "waiting for the controller's reload"},
	} {
		logs := &lockedbuf.Buffer{}
		a := &agent{log: slog.New(slog.NewTextHandler(logs, nil)), node: "one", enrolledAt: c.enrolledAt}
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		joined := make(chan *host.Host, 1)
		go func() {
			h, _ := a.join(ctx, membership)
			joined <- h
		}()
		testwait.Until(t, c.name+": a refusal logged", func() bool { return strings.Contains(logs.String(), "tries=") })
		cancel()
		<-joined
		if !strings.Contains(logs.String(), c.want) || strings.Contains(logs.String(), c.not) {
			t.Errorf("%s: the agent logged\n%s\nwant %q and no %q", c.name, logs.String(), c.want, c.not)
		}
	}
	// And the wait ends once the credential is live.
	if err := os.WriteFile(b.AccountsFile(), render.AccountsConfig(principals, map[string]string{render.NodeUser("one"): string(hash)}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.Reload(); err != nil {
		t.Fatal(err)
	}
	a := &agent{log: slog.New(slog.DiscardHandler), node: "one", enrolledAt: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	h, err := a.join(ctx, membership)
	if err != nil {
		t.Fatalf("joining once the credential is live: %v", err)
	}
	h.Close()
}
