#!/usr/bin/env bash
# bench/tests/cli-options.sh WIMM FABRIC
#
# The benchmark options the harness relies on: `wimm rate --rate` paces the
# timed round and the receiver reports its CPU; `wimm bulk` moves its bytes
# in chunks with a doorbell per chunk or one at the end; pingpong records
# whether it posted prepared operations (--post); each bad value is
# refused with status 2 and a message naming the flag.
set -euo pipefail
WIMM=$1
FABRIC=$2
TEST=cli-options
PROGRAM=$WIMM
# shellcheck source=bench/tests/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

refused "bad value for --rate" rate --rate 0
refused "bad value for --rate" rate --rate -5
refused "bad value for --rate" rate --rate 10x
refused "--rate is a flag of wimm rate" pingpong --rate 100
refused "--chunk is a flag of wimm bulk" rate --chunk 4K
refused "--notify is a flag of wimm bulk" pingpong --notify last
refused "unknown --notify 'some'" bulk --notify some
refused "--chunk must be at least 1" bulk --chunk 0
refused "--chunk is larger than -s" bulk -s 4K --chunk 8K
refused "bulk's doorbell is write_imm" bulk -o write_send
refused "wimm bulk needs -s of at least 1" bulk -s 0
refused "unknown --memory 'shm'" rate --memory shm
refused "--memory needs a value" pingpong --memory
refused "unknown --post 'fast'" pingpong --post fast
refused "--post needs a value" rate --post

# The record says how the messages were posted: prepared unless --post call.
"$WIMM" pingpong --self -f "$FABRIC" --json -n 200 >"$work/prepared.json"
json_check "$work/prepared.json" 'd["post"] == "prepared"'
"$WIMM" pingpong --self -f "$FABRIC" --json -n 200 --post call >"$work/call.json"
json_check "$work/call.json" 'd["post"] == "call"'


# A paced run takes at least iters / rate seconds: 2000 at 4000/s, 0.5 s.
"$WIMM" rate --self -f "$FABRIC" --json -n 2000 --rate 4000 --wait block >"$work/rate.json"
json_check "$work/rate.json" \
    'd["elapsed_s"] >= 0.49 and d["pace_per_s"] == 4000 and d["rx_doorbells"] == 2000 and d["rx_cpu_user_s"] + d["rx_cpu_sys_s"] > 0'

# Two processes: the server's own line carries its CPU.
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$WIMM" bulk -f "$FABRIC" -p "$port" --timeout 60 --json -s 1M --chunk 64K --notify last \
    >"$work/server.json" 2>"$work/server.err" &
server_pid=$!
for _ in $(seq 200); do grep -q "listening on port" "$work/server.err" && break; sleep 0.05; done
"$WIMM" bulk -f "$FABRIC" -p "$port" --timeout 60 --json -s 1M --chunk 64K --notify last \
    127.0.0.1 >"$work/client.json"
wait "$server_pid" || fail "bulk server failed: $(cat "$work/server.err")"
server_pid=
json_check "$work/client.json" 'd["mode"] == "bulk" and d["chunks"] == 16 and d["iters"] == 3 and d["median_ms"] > 0'
# --notify last: one doorbell per transfer, three timed transfers.
json_check "$work/server.json" 'r["rx_doorbells"] == 3 and r["rx_cpu_user_s"] >= 0'

# A receiver run with another --chunk than its sender says so and fails.
"$WIMM" bulk -f "$FABRIC" -p "$port" --timeout 20 -s 1M --chunk 64K >/dev/null \
    2>"$work/server.err" &
server_pid=$!
for _ in $(seq 200); do grep -q "listening on port" "$work/server.err" && break; sleep 0.05; done
"$WIMM" bulk -f "$FABRIC" -p "$port" --timeout 20 -s 1M --chunk 32K 127.0.0.1 \
    >/dev/null 2>&1 || true
rc=0
wait "$server_pid" || rc=$?
server_pid=
[ "$rc" -eq 1 ] || fail "a bulk server with another --chunk exited with $rc, not 1"
grep -q "expected the doorbell of chunk 0 (65536 bytes)" "$work/server.err" \
    || fail "no chunk mismatch message in: $(cat "$work/server.err")"

# --notify each with a last chunk shorter than the others.
"$WIMM" bulk --self -f "$FABRIC" --json -s 100000 --chunk 4K -n 2 >"$work/each.json"
json_check "$work/each.json" 'd["chunks"] == 25 and d["rx_doorbells"] == 50'

# rate's window without -d: the fabric's max_depth up to 256 (fewer for
# send_imm when 256 receive buffers would pass 64 MiB, never below 64); -d
# wins. The fabric's max_depth is what its refusal of the deepest -d names.
rc=0
"$WIMM" rate --self -f "$FABRIC" -n 10 -d 65536 >/dev/null 2>"$work/err" || rc=$?
max_depth=$(sed -n 's/.*deeper than .* allows: use -d \([0-9]*\) or less.*/\1/p' "$work/err")
[ "$rc" -eq 1 ] && [ -n "$max_depth" ] || fail "rate -d 65536 exited with $rc: $(cat "$work/err")"
want=$(( max_depth < 256 ? max_depth : 256 ))
"$WIMM" rate --self -f "$FABRIC" --json -n 2000 >"$work/window.json"
json_check "$work/window.json" "d['depth'] == $want"
want=$(( max_depth < 64 ? max_depth : 64 ))
"$WIMM" rate --self -f "$FABRIC" --json -n 200 -o send_imm -s 1M >"$work/window.json"
json_check "$work/window.json" "d['depth'] == $want"
"$WIMM" rate --self -f "$FABRIC" --json -n 2000 -d 16 >"$work/window.json"
json_check "$work/window.json" "d['depth'] == 16"
"$WIMM" pingpong --self -f "$FABRIC" --json -n 200 >"$work/window.json"
json_check "$work/window.json" "d['depth'] == 64"
echo "cli-options: ok"
