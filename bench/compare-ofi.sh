#!/usr/bin/env bash
# bench/compare-ofi.sh [BUILD_DIR]
#
# wimm against libfabric's own fi_pingpong on the same provider, in one run:
#   ofi:tcp  fi_pingpong -p tcp -e msg  vs  wimm pingpong --self -f ofi:tcp -o write_imm
#   ofi:shm  fi_pingpong -p shm -e rdm  vs  wimm pingpong --self -f ofi:shm -o write_imm
# 8-byte messages, ITERS iterations, REPEATS rounds alternating the tools so
# that drift of the machine hits both alike; the medians of the rounds are
# compared. Then the message rate of the four strategies at 8 and 4096 bytes
# on both providers (`wimm rate --self`).
#
# fi_pingpong prints usec/xfer = total time / (2 * iterations): a one-way
# AVERAGE. wimm reports the one-way median and average; both ratios are shown,
# the average one is the like-for-like comparison.
#
# Prints a markdown table and writes it to bench/results/ofi-<date>.md.
# Environment: REPEATS (5), ITERS (20000), RATE_ITERS (100000).
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BUILD=${1:-build}
WIMM=$(find_wimm "$BUILD")
REPEATS=${REPEATS:-5}
ITERS=${ITERS:-20000}
RATE_ITERS=${RATE_ITERS:-100000}
command -v fi_pingpong >/dev/null || die "fi_pingpong not found (Debian package libfabric-bin)"

work=$(mktemp -d)
server_pid=
cleanup() {
    [ -z "$server_pid" ] || kill "$server_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
results=$work/results.jsonl
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# fi_pingpong PROVIDER EP_TYPE: one run; appends its usec/xfer to the results.
run_fi_pingpong() {
    local prov=$1 ep=$2 port attempt out=$work/fi-client.out
    port=$(free_port)
    timeout 120 fi_pingpong -p "$prov" -e "$ep" -S 8 -I "$ITERS" -B "$port" \
        >"$work/fi-server.out" 2>&1 &
    server_pid=$!
    # The server prints nothing until it is done: retry the client until the
    # server's control port answers.
    for attempt in $(seq 50); do
        if timeout 120 fi_pingpong -p "$prov" -e "$ep" -S 8 -I "$ITERS" -P "$port" 127.0.0.1 \
            >"$out" 2>&1; then
            break
        fi
        [ "$attempt" -lt 50 ] || { cat "$out" >&2; die "fi_pingpong -p $prov client failed"; }
        sleep 0.1
    done
    wait "$server_pid" || die "fi_pingpong -p $prov server failed"
    server_pid=
    # header: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
    awk -v prov="$prov" '$1 == "8" { printf "{\"kind\": \"lat\", \"tool\": \"fi_pingpong\", \"fabric\": \"ofi:%s\", \"usec_xfer\": %s}\n", prov, $7; found = 1 }
        END { exit !found }' "$out" >>"$results" || { cat "$out" >&2; die "cannot parse fi_pingpong output"; }
}

# run_wimm MODE FABRIC OP SIZE ITERS: one wimm run; appends its JSON.
run_wimm() {
    local mode=$1 fabric=$2 op=$3 size=$4 iters=$5 out=$work/wimm.json
    if ! timeout 300 "$WIMM" "$mode" --self --json -f "$fabric" -o "$op" -s "$size" -n "$iters" \
        >"$out" 2>"$work/wimm.err"; then
        cat "$work/wimm.err" >&2
        die "wimm $mode -f $fabric -o $op -s $size failed"
    fi
    cat "$out" >>"$results"
}

for round in $(seq "$REPEATS"); do
    say "latency round $round/$REPEATS"
    run_fi_pingpong tcp msg
    run_wimm pingpong ofi:tcp write_imm 8 "$ITERS"
    run_fi_pingpong shm rdm
    run_wimm pingpong ofi:shm write_imm 8 "$ITERS"
done
for fabric in ofi:tcp ofi:shm; do
    for op in $STRATEGIES; do
        for size in 8 4096; do
            say "rate $fabric $op $size B"
            run_wimm rate "$fabric" "$op" "$size" "$RATE_ITERS"
        done
    done
done

mkdir -p "$BENCH_DIR/results"
report=$BENCH_DIR/results/ofi-$(date -u +%Y-%m-%d).md
# The raw measurements go next to the table, for a second look.
cp "$results" "$BENCH_DIR/results/ofi-$(date -u +%Y-%m-%d).jsonl"
python3 "$BENCH_DIR/tables.py" ofi "$results" \
    --libfabric "$(fi_info --version 2>/dev/null | awk '/libfabric:/ {print $2; exit}')" \
    --load "$load_before / $(cut -d' ' -f1-3 /proc/loadavg)" \
    --repeats "$REPEATS" --iters "$ITERS" --rate-iters "$RATE_ITERS" >"$work/report.md"
cp "$work/report.md" "$report"
cat "$report"
say "written to $report"
