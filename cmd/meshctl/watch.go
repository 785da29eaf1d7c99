package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/meshbus/meshctl/watch"
)

func init() {
	register("watch", command{summary: "keep the bus equal to the description: reconcile on every change and every minute", run: runWatch, stopsCleanly: true, runsLong: true})
}

const watchHelp = `
Usage: meshctl watch [-f DIR] [--state DIR] [--debounce 500ms] [--resync 1m]
                     [--log-format text|json] [--metrics-addr HOST:PORT]

Runs on the control host and keeps the bus equal to the description in DIR: it
reconciles once at start, then after every change under DIR (recursively, new
directories included; hidden directories such as .git and editors' temporary files are
ignored), waiting until the tree has been quiet for --debounce so that a 'git pull'
touching fifty files makes one reconcile; as soon as the bus announces a stream or
consumer deleted or a stream changed behind its back; and every --resync, so that other
drift (a consumer changed in place, the accounts file edited by hand) is healed too.
When inotify runs out of watches it polls DIR every --poll instead, and says so.

A description that does not validate is reported with every file:line:col problem and
nothing is applied: the last good state stays live until the tree is valid again. A
plan that would lose data, delete more than half of what meshctl owns, change
bus.auth while hosts log in, or ask more of the servers than their JetStream has, is
reported every cycle and never forced: apply it by hand with 'meshctl apply
--allow-data-loss' (or --allow-mass-delete, --allow-reissue, --allow-overcommit) if it
is meant. An object meshctl does not own in the way of
one it derives is left alone with what depends on it, everything else is applied, and it
is reported every cycle (and counted in meshctl_watch_conflicts) until it is resolved.
A bus that is down is retried with a backoff of up to 30s.

With no bus.url in the description, watch runs the embedded bus and keeps it up; other
meshctl commands (diff, apply, credentials) use it meanwhile. When they change its
accounts config they ask watch to reload the bus over its control socket
(STATE/bus/control.sock). SIGHUP from an operator ('systemctl reload meshctl-watch')
reloads the bus, then reconciles. SIGINT or SIGTERM
abandons the reconcile in flight at a safe point, stops the embedded bus cleanly and
exits 0.

It logs one line per reconcile (what changed, or why it failed) on stderr, as text or
JSON. With --metrics-addr it serves Prometheus metrics at /metrics and /healthz, which
answers 200 when the last reconcile succeeded and 503 otherwise, naming the state
(invalid, refused, error) but never a problem's text: that quotes the description, and
is in the log.

Example:
  meshctl watch -f mesh/ --state /var/lib/meshctl --metrics-addr 127.0.0.1:9464
`

func runWatch(ctx context.Context, e *env, args []string) int {
	f := newFlags(e, "watch", watchHelp)
	dir := f.dirFlag()
	sf := f.restorableStateFlag()
	cost := f.costFlag()
	debounce := f.Duration("debounce", watch.DefaultDebounce, "how long the tree must stay quiet after a change before it is reconciled")
	resync := f.Duration("resync", watch.DefaultResync, "how often to reconcile with no change in sight, healing drift")
	poll := f.Duration("poll", watch.DefaultPoll, "how often to scan DIR when inotify runs out of watches")
	logFormat := f.String("log-format", "text", "log format: text, json")
	logLevel := f.String("log-level", "info", "log level: debug, info, warn, error")
	metricsAddr := f.String("metrics-addr", "", "serve Prometheus /metrics and /healthz on this host:port (off when empty)")
	if done, code := f.parseNoArgs(args, "the description", "-f"); done {
		return code
	}
	if *logFormat != "text" && *logFormat != "json" {
		e.errorf("unknown log format %q; use text or json", *logFormat)
		return exitError
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		e.errorf("unknown log level %q; use one of: debug, info, warn, error", *logLevel)
		return exitError
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"debounce", *debounce}, {"resync", *resync}, {"poll", *poll}} {
		if d.v <= 0 {
			e.errorf("--%s must be a positive duration such as 500ms, not %s", d.name, d.v)
			return exitError
		}
	}
	opts := &slog.HandlerOptions{Level: level}
	handler := slog.Handler(slog.NewTextHandler(e.stderr, opts))
	if *logFormat == "json" {
		handler = slog.NewJSONHandler(e.stderr, opts)
	}

	// Subscribed before the bus starts: an operator's `systemctl reload` may come as soon as
	// the unit is up, and a SIGHUP with no handler would kill the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	if *sf.passwordFile != "" || *sf.credsFile != "" {
		// Read here only to restore from: watch itself reads the description at each cycle,
		// and keeps running through an invalid one.
		m, code := loadDescription(ctx, e, *dir)
		if code != exitOK {
			return code
		}
		if code := sf.restoreIfEmpty(ctx, e, m); code != exitOK {
			return code
		}
	}
	err := watch.Run(ctx, watch.Config{
		Dir:         *dir,
		StateDir:    *sf.dir,
		Cost:        *cost,
		Debounce:    *debounce,
		Resync:      *resync,
		Poll:        *poll,
		Logger:      slog.New(handler),
		MetricsAddr: *metricsAddr,
		Hup:         hup,
	})
	if err != nil {
		e.errorf("%v", err)
		return exitError
	}
	return exitOK
}
