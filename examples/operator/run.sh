#!/usr/bin/env bash
# From nothing to a mesh on a three-server JetStream cluster in operator mode, on one machine:
# `make example-operator`. See README.md beside it.
#
# An admin makes an operator with the nats CLI (`nats auth`), the mesh's account MESH and a
# system user; three nats-server processes trust that operator and keep account JWTs in their
# NATS resolver. meshctl applies a mesh into MESH (bus.auth: jwt), issues a module instance its
# creds, the example host does a job with them, and a revoke disconnects it. Everything lives in
# one temporary directory, removed at the end; the servers are stopped however the script ends.
#
#   PORT  the first of nine consecutive ports on 127.0.0.1 (clients, routes, monitoring);
#         default 24222
#   BIN   a meshctl binary to use instead of `make build`'s
#   KEEP  set to 1 to keep the temporary directory (its path is printed)
set -euo pipefail

cd "$(dirname "$0")/../.."
repo=$PWD
PORT=${PORT:-24222}
NATSCLI_VERSION=v0.5.0 # its `nats auth` keeps nsc's store layout, which meshctl reads
OPERATOR=DEMO

work=$(mktemp -d "${TMPDIR:-/tmp}/meshctl-operator.XXXXXX")
server_pids=()
host_pid=
cleanup() {
	status=$?
	set +e
	[ -n "$host_pid" ] && kill "$host_pid" 2>/dev/null
	for pid in "${server_pids[@]}"; do
		kill "$pid" 2>/dev/null
	done
	wait 2>/dev/null
	if [ "$status" -ne 0 ]; then
		echo >&2
		echo "FAILED (exit $status); the last lines of each log:" >&2
		for log in "$work"/n*/server.log "$work"/*.log; do
			[ -f "$log" ] || continue
			echo "--- ${log#"$work"/}" >&2
			tail -n 15 "$log" >&2
		done
	fi
	if [ "${KEEP:-}" = 1 ]; then
		echo "kept $work" >&2
	else
		# The Go build's module files are read-only; nothing else here is.
		chmod -R u+w "$work" 2>/dev/null
		rm -rf "$work"
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step() { printf '\n== %s\n' "$*"; }
# say CMD...: print a command as it is run, with the work directory as $W and paths in the
# repository relative to it.
say() {
	local line="$*"
	line=${line//"$work"/\$W}
	printf '$ %s\n' "${line//"$repo"\//}"
}
# show CMD...: say it, then run it.
show() {
	say "$@"
	"$@"
}
# show_brief CMD...: show it, printing only the first line of its output (the nats CLI prints
# every account and user it makes whole).
show_brief() {
	say "$@"
	"$@" >"$work/brief.out"
	sed -n 1p "$work/brief.out"
}
# await WHAT CONDITION...: run CONDITION every 0.2s until it succeeds, for up to 60s.
await() {
	local what=$1 i=0
	shift
	until "$@" >/dev/null 2>&1; do
		i=$((i + 1))
		if [ "$i" -gt 300 ]; then
			echo "gave up after 60s waiting for $what" >&2
			return 1
		fi
		sleep 0.2
	done
}
# port_free P: nothing listens on 127.0.0.1:P.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# jwt_claim FILE NAME: a string claim of the JWT in FILE (sub, name, …), from its payload.
jwt_claim() {
	local payload
	payload=$(cut -d. -f2 <"$1" | tr '_-' '/+')
	while [ $((${#payload} % 4)) -ne 0 ]; do payload+='='; done
	printf '%s' "$payload" | base64 -d | sed -n "s/.*\"$2\":\"\([^\"]*\)\".*/\1/p"
}

echo "work directory: $work (shown as \$W)"
for i in 0 1 2 3 4 5 6 7 8; do
	if ! port_free $((PORT + i)); then
		echo "port $((PORT + i)) is taken: pass another first port, e.g. PORT=34222" >&2
		exit 1
	fi
done

# The Go toolchain keeps its caches and settings where it always does; everything else that
# reads HOME or XDG directories (the nats CLI's store and contexts) is pointed into the work
# directory, so no store of the user's is read or touched.
GOCACHE=$(go env GOCACHE) GOMODCACHE=$(go env GOMODCACHE) GOPATH=$(go env GOPATH) GOENV=$(go env GOENV)
export GOCACHE GOMODCACHE GOPATH GOENV
export HOME="$work/home" XDG_DATA_HOME="$work/home/data" XDG_CONFIG_HOME="$work/home/config"
mkdir -p "$HOME" "$work/bin"

step "build meshctl, nats-server (the release go.mod requires), the nats CLI $NATSCLI_VERSION and the example host"
if [ -z "${BIN:-}" ]; then
	show make --no-print-directory build
	BIN=bin/meshctl
fi
meshctl=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
show go build -o "$work/bin/nats-server" github.com/nats-io/nats-server/v2
# Outside any module and with GOFLAGS dropped: natscli builds against its own go.mod.
(cd "$work" && show env GOBIN="$work/bin" GOFLAGS= GOWORK=off go install "github.com/nats-io/natscli/nats@$NATSCLI_VERSION")
show go build -o "$work/bin/host" ./examples/host
nats="$work/bin/nats"

step "the admin makes an operator, the mesh's account and a system user with the nats CLI"
show_brief "$nats" auth operator add "$OPERATOR"
# JetStream on, unlimited: meshctl sets the account's JetStream limits at its first push, but it
# reads the account's streams before that, and the servers preload this JWT.
show_brief "$nats" auth account add MESH --operator "$OPERATOR" --defaults --jetstream --js-disk=-1 --js-memory=-1
show_brief "$nats" auth user add sys SYSTEM --operator "$OPERATOR" --defaults --credential "$work/sys.creds"
store="$XDG_DATA_HOME/nats/nsc"
operator_jwt="$store/stores/$OPERATOR/$OPERATOR.jwt"
system_jwt="$store/stores/$OPERATOR/accounts/SYSTEM/SYSTEM.jwt"
mesh_jwt="$store/stores/$OPERATOR/accounts/MESH/MESH.jwt"
system_account=$(jwt_claim "$system_jwt" sub)
mesh_account=$(jwt_claim "$mesh_jwt" sub)
echo "store: ${store//"$work"/\$W}"
echo "system account SYSTEM $system_account, mesh account MESH $mesh_account"

step "three servers trust the operator: operator, system_account, resolver (full), resolver_preload"
routes=""
for i in 0 1 2; do
	routes+="${routes:+, }nats://127.0.0.1:$((PORT + 3 + i))"
done
for i in 0 1 2; do
	n=n$((i + 1))
	mkdir -p "$work/$n"
	cat >"$work/$n/server.conf" <<EOF
server_name: $n
listen: "127.0.0.1:$((PORT + i))"
http: "127.0.0.1:$((PORT + 6 + i))"
log_file: "$work/$n/server.log"

operator: "$operator_jwt"
system_account: $system_account
resolver {
  type: full
  dir: "$work/$n/jwt"
  allow_delete: false
  interval: "2s"
}
resolver_preload {
  $system_account: "$(cat "$system_jwt")"
  $mesh_account: "$(cat "$mesh_jwt")"
}

jetstream { store_dir: "$work/$n/js", max_memory_store: 64MB, max_file_store: 256MB }
cluster { name: mesh-example, listen: "127.0.0.1:$((PORT + 3 + i))", routes: [$routes] }
EOF
done
echo "\$W/n1/server.conf:"
sed -e "s|$work|\$W|g" -e 's/: "eyJ[^"]*"/: "<its JWT>"/' "$work/n1/server.conf" | sed 's/^/  /'
for i in 0 1 2; do
	n=n$((i + 1))
	# Started directly, not through show, so that the pid is the server's own.
	say "$work/bin/nats-server" -c "$work/$n/server.conf" "&"
	"$work/bin/nats-server" -c "$work/$n/server.conf" &
	server_pids+=("$!")
done
for i in 0 1 2; do
	await "server n$((i + 1)) to take clients" bash -c "(exec 3<>/dev/tcp/127.0.0.1/$((PORT + i)))"
done
servers="nats://127.0.0.1:$PORT,nats://127.0.0.1:$((PORT + 1)),nats://127.0.0.1:$((PORT + 2))"
# The admin's own system user sees JetStream's meta group of three with a leader.
await "a JetStream meta leader with three peers" "$nats" --creds "$work/sys.creds" -s "$servers" server check meta --expect 3 --lag-critical 1000 --seen-critical 10s
show "$nats" --creds "$work/sys.creds" -s "$servers" server check meta --expect 3 --lag-critical 1000 --seen-critical 10s

step "the mesh: examples/quickstart, on these servers, in the account MESH"
mkdir -p "$work/mesh"
cp examples/quickstart/mesh.yaml "$work/mesh/"
cat >"$work/mesh/bus.yaml" <<EOF
bus:
  auth: jwt
  replicas: 3
  servers:
    - url: nats://127.0.0.1:$PORT
    - url: nats://127.0.0.1:$((PORT + 1))
    - url: nats://127.0.0.1:$((PORT + 2))
  operator:
    store: $store
    name: $OPERATOR
    account: MESH
    system_creds: $work/sys.creds
  # The servers here hold 256MB of files each; the streams are kept small.
  jetstream:
    streams:
      control: {max_bytes: 16MiB}
      events: {max_bytes: 16MiB}
      nodes: {max_bytes: 16MiB}
      seats: {max_bytes: 16MiB}
EOF
sed "s|$work|\$W|g" "$work/mesh/bus.yaml" | sed 's/^/  /'
state="$work/state"
show "$meshctl" validate -f "$work/mesh"
show "$meshctl" apply -f "$work/mesh" --state "$state"
show "$meshctl" diff -f "$work/mesh" --state "$state"

step "two module instances get their creds: the postman takes the mailer's work, the shop sends it"
show "$meshctl" credentials issue beta.postman -f "$work/mesh" --state "$state" -o "$work/postman.json"
show "$meshctl" credentials issue alpha.shop -f "$work/mesh" --state "$state" -o "$work/shop.json"
say "$work/bin/host" -membership "$work/postman.json" -seat mailer ">$work/postman.out" "2>$work/postman.log" "&"
"$work/bin/host" -membership "$work/postman.json" -seat mailer >"$work/postman.out" 2>"$work/postman.log" &
host_pid=$!
await "the postman to hold the mailer seat" grep -q 'holding seat mailer' "$work/postman.log"
sed 's/^/  /' "$work/postman.log"
show "$work/bin/host" -membership "$work/shop.json" -publish mesh.seat.mailer.accept.send -message hello
await "the postman to take the work" grep -qx 'work mesh.seat.mailer.accept.send hello' "$work/postman.out"
echo "the postman took it:"
sed 's/^/  /' "$work/postman.out"

step "revoke the postman: every server disconnects it, and it cannot join again"
show "$meshctl" credentials revoke beta.postman -f "$work/mesh" --state "$state"
await "the postman to be disconnected" grep -q 'disconnected' "$work/postman.log"
grep 'disconnected' "$work/postman.log" | head -n 1 | sed 's/^/  /'
kill "$host_pid"
wait "$host_pid" || true
host_pid=
if show "$work/bin/host" -membership "$work/postman.json" -seat mailer 2>"$work/refused.log"; then
	echo "the revoked postman joined the bus" >&2
	exit 1
fi
sed 's/^/  /' "$work/refused.log"
grep -qi 'revoked\|authorization' "$work/refused.log"
show "$meshctl" diff -f "$work/mesh" --state "$state"

step "done: on exit the servers stop and the work directory is removed"
