#!/usr/bin/env bash
# bench/tests/shm-floor.sh WIMM_SHM_FLOOR
#
# The provider-floor program bench/compare-shm-floor.sh relies on: each mode
# and operation runs on shm and prints its figure (a message number that
# came wrong fails the run inside the program), and each bad value is
# refused with status 2 and a message naming the flag.
set -euo pipefail
FLOOR=$1
TEST=shm-floor
PROGRAM=$FLOOR
# shellcheck source=bench/tests/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# runs KEY ARGS...: exit 0 and one JSON object with KEY > 0.
runs() {
    local key=$1
    shift
    timeout 120 "$FLOOR" "$@" >"$work/floor.json" 2>"$work/err" || fail "$FLOOR $* failed: $(cat "$work/err")"
    json_check "$work/floor.json" "d['tool'] == 'wimm_shm_floor' and d['$key'] > 0"
}
runs avg_us -o write_imm -s 8 -n 2000
runs avg_us -o send -s 1 -n 2000
runs avg_us -o write_imm -s 0 -n 2000
runs avg_us -o write_imm -G -s 8 -n 2000
runs avg_us -o write_imm -s 65536 -n 200
runs avg_us -o send -s 65536 -n 200
runs msg_rate -m stream -o write_imm -s 8 -n 20000
runs msg_rate -m stream -o send -s 3 -n 20000
runs msg_rate -m stream -U -o write_imm -s 1048576 -n 100
runs msg_rate -m stream -o send -s 1048576 -n 100

refused "-o send needs -s 1 or more" -o send -s 0
refused "-U is for -o write_imm" -o send -U
refused "-G is for -o write_imm" -o send -G
refused "-m ring: pingpong or stream" -m ring
refused "-o read: write_imm or send" -o read
refused "-s 67108865: a number up to 67108864" -s 67108865
refused "-n x: a number" -n x
refused "usage:" -n 0
refused "usage:" extra
echo "shm-floor: ok"
