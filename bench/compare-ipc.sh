#!/usr/bin/env bash
# bench/compare-ipc.sh [BUILD_DIR]
#
# The intra-host fabrics side by side, 8-byte one-way latency, ROUNDS rounds
# in which every tool runs once in turn (drift hits all alike); every round
# is kept and printed:
#   wimm pingpong -f ipc -o write_imm        --self, and as two processes
#   wimm pingpong -f ofi:shm -o write_imm    --self (its two-process client was
#                                            refused by the server's TCP side channel
#                                            inside this script: not measured here)
#   fi_pingpong -p shm -e rdm -S 8           two processes (prints an average)
#   ucx_perftest -t ucp_am_lat -s 8          two processes, UCX_TLS=posix,self
#                                            (prints the median and average)
# Same statistic on both sides: wimm avg vs fi_pingpong avg, wimm median vs
# ucx_perftest median (50.0%ile), and wimm avg vs ucx average.
# Then, once per round too: message rate at 8 B (wimm rate vs ucp_am_bw) and
# bandwidth at 4 KiB and 1 MiB (wimm rate vs ucp_am_bw), ipc and ofi:shm.
#
# Writes the raw results to bench/results/ipc-<date>.jsonl and the table to
# bench/results/ipc-<date>.md. Environment: ROUNDS (5), ITERS (20000),
# RATE_ITERS (100000), BW_ITERS (2000 for 1 MiB).
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BUILD=${1:-build}
WIMM=$(find_wimm "$BUILD")
ROUNDS=${ROUNDS:-5}
ITERS=${ITERS:-20000}
RATE_ITERS=${RATE_ITERS:-100000}
BW_ITERS=${BW_ITERS:-2000}
command -v fi_pingpong >/dev/null || die "fi_pingpong not found (Debian package libfabric-bin)"
command -v ucx_perftest >/dev/null || die "ucx_perftest not found (Debian package ucx-utils)"

start_workdir
results=$work/results.jsonl
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# record ROUND TOOL WHAT JSON-MEMBERS: one line of the results.
record() {
    printf '{"round": %s, "tool": "%s", "what": "%s", %s}\n' "$1" "$2" "$3" "$4" >>"$results"
}

# wimm_self ROUND MODE FABRIC SIZE ITERS
wimm_self() {
    local out=$work/wimm.json
    timeout 300 "$WIMM" "$2" --self --json -f "$3" -o write_imm -s "$4" -n "$5" >"$out" \
        2>"$work/wimm.err" || { cat "$work/wimm.err" >&2; die "wimm $2 --self -f $3 failed"; }
    record "$1" wimm "$2 --self $3 $4" "\"result\": $(cat "$out")"
}

# wimm_pair ROUND FABRIC: pingpong as server + client processes.
wimm_pair() {
    local port out=$work/wimm.json
    port=$(free_port)
    run_pair "wimm pingpong on $2" "$out" "$work/wimm.err" \
        timeout 300 "$WIMM" pingpong -f "$2" -o write_imm -s 8 -n "$ITERS" -p "$port" -- \
        timeout 300 "$WIMM" pingpong --json -f "$2" -o write_imm -s 8 -n "$ITERS" -p "$port" 127.0.0.1
    record "$1" wimm "pingpong 2proc $2 8" "\"result\": $(cat "$out")"
}

fi_pair() {
    local port out=$work/fi.out
    port=$(free_port)
    run_pair fi_pingpong "$out" "$out" \
        timeout 120 fi_pingpong -p shm -e rdm -S 8 -I "$ITERS" -B "$port" -- \
        timeout 120 fi_pingpong -p shm -e rdm -S 8 -I "$ITERS" -P "$port" 127.0.0.1
    # bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
    local avg
    avg=$(awk '$1 == "8" { print $7; exit }' "$out")
    [ -n "$avg" ] || { cat "$out" >&2; die "cannot parse fi_pingpong output"; }
    record "$1" fi_pingpong "pingpong 2proc ofi:shm 8" "\"avg_us\": $avg"
}

# ucx_pair ROUND TEST SIZE ITERS
ucx_pair() {
    local port out=$work/ucx.out
    port=$(free_port)
    run_pair ucx_perftest "$out" "$out" \
        env UCX_TLS=posix,self timeout 120 ucx_perftest -p "$port" -- \
        env UCX_TLS=posix,self timeout 120 ucx_perftest 127.0.0.1 -p "$port" -t "$2" -s "$3" -n "$4"
    # Final: iters median avg overall bw_avg bw_overall rate_avg rate_overall
    local line
    line=$(awk '$1 == "Final:" { printf "\"median_us\": %s, \"avg_us\": %s, \"bw_mbps\": %s, \"msg_rate\": %s", $3, $4, $6, $8 }' "$out")
    [ -n "$line" ] || { cat "$out" >&2; die "cannot parse ucx_perftest output"; }
    record "$1" ucx_perftest "$2 $3" "$line"
}

for round in $(seq "$ROUNDS"); do
    say "round $round/$ROUNDS: latency"
    wimm_self "$round" pingpong ipc 8 "$ITERS"
    wimm_pair "$round" ipc
    wimm_self "$round" pingpong ofi:shm 8 "$ITERS"
    fi_pair "$round"
    ucx_pair "$round" ucp_am_lat 8 "$ITERS"
    say "round $round/$ROUNDS: rate and bandwidth"
    for fabric in ipc ofi:shm; do
        wimm_self "$round" rate "$fabric" 8 "$RATE_ITERS"
        wimm_self "$round" rate "$fabric" 4096 "$RATE_ITERS"
        wimm_self "$round" rate "$fabric" 1048576 "$BW_ITERS"
    done
    ucx_pair "$round" ucp_am_bw 8 "$RATE_ITERS"
    ucx_pair "$round" ucp_am_bw 4096 "$RATE_ITERS"
    ucx_pair "$round" ucp_am_bw 1048576 "$BW_ITERS"
done

mkdir -p "$BENCH_DIR/results"
stem=$BENCH_DIR/results/ipc-$(date -u +%Y-%m-%d)
cp "$results" "$stem.jsonl"
python3 - "$results" "$load_before / $(cut -d' ' -f1-3 /proc/loadavg)" >"$stem.md" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rounds = sorted({r["round"] for r in rows})
def val(what, key, rnd):
    for r in rows:
        if r["round"] == rnd and r["what"] == what:
            v = r.get("result", r).get(key)
            return "-" if v is None else v
    return "-"
lat = [("wimm ipc --self", "pingpong --self ipc 8"), ("wimm ipc 2 procs", "pingpong 2proc ipc 8"),
       ("wimm ofi:shm --self", "pingpong --self ofi:shm 8"),
       ("fi_pingpong shm rdm", "pingpong 2proc ofi:shm 8"), ("ucx_perftest ucp_am_lat", "ucp_am_lat 8")]
print("8-byte one-way latency, µs, every round (median / avg; fi_pingpong prints an avg only)\n")
print("| run | " + " | ".join(f"round {r}" for r in rounds) + " |")
print("|---|" + "---:|" * len(rounds))
for name, what in lat:
    cells = []
    for r in rounds:
        if name.startswith("fi_pingpong"):
            v = [x for x in rows if x["round"] == r and x["tool"] == "fi_pingpong"]
            cells.append(f"- / {v[0]['avg_us']:.3f}" if v else "-")
        else:
            m, a = val(what, "median_us", r), val(what, "avg_us", r)
            cells.append(f"{m:.3f} / {a:.3f}" if m != "-" else "-")
    print(f"| {name} | " + " | ".join(cells) + " |")
print("\nMessage rate (M msg/s) and bandwidth (MB/s, 10^6 B), every round\n")
print("| run | " + " | ".join(f"round {r}" for r in rounds) + " |")
print("|---|" + "---:|" * len(rounds))
# The message rate at 8 B, the bandwidth at 4 KiB and 1 MiB.
sizes = (("8", "msg_rate", 1e-6, "M/s"), ("4096", "bw_mbps", 1, "MB/s"),
         ("1048576", "bw_mbps", 1, "MB/s"))
for fab in ("ipc", "ofi:shm"):
    for size, key, scale, unit in sizes:
        cells = [val(f"rate --self {fab} {size}", key, r) for r in rounds]
        print(f"| wimm rate {fab} {size} B {unit} | " +
              " | ".join("-" if c == "-" else f"{c * scale:.3f}" for c in cells) + " |")
for size, key, scale, unit in sizes:
    # ucx_perftest's MB is 2^20 bytes, wimm's 10^6: shown in wimm's.
    if key == "bw_mbps":
        scale = 1.048576
    cells = [val(f"ucp_am_bw {size}", key, r) for r in rounds]
    print(f"| ucx ucp_am_bw {size} B {unit} | " +
          " | ".join("-" if c == "-" else f"{float(c) * scale:.3f}" for c in cells) + " |")
print(f"\nload average before / after: {sys.argv[2]}")
EOF
cat "$stem.md"
say "written to $stem.md"
