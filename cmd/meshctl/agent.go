package main

import (
	"context"
	"log/slog"

	"github.com/meshbus/meshctl/agent"
)

func init() {
	register("agent", command{summary: "run a node: enrol once, then write its modules' memberships as declared", run: runAgent, runsLong: true})
}

const agentHelp = `
Usage: meshctl agent --dir DIR [--membership enrol.json] [--heartbeat 10s]
                     [--log-format text|json]

Runs on a node. The first time, DIR holds nothing: the agent makes the node's key pair
(DIR/node.key, 0600), joins with the one-time enrolment credential in --membership (the
file 'meshctl credentials issue enrol.<node> -o enrol.json' wrote, 0600, on the control
host) and asks the controller to enrol the node with its public key. The controller answers
with the node's own membership sealed to that key, kept in DIR/node.<node>.json (0600),
and locks the enrolment credential: it enrols once.

From then on the agent joins as node.<node>, takes the controller's declarations of
what the node runs, and writes each module instance's membership to DIR/<user>.json
(0600, atomically) — the file a module host joins with — removing the files of
instances no longer declared. It reports each generation it applied (and what it could
not apply) and heartbeats every --heartbeat. It reconnects for as long as it takes when
the bus restarts or reloads. No password is ever logged.

A bus that is down when it enrols or joins is waited for, said at once and then every
30s. A refused enrolment credential ends it, an error: it was used already or revoked,
or the node is not in the description; issue a fresh one. The bus refusing the node's
own credential after it let the node in means the node left the description or its
credential was revoked: the agent removes its modules' memberships and exits with an
error saying so; re-enrol with 'meshctl credentials issue enrol.<node>', moving
DIR/node.<node>.json aside.

SIGINT or SIGTERM stops it within a second, in every state; the files stay.

Example:
  meshctl agent --membership /etc/mesh/enrol.json --dir /var/lib/meshctl-agent
`

func runAgent(ctx context.Context, e *env, args []string) int {
	f := newFlags(e, "agent", agentHelp)
	dir := f.String("dir", "", "the node's directory: its key, its membership and its modules' memberships")
	membership := f.String("membership", "", "the one-time enrolment membership (needed only until the node is enrolled)")
	heartbeat := f.Duration("heartbeat", agent.DefaultHeartbeat, "how often to tell the controller the node is alive")
	logFormat := f.String("log-format", "text", "log format: text, json")
	if done, code := f.parseNoArgs(args, "the node's directory", "--dir"); done {
		return code
	}
	if *dir == "" {
		e.errorf("agent: --dir is required: the directory the node's key and memberships are kept in")
		return exitError
	}
	if *heartbeat <= 0 {
		e.errorf("--heartbeat must be a positive duration such as 10s, not %s", *heartbeat)
		return exitError
	}
	if *logFormat != "text" && *logFormat != "json" {
		e.errorf("unknown log format %q; use text or json", *logFormat)
		return exitError
	}
	handler := slog.Handler(slog.NewTextHandler(e.stderr, nil))
	if *logFormat == "json" {
		handler = slog.NewJSONHandler(e.stderr, nil)
	}
	if err := agent.Run(ctx, agent.Config{Dir: *dir, Enrolment: *membership, Heartbeat: *heartbeat, Logger: slog.New(handler)}); err != nil {
		e.errorf("%v", err)
		return exitError
	}
	return exitOK
}
