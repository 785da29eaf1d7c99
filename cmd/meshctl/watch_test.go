package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/internal/lockedbuf"
	"github.com/meshbus/meshctl/internal/testwait"
)

func TestWatchHelp(t *testing.T) {
	t.Parallel()
	code, out, errOut := meshctl(t, "watch", "--help")
	if code != exitOK || errOut != "" {
		t.Fatalf("watch --help: exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"Usage: meshctl watch", "-debounce", "-resync", "-poll", "-log-format", "-metrics-addr", "-state", "SIGHUP", "/healthz"} {
		if !strings.Contains(out, want) {
			t.Errorf("watch --help does not mention %q:\n%s", want, out)
		}
	}
	if _, out, _ := meshctl(t, "help"); !strings.Contains(out, "watch ") {
		t.Errorf("meshctl help does not list watch:\n%s", out)
	}
}

func TestWatchRefusesWhatItCannotRun(t *testing.T) {
	t.Parallel()
	dir := writeMesh(t, map[string]string{"mesh.yaml": cliMesh})
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"log format":      {[]string{"--log-format", "xml"}, `unknown log format "xml"`},
		"log level":       {[]string{"--log-level", "loud"}, `unknown log level "loud"`},
		"debounce":        {[]string{"--debounce", "0s"}, "--debounce must be a positive duration"},
		"resync":          {[]string{"--resync", "-1m"}, "--resync must be a positive duration"},
		"unknown flag":    {[]string{"--forever"}, "flag provided but not defined"},
		"no directory":    {[]string{"-f", filepath.Join(dir, "missing")}, "missing"},
		"metrics address": {[]string{"--metrics-addr", "256.0.0.1:1"}, "serving metrics"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"watch", "-f", dir, "--state", t.TempDir()}, tc.args...)
			code, _, errOut := meshctl(t, args...)
			if code != exitError || !strings.Contains(errOut, tc.want) {
				t.Errorf("meshctl %s: exit %d, stderr %q; want exit %d and %q", strings.Join(args, " "), code, errOut, exitError, tc.want)
			}
		})
	}
}

// watch serves the embedded bus to the other commands while it runs, and exits 0 when
// its context ends (SIGINT or SIGTERM in main).
func TestWatchKeepsTheBusInSyncForOtherCommandsUntilStopped(t *testing.T) {
	t.Parallel()
	dir, stateDir := cliFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &lockedbuf.Buffer{}
	done, stopped := make(chan int, 1), make(chan struct{})
	go func() {
		defer close(stopped)
		done <- run(ctx, []string{"watch", "-f", dir, "--state", stateDir, "--bcrypt-cost", "4",
			"--debounce", "50ms", "--log-format", "json"}, &bytes.Buffer{}, stderr)
	}()
	// Stopped however the test ends, its embedded bus with it.
	t.Cleanup(func() {
		cancel()
		<-stopped
		if t.Failed() {
			t.Logf("watch's log:\n%s", stderr)
		}
	})

	// Once watch serves the bus, diff uses it, and reports it in sync once the first
	// reconcile is done. Before, a diff would start a bus of its own on the same store.
	testwait.Until(t, "diff finding the bus in sync with watch running", func() error {
		if _, ok := bus.RunningEmbedded(stateDir); !ok {
			return errors.New("watch serves no bus yet")
		}
		if code, out, errOut := meshctl(t, "diff", "-f", dir, "--state", stateDir); code != exitOK {
			return fmt.Errorf("diff exited %d:\n%s%s", code, out, errOut)
		}
		return nil
	})

	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("watch exited %d when stopped; want 0:\n%s", code, stderr.String())
	}
	if _, ok := bus.RunningEmbedded(stateDir); ok {
		t.Error("the embedded bus still runs after watch stopped")
	}
	var reconciled bool
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		var rec struct {
			Msg     string `json:"msg"`
			Outcome string `json:"outcome"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a log line is not JSON: %q: %v", line, err)
		}
		reconciled = reconciled || rec.Outcome == "ok"
	}
	if !reconciled {
		t.Errorf("watch's log has no reconcile with outcome ok:\n%s", stderr.String())
	}
}
