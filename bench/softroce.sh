#!/usr/bin/env bash
# bench/softroce.sh [BUILD_DIR]
#
# Run INSIDE the Soft-RoCE guest (tests/softroce/run bench/softroce.sh build):
# wimm on verbs:rxe0 against Debian perftest on the same device, in one run.
#   latency  wimm pingpong, four strategies, 8 and 1200 bytes
#            ib_send_lat and ib_write_lat, 8 and 1200 bytes
#   rate     wimm rate -o write_imm -s 64  vs  ib_write_bw -s 64 (and, for
#            context, wimm rate -o write_poll and ib_send_bw)
# REPEATS rounds alternate the tools; the tables show medians over the rounds.
# Server and client are two processes on 192.0.2.1 (rxe's internal loopback).
# Ratios: write_imm vs ib_send_lat (both wait for a receive completion),
# write_poll vs ib_write_lat (both poll memory), rate vs ib_write_bw.
# Prints a markdown table and writes it to bench/results/softroce-<date>.md.
# Environment: ITERS (2000), RATE_ITERS (20000), REPEATS (3), DEVICE (rxe0),
# ADDR (192.0.2.1).
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BUILD=${1:-build}
WIMM=$(find_wimm "$BUILD")
ITERS=${ITERS:-2000}
RATE_ITERS=${RATE_ITERS:-20000}
REPEATS=${REPEATS:-3}
DEVICE=${DEVICE:-rxe0}
ADDR=${ADDR:-192.0.2.1}
FABRIC=verbs:$DEVICE
for tool in ib_write_lat ib_send_lat ib_write_bw ib_send_bw; do
    command -v "$tool" >/dev/null || die "$tool not found (Debian package perftest)"
done

clocksource=$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null \
    || echo unknown)
if [ "$clocksource" != tsc ]; then
    # perftest reads the TSC; wimm and the library call clock_gettime, a
    # system call (about 1 us in a TCG guest) when the clocksource is not tsc.
    say "note: guest clocksource is $clocksource, not tsc; for fairer timing run with" \
        "WIMM_SOFTROCE_KERNEL_ARGS='clocksource=tsc tsc=reliable'"
fi

work=$(mktemp -d)
server_pid=
cleanup() {
    [ -z "$server_pid" ] || kill "$server_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
results=$work/results.jsonl
next_port=18600

# wimm_pair MODE OP SIZE ITERS: server in the background, client to $ADDR.
wimm_pair() {
    local mode=$1 op=$2 size=$3 iters=$4 port=$((next_port++))
    local flags=(-f "$FABRIC" -o "$op" -s "$size" -n "$iters" -p "$port")
    timeout 300 "$WIMM" "$mode" "${flags[@]}" >/dev/null 2>"$work/server.err" &
    server_pid=$!
    wait_for_line "$work/server.err" "listening on port" 60 \
        || { cat "$work/server.err" >&2; die "wimm $mode server did not start"; }
    if ! timeout 300 "$WIMM" "$mode" "${flags[@]}" --json "$ADDR" >"$work/client.json" \
        2>"$work/client.err"; then
        cat "$work/client.err" "$work/server.err" >&2
        die "wimm $mode -o $op -s $size failed"
    fi
    wait "$server_pid" || { cat "$work/server.err" >&2; die "wimm $mode server failed"; }
    server_pid=
    cat "$work/client.json" >>"$results"
}

# perftest_pair TOOL SIZE ITERS: server in the background, client retried
# until the server listens; the client's output is left in $work/perftest.out.
perftest_pair() {
    local tool=$1 size=$2 iters=$3 port=$((next_port++)) attempt
    local flags=(-d "$DEVICE" -x 1 -s "$size" -n "$iters" -p "$port")
    timeout 300 "$tool" "${flags[@]}" >"$work/perftest-server.out" 2>&1 &
    server_pid=$!
    for attempt in $(seq 100); do
        if timeout 300 "$tool" "${flags[@]}" "$ADDR" >"$work/perftest.out" 2>&1; then
            break
        fi
        [ "$attempt" -lt 100 ] || { cat "$work/perftest.out" >&2; die "$tool client failed"; }
        sleep 0.2
    done
    wait "$server_pid" || { cat "$work/perftest-server.out" >&2; die "$tool server failed"; }
    server_pid=
}

# ib_*_lat columns: #bytes #iterations t_min t_max t_typical t_avg ...
run_perftest_lat() {
    local tool=$1 size=$2
    perftest_pair "$tool" "$size" "$ITERS"
    awk -v tool="$tool" -v size="$size" -v iters="$ITERS" \
        '$1 == size && $2 == iters && NF >= 6 && $5 ~ /^[0-9.]+$/ && $6 ~ /^[0-9.]+$/ {
            printf "{\"kind\": \"lat\", \"tool\": \"%s\", \"size\": %s, \"typical_us\": %s, \"avg_us\": %s}\n", tool, size, $5, $6
            found = 1; exit }
         END { exit !found }' "$work/perftest.out" >>"$results" \
        || { cat "$work/perftest.out" >&2; die "cannot parse $tool output"; }
}

# ib_*_bw columns: #bytes #iterations BW_peak BW_average MsgRate[Mpps]
run_perftest_bw() {
    local tool=$1 size=$2
    perftest_pair "$tool" "$size" "$RATE_ITERS"
    awk -v tool="$tool" -v size="$size" \
        '$1 == size && NF >= 5 && $5 ~ /^[0-9.]+$/ {
            printf "{\"kind\": \"bw\", \"tool\": \"%s\", \"size\": %s, \"mpps\": %s}\n", tool, size, $5
            found = 1; exit }
         END { exit !found }' "$work/perftest.out" >>"$results" \
        || { cat "$work/perftest.out" >&2; die "cannot parse $tool output"; }
}

for round in $(seq "$REPEATS"); do
    for size in 8 1200; do
        for op in $STRATEGIES; do
            say "round $round/$REPEATS: wimm pingpong $op $size B"
            wimm_pair pingpong "$op" "$size" "$ITERS"
        done
        for tool in ib_send_lat ib_write_lat; do
            say "round $round/$REPEATS: $tool $size B"
            run_perftest_lat "$tool" "$size"
        done
    done
    for op in write_imm write_poll; do
        say "round $round/$REPEATS: wimm rate $op 64 B"
        wimm_pair rate "$op" 64 "$RATE_ITERS"
    done
    for tool in ib_write_bw ib_send_bw; do
        say "round $round/$REPEATS: $tool 64 B"
        run_perftest_bw "$tool" 64
    done
done

mkdir -p "$BENCH_DIR/results"
report=$BENCH_DIR/results/softroce-$(date -u +%Y-%m-%d).md
# The raw measurements go next to the table, for a second look.
cp "$results" "$BENCH_DIR/results/softroce-$(date -u +%Y-%m-%d).jsonl"
python3 "$BENCH_DIR/tables.py" softroce "$results" --iters "$ITERS" --rate-iters "$RATE_ITERS" \
    --repeats "$REPEATS" --clocksource "$clocksource" >"$work/report.md"
cp "$work/report.md" "$report"
cat "$report"
say "written to $report"
