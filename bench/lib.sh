# shellcheck shell=bash
# Shared helpers of the bench/ scripts (sourced, not run).

# shellcheck disable=SC2034 # used by the scripts that source this file
BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)

say() { printf '%s: %s\n' "${0##*/}" "$*" >&2; }
die() { say "error: $*"; exit 1; }

# find_wimm BUILD_DIR: path of the wimm executable of that build.
find_wimm() {
    local build=$1 candidate
    for candidate in "$build/tools/wimm" "$build/wimm" "$build/bin/wimm"; do
        if [ -x "$candidate" ]; then
            printf '%s\n' "$candidate"
            return 0
        fi
    done
    die "no wimm executable under $build (build it first: cmake --build $build)"
}

# free_port: a TCP port nobody listens on right now.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# json_field FILE KEY: one value of the JSON object in FILE.
json_field() {
    python3 -c 'import json, sys; v = json.load(open(sys.argv[1]))[sys.argv[2]]; print("null" if v is None else v)' "$1" "$2"
}

# wait_for_line FILE PATTERN SECONDS: wait until FILE has a line matching PATTERN.
wait_for_line() {
    local file=$1 pattern=$2 deadline=$((SECONDS + $3))
    while [ "$SECONDS" -lt "$deadline" ]; do
        grep -q -- "$pattern" "$file" 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}

# start_workdir: a temporary directory in $work, removed at exit together
# with the server run_pair may have left running ($server_pid).
start_workdir() {
    work=$(mktemp -d)
    server_pid=
    trap cleanup_workdir EXIT
}
cleanup_workdir() {
    [ -z "$server_pid" ] || kill "$server_pid" 2>/dev/null || true
    rm -rf "$work"
}

# run_pair NAME OUT ERR SERVER-COMMAND... -- CLIENT-COMMAND...: the server
# in the background, the client tried again (50 times, 0.1 s apart) until
# the server listens; both must succeed. The client's stdout goes to OUT,
# its stderr to ERR (the same file: both together); on a failure both and
# the server's output are shown. Needs start_workdir.
run_pair() {
    local name=$1 out=$2 err=$3 server=()
    shift 3
    while [ "$1" != -- ]; do server+=("$1"); shift; done
    shift
    "${server[@]}" >"$work/server.out" 2>&1 &
    server_pid=$!
    for attempt in $(seq 50); do
        if [ "$err" = "$out" ]; then
            "$@" >"$out" 2>&1 && break
        else
            "$@" >"$out" 2>"$err" && break
        fi
        [ "$attempt" -lt 50 ] || { cat "$out" "$err" "$work/server.out" >&2; die "$name client failed"; }
        sleep 0.1
    done
    wait "$server_pid" || { cat "$work/server.out" >&2; die "$name server failed"; }
    server_pid=
}

# The four notification strategies, in the order the tables show them.
# shellcheck disable=SC2034 # used by the scripts that source this file
STRATEGIES="write_imm write_send send_imm write_poll"
