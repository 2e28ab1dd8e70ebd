#!/usr/bin/env bash
# bench/tests/line-probe.sh WIMM_LINE_PROBE
#
# The probe the harness runs before each run: it measures a round trip that
# a real pair of processes made (more than none, within its time limit, and
# at least the 10 ns no two cores beat), stops at -n, leaves no process
# behind, fails (status 1) when its child dies, and refuses bad flags with
# status 2.
set -euo pipefail
PROBE=$1
TEST=line-probe
PROGRAM=$PROBE
# shellcheck source=bench/tests/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

timeout 30 "$PROBE" >"$work/a.json" 2>"$work/err" || fail "$PROBE failed: $(cat "$work/err")"
json_check "$work/a.json" "d['line_rtt_ns'] >= 10 and d['round_trips'] > 0 and 0 < d['ms'] < 1000"
timeout 30 "$PROBE" -n 100 -t 10000 >"$work/b.json" 2>"$work/err" || fail "$PROBE -n 100 failed"
json_check "$work/b.json" "d['round_trips'] == 100"
timeout 30 "$PROBE" -t 5 >"$work/c.json" 2>"$work/err" || fail "$PROBE -t 5 failed"
json_check "$work/c.json" "d['ms'] < 500"
# Its child is gone with it.
sleep 0.2
! pgrep -f "^$PROBE" >/dev/null || fail "a probe process is still running"

# A child that dies mid-run fails the probe, at once, instead of hanging it.
"$PROBE" -t 10000 -n 100000000 >"$work/d.json" 2>"$work/err" &
probe_pid=$!
child=
for _ in $(seq 50); do
    child=$(pgrep -P "$probe_pid" || true)
    [ -n "$child" ] && break
    sleep 0.1
done
[ -n "$child" ] || fail "the probe started no child"
kill -9 "$child"
rc=0
timeout 10 tail --pid="$probe_pid" -f /dev/null || fail "the probe hung after its child died"
wait "$probe_pid" || rc=$?
[ "$rc" -eq 1 ] || fail "the probe exited $rc after its child died, not 1"
grep -qF "the child process stopped answering" "$work/err" || fail "no reason given: $(cat "$work/err")"

refused "-t or -n out of range" -t 0
refused "-t or -n out of range" -n x
refused "unknown flag" -q
refused "no operands are taken" 5
