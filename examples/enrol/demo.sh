#!/bin/sh
# A node enrols and receives its modules' credentials, in seconds: `make demo-node`.
#
# On one machine it plays both sides. The control host: `meshctl watch` on a copy of the
# quickstart mesh, its embedded bus on 127.0.0.1:$PORT, and one enrolment credential issued
# for node alpha. The node: `meshctl agent` with only that file, which enrols, receives the
# memberships of alpha's modules sealed to its key, and writes them. Everything lives in a
# temporary directory that is removed at the end.
set -eu

BIN=${BIN:-bin/meshctl}
PORT=${PORT:-4333}
work=$(mktemp -d)
watch_pid=
agent_pid=
cleanup() {
	[ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null || true
	[ -n "$watch_pid" ] && kill "$watch_pid" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT INT TERM

# await CONDITION...: run it every 0.2s for up to 30s.
await() {
	i=0
	until "$@" >/dev/null 2>&1; do
		i=$((i + 1))
		if [ "$i" -gt 150 ]; then
			echo "gave up waiting for: $*" >&2
			echo "--- watch ---" >&2; cat "$work/watch.log" >&2
			[ -f "$work/agent.log" ] && { echo "--- agent ---" >&2; cat "$work/agent.log" >&2; }
			exit 1
		fi
		sleep 0.2
	done
}

cp -r examples/quickstart "$work/mesh"
printf 'bus:\n  listen: 127.0.0.1:%s\n' "$PORT" >"$work/mesh/bus.yaml"

echo "== the control host: meshctl watch, its embedded bus on 127.0.0.1:$PORT"
"$BIN" watch -f "$work/mesh" --state "$work/state" --bcrypt-cost 4 2>"$work/watch.log" &
watch_pid=$!
await grep -q 'reconciled: changes applied' "$work/watch.log"

echo "== the operator issues node alpha one enrolment credential, and carries that file over"
"$BIN" credentials issue enrol.alpha -f "$work/mesh" --state "$work/state" --bcrypt-cost 4 -o "$work/enrol.json"

echo "== the node: meshctl agent --membership enrol.json --dir alpha"
"$BIN" agent --membership "$work/enrol.json" --dir "$work/alpha" --heartbeat 1s 2>"$work/agent.log" &
agent_pid=$!
await test -f "$work/alpha/alpha.shop.json"
await grep -q 'agent: applied a declaration' "$work/agent.log"
await grep -q "recorded node alpha's report" "$work/watch.log"
await grep -q '"alpha"' "$work/state/heartbeats.json"

echo
echo "== what the agent keeps (every file 0600; passwords only inside them)"
ls -l "$work/alpha" | sed 1d | awk '{print "  " $1 "  " $NF}'
echo
echo "== the agent's log"
sed 's/^/  /' "$work/agent.log"
echo
echo "== the controller's side of it"
grep 'controller' "$work/watch.log" | sed 's/^/  /'
echo
"$BIN" status --state "$work/state" | sed -n '/^Nodes:/,/^Holder changes/p' | grep -v '^Holder changes'
