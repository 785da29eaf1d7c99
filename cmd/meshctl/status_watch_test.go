package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/meshbus/meshctl/internal/lockedbuf"
	"github.com/meshbus/meshctl/internal/testwait"
	"github.com/meshbus/meshctl/watch"
)

// /healthz says only that the description is invalid; status says why, from the state watch
// recorded: when, the trigger and outcome, the problems; and, once watch stopped, that no
// watch runs any more.
func TestStatusShowsTheStateWatchLeft(t *testing.T) {
	t.Parallel()
	dir := writeMesh(t, map[string]string{"mesh.yaml": cliMesh, "bad.yaml": "modules:\n  - name: broken\n    on: [ghost]\n"})
	stateDir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &lockedbuf.Buffer{}
	done, stopped := make(chan int, 1), make(chan struct{})
	go func() {
		defer close(stopped)
		done <- run(ctx, []string{"watch", "-f", dir, "--state", stateDir, "--bcrypt-cost", "4", "--log-format", "json"}, &bytes.Buffer{}, stderr)
	}()
	// Stopped however the test ends, its embedded bus with it.
	t.Cleanup(func() {
		cancel()
		<-stopped
		if t.Failed() {
			t.Logf("watch's log:\n%s", stderr)
		}
	})
	testwait.Until(t, "watch recording an invalid state", func() error {
		s, err := watch.ReadState(stateDir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		if err == nil && s.Cycle.Outcome != watch.OutcomeInvalid {
			err = fmt.Errorf("its last cycle is %s", s.Cycle.Outcome)
		}
		return err
	})

	code, text, errOut := meshctl(t, "status", "--state", stateDir)
	if code != exitOK {
		t.Fatalf("status exited %d: %s", code, errOut)
	}
	if !lineHolds(text, "Watch:", "invalid since", "(trigger start)", "does not validate") || !lineHolds(text, "recorded by", fmt.Sprintf("pid %d", os.Getpid())) ||
		!lineHolds(text, "bad.yaml:3:", `module "broken" runs on unknown node "ghost"`) || strings.Contains(text, "no longer running") {
		t.Errorf("status with watch running on an invalid tree does not show its state and problems:\n%s", text)
	}
	got := statusWatchJSON(t, stateDir)
	if got.Outcome != "invalid" || got.Trigger != "start" || !got.Running || len(got.Problems) != 1 || !strings.Contains(got.Problems[0], "ghost") {
		t.Errorf("status -o json watch = %+v; want invalid at start, running, the problem", got)
	}

	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("watch exited %d: %s", code, stderr.String())
	}
	_, text, _ = meshctl(t, "status", "--state", stateDir)
	if !lineHolds(text, "Watch:", "invalid since") || !lineHolds(text, "recorded by", "stopped at", "no watch runs now") {
		t.Errorf("status after watch stopped does not say that the state is a stopped watch's:\n%s", text)
	}
	if got := statusWatchJSON(t, stateDir); got.Running || got.StoppedAt.IsZero() || got.Outcome != "invalid" {
		t.Errorf("status -o json watch after watch stopped = %+v; want not running, stopped_at, the last state", got)
	}
}

type watchJSON struct {
	At        time.Time `json:"at"`
	Trigger   string    `json:"trigger"`
	Outcome   string    `json:"outcome"`
	Problems  []string  `json:"problems"`
	Reason    string    `json:"reason"`
	PID       int       `json:"pid"`
	Running   bool      `json:"running"`
	StoppedAt time.Time `json:"stopped_at"`
}

func statusWatchJSON(t *testing.T, stateDir string) watchJSON {
	t.Helper()
	code, out, errOut := meshctl(t, "status", "--state", stateDir, "-o", "json")
	if code != exitOK {
		t.Fatalf("status -o json exited %d: %s", code, errOut)
	}
	var got struct {
		Watch *watchJSON `json:"watch"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Watch == nil {
		t.Fatalf("status -o json has no watch state (%v):\n%s", err, out)
	}
	return *got.Watch
}
