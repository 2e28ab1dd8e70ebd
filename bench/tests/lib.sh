# shellcheck shell=bash
# Shared helpers of the bench/tests scripts (sourced, not run). The script
# sets TEST (its name, for messages) and PROGRAM (the program under test)
# first; it gets $work, a temporary directory removed at exit together with
# a server left in $server_pid.
work=$(mktemp -d)
server_pid=
cleanup() {
    [ -z "$server_pid" ] || kill "$server_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "$TEST: FAIL: $*" >&2; exit 1; }

# refused EXPECTED_TEXT ARGS...: PROGRAM ARGS exits with status 2 and the
# text on stderr.
refused() {
    local want=$1 rc=0
    shift
    "$PROGRAM" "$@" >"$work/out" 2>"$work/err" || rc=$?
    [ "$rc" -eq 2 ] || fail "${PROGRAM##*/} $* exited with $rc, not 2"
    grep -qF -- "$want" "$work/err" || fail "${PROGRAM##*/} $*: no '$want' in: $(head -1 "$work/err")"
}

# json_check FILE PYTHON_CONDITION: the condition holds for the JSON in FILE
# (`d` is the first object, `r` the receiver's line if there is one).
json_check() {
    /usr/bin/python3 - "$1" "$2" <<'PY' || fail "$2 does not hold for $(cat "$1")"
import json, sys
objs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
d = objs[0]
r = next((o for o in objs if o.get("role") == "receiver"), {})
sys.exit(0 if eval(sys.argv[2]) else 1)
PY
}
