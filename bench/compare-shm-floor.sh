#!/usr/bin/env bash
# bench/compare-shm-floor.sh [BUILD_DIR]
#
# Where ofi:shm's one-way latency goes: wimm against libfabric's shm
# provider driven directly, ROUNDS rounds in which every run below goes once,
# the order turned by one each round (drift hits all alike); every round is
# kept and printed. One-way AVERAGE on every side (fi_pingpong prints only
# that):
#   fi_pingpong -p shm -e rdm -S SIZE          the peer of the goal
#   wimm_shm_floor -o send -s SIZE             fi_pingpong's calls, our loop
#   wimm_shm_floor -o write_imm -s SIZE        wimm's calls and attributes
#                                              on shm, no wimm
#   wimm_shm_floor -o write_imm -G -s SIZE     the same through fi_writemsg,
#                                              the provider's general path
#   wimm pingpong -f ofi:shm -o write_imm      two processes
#   wimm pingpong -f ofi:shm -o send_imm       two processes
# Then, in the same rounds, streams (the message rate and bandwidth that
# wimm rate measures, from the first post to the receiver's answer):
#   wimm_shm_floor -m stream -o write_imm|send -s SIZE
#   wimm rate -f ofi:shm -o write_imm -s SIZE   two processes
# The tables give the median over the rounds of each run's ratio to
# fi_pingpong (latency) and to wimm_shm_floor -o write_imm (both) in the
# same round.
#
# Writes the raw results to bench/results/shm-floor-<date>.jsonl and the
# tables to bench/results/shm-floor-<date>.md. Environment: ROUNDS (15),
# ITERS (20000 round trips), SIZES ("8 1200"), STREAM_SIZES
# ("8 4096 65536"), STREAM_BYTES (messages per stream: this many bytes,
# 10000 to 200000 messages; 1 GiB).
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BUILD=${1:-build}
WIMM=$(find_wimm "$BUILD")
FLOOR=$BUILD/bench/wimm_shm_floor
ROUNDS=${ROUNDS:-15}
ITERS=${ITERS:-20000}
SIZES=${SIZES:-"8 1200"}
STREAM_SIZES=${STREAM_SIZES:-"8 4096 65536"}
STREAM_BYTES=${STREAM_BYTES:-1073741824}
[ -x "$FLOOR" ] || die "no $FLOOR (build it: cmake --build $BUILD --target wimm_shm_floor)"
command -v fi_pingpong >/dev/null || die "fi_pingpong not found (Debian package libfabric-bin)"

start_workdir
results=$work/results.jsonl

# shm names an endpoint's region /dev/shm/PID:... after its process; a
# killed process leaves its region behind, and a later process that gets
# the same id fails its fi_enable with EBUSY once (fi_pingpong then exits).
# The regions of processes that are gone belong to nobody: removed.
stale=0
for region in /dev/shm/[0-9]*:*; do
    [ -e "$region" ] || continue
    pid=${region#/dev/shm/}
    pid=${pid%%:*}
    [ -d "/proc/$pid" ] || { rm -f -- "$region"; stale=$((stale + 1)); }
done
[ "$stale" -eq 0 ] || say "removed $stale shm regions of processes that are gone"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# record ROUND SIZE RUN KEY VALUE
record() {
    printf '{"round": %s, "size": %s, "run": "%s", "%s": %s}\n' "$1" "$2" "$3" "$4" "$5" >>"$results"
}

# stream_count SIZE: messages per stream run.
stream_count() {
    local n=$((STREAM_BYTES / ($1 > 0 ? $1 : 1)))
    [ "$n" -ge 10000 ] || n=10000
    [ "$n" -le 200000 ] || n=200000
    echo "$n"
}

run_fi() {
    local port out=$work/fi.out avg
    port=$(free_port)
    run_pair fi_pingpong "$out" "$out" \
        timeout 120 fi_pingpong -p shm -e rdm -S "$2" -I "$ITERS" -B "$port" -- \
        timeout 120 fi_pingpong -p shm -e rdm -S "$2" -I "$ITERS" -P "$port" 127.0.0.1
    # bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec, bytes as
    # "1.1k": the line after the header.
    avg=$(awk 'h { print $7; exit } $1 == "bytes" { h = 1 }' "$out")
    [ -n "$avg" ] || { cat "$out" >&2; die "cannot parse fi_pingpong output"; }
    record "$1" "$2" fi_pingpong avg_us "$avg"
}

run_floor() {
    local out=$work/floor.json
    timeout 300 "$FLOOR" -o "$3" -s "$2" -n "$ITERS" >"$out" || die "wimm_shm_floor -o $3 -s $2 failed"
    record "$1" "$2" "floor $3" avg_us "$(json_field "$out" avg_us)"
}

run_floor_general() {
    local out=$work/floor.json
    timeout 300 "$FLOOR" -o write_imm -G -s "$2" -n "$ITERS" >"$out" || die "wimm_shm_floor -G -s $2 failed"
    record "$1" "$2" "floor write_imm -G" avg_us "$(json_field "$out" avg_us)"
}

run_wimm() {
    local port out=$work/wimm.json
    port=$(free_port)
    run_pair "wimm pingpong -o $3" "$out" "$work/client.err" \
        timeout 300 "$WIMM" pingpong -f ofi:shm -o "$3" -s "$2" -n "$ITERS" -p "$port" -- \
        timeout 300 "$WIMM" pingpong --json -f ofi:shm -o "$3" -s "$2" -n "$ITERS" -p "$port" 127.0.0.1
    record "$1" "$2" "wimm $3" avg_us "$(json_field "$out" avg_us)"
}

stream_floor() {
    local out=$work/floor.json
    timeout 300 "$FLOOR" -m stream -o "$3" -s "$2" -n "$(stream_count "$2")" >"$out" ||
        die "wimm_shm_floor -m stream -o $3 -s $2 failed"
    record "$1" "$2" "floor stream $3" msg_rate "$(json_field "$out" msg_rate)"
}

stream_wimm() {
    local port out=$work/wimm.json n
    port=$(free_port)
    n=$(stream_count "$2")
    run_pair "wimm rate" "$out" "$work/client.err" \
        timeout 300 "$WIMM" rate -f ofi:shm -o write_imm -s "$2" -n "$n" -p "$port" -- \
        timeout 300 "$WIMM" rate --json -f ofi:shm -o write_imm -s "$2" -n "$n" -p "$port" 127.0.0.1
    record "$1" "$2" "wimm rate write_imm" msg_rate "$(json_field "$out" msg_rate)"
}

# in_turn ROUND SIZE RUN...: each run once, the order turned by the round.
in_turn() {
    local round=$1 size=$2 k
    shift 2
    local runs=("$@")
    for k in $(seq 0 $((${#runs[@]} - 1))); do
        # shellcheck disable=SC2086 # a run is a function and its argument
        set -- ${runs[$(((k + round) % ${#runs[@]}))]}
        "$1" "$round" "$size" "${2:-}"
    done
}

for round in $(seq "$ROUNDS"); do
    say "round $round/$ROUNDS"
    for size in $SIZES; do
        in_turn "$round" "$size" "run_fi" "run_floor send" "run_floor write_imm" \
            "run_floor_general" "run_wimm write_imm" "run_wimm send_imm"
    done
    for size in $STREAM_SIZES; do
        in_turn "$round" "$size" "stream_floor send" "stream_floor write_imm" "stream_wimm"
    done
done

mkdir -p "$BENCH_DIR/results"
stem=$BENCH_DIR/results/shm-floor-$(date -u +%Y-%m-%d-%H%M)
cp "$results" "$stem.jsonl"
python3 - "$results" "$load_before / $(cut -d' ' -f1-3 /proc/loadavg)" "$ITERS" >"$stem.md" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
runs = ["fi_pingpong", "floor send", "floor write_imm", "floor write_imm -G", "wimm write_imm",
        "wimm send_imm"]
stream_runs = ["floor stream send", "floor stream write_imm", "wimm rate write_imm"]
names = {"fi_pingpong": "fi_pingpong -p shm -e rdm", "floor send": "wimm_shm_floor -o send",
         "floor write_imm": "wimm_shm_floor -o write_imm",
         "floor write_imm -G": "wimm_shm_floor -o write_imm -G", "wimm write_imm": "wimm pingpong -o write_imm",
         "wimm send_imm": "wimm pingpong -o send_imm",
         "floor stream send": "wimm_shm_floor -m stream -o send",
         "floor stream write_imm": "wimm_shm_floor -m stream -o write_imm",
         "wimm rate write_imm": "wimm rate -o write_imm"}
fig = {(r["round"], r["size"], r["run"]): r.get("avg_us", r.get("msg_rate")) for r in rows}
rounds = sorted({r["round"] for r in rows})

def table(title, size, runs, refs, cell):
    """Every round of RUNS at SIZE, their median, and the median of each
    run's ratio to each of REFS in the same round."""
    print(f"### {size} B: {title}, every round\n")
    print("| run | " + " | ".join(str(r) for r in rounds) + " | median | " +
          " | ".join(f"/ {ref}" for ref in refs) + " |")
    print("|---|" + "---:|" * (len(rounds) + 1 + len(refs)))
    for run in runs:
        vals = [fig[(r, size, run)] for r in rounds]
        ratios = [statistics.median(fig[(r, size, run)] / fig[(r, size, ref)] for r in rounds)
                  for ref in refs]
        print(f"| {names[run]} | " + " | ".join(cell(v) for v in vals) +
              f" | {cell(statistics.median(vals))} | " + " | ".join(f"{x:.2f}x" for x in ratios) + " |")
    print()

sizes = lambda runs: sorted({s for (_, s, run) in fig if run in runs})
for size in sizes(runs):
    table(f"one-way average, µs ({sys.argv[3]} round trips per run)", size, runs,
          ["fi_pingpong", "floor write_imm"], lambda v: f"{v:.3f}")
for size in sizes(stream_runs):
    table("stream, M messages/s (GB/s)", size, stream_runs, ["floor stream write_imm"],
          lambda v, size=size: f"{v / 1e6:.3f}" + (f" ({v * size / 1e9:.2f})" if size >= 4096 else ""))
print("Ratios: the median over the rounds of the run's figure over the other's in the same round.")
print(f"\nload average before / after: {sys.argv[2]}")
EOF
cat "$stem.md"
say "written to $stem.md"
