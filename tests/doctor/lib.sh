# Shared by the doctor test scripts (sourced): TAP-like checks, the JSON
# report checker, a `wimm doctor --serve -p 0` in the background. Expects W.
passed=0
failed=0
work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT

ok() {
	echo "ok - $*"
	passed=$((passed + 1))
}
not_ok() {
	echo "not ok - $*"
	failed=$((failed + 1))
}
check() { # check DESCRIPTION COMMAND...
	d=$1
	shift
	if "$@"; then ok "$d"; else not_ok "$d"; fi
}
json_check() { python3 "$here/report.py" "$@"; }

# serve_start FABRIC [ARGS]: one-shot server on a free port; sets spid, port.
serve_start() {
	"$W" doctor --serve -f "$@" -p 0 --once 2>"$work/serve.err" &
	spid=$!
	port=
	i=0
	while [ -z "$port" ] && [ $i -lt 100 ]; do
		port=$(sed -n 's/.* on TCP port \([0-9]*\),.*/\1/p' "$work/serve.err" 2>/dev/null)
		i=$((i + 1))
		[ -n "$port" ] || sleep 0.1
	done
	check "doctor --serve -f $1 listening (port ${port:-none})" [ -n "$port" ]
}

finish() {
	echo "$passed passed, $failed failed"
	[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
}
