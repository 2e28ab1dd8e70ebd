#!/bin/sh
# `wimm doctor` natively on a libfabric fabric (ctest doctor.<fabric>):
#
#   tests/doctor/doctor-native.sh WIMM FABRIC
#
# A loopback pair and a remote pair (against `wimm doctor --serve -p 0`)
# must pass steps 0-4, with step 5 n/a (no RoCE on ofi), and exit 0.
# A fabric that cannot be opened fails here (exit 2 is no pass).
set -u

W=${1:?usage: doctor-native.sh WIMM FABRIC}
fab=${2:?usage: doctor-native.sh WIMM FABRIC}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

"$W" doctor -f "$fab" --json >"$work/loop.json"
rc=$?
check "$fab loopback: exit 0 (got $rc)" [ "$rc" -eq 0 ]
check "$fab loopback: steps 0-4 pass, step 5 n/a" json_check "$work/loop.json" \
	'[s["status"] for s in r["steps"]] == ["pass"] * 5 + ["n/a"]'
check "$fab loopback: the three probes arrived with their imm and length" \
	json_check "$work/loop.json" \
	'all(("imm 0x%08x len %d" % (0xd0c70000 + i, n)) in r["receiver"] for i, n in enumerate((0, 64, 3000)))'

if serve_start "$fab"; then
	"$W" doctor -f "$fab" -p "$port" --json 127.0.0.1 >"$work/remote.json"
	rc=$?
	wait "$spid"
	check "$fab against doctor --serve: exit 0 (got $rc)" [ "$rc" -eq 0 ]
	check "$fab against doctor --serve: remote pair, steps 0-4 pass, step 5 n/a" \
		json_check "$work/remote.json" \
		'r["setup"].startswith("remote") and [s["status"] for s in r["steps"]] == ["pass"] * 5 + ["n/a"]'
fi
finish
