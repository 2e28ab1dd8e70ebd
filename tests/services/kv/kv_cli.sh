#!/bin/sh
# wimm kv serve / put / get / del / stat as separate processes, and their
# errors: kv_cli.sh WIMM FABRIC
set -u
WIMM=$1
FABRIC=$2
T=$(mktemp -d)
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; rm -rf "$T"' EXIT
fail() { echo "kv_cli: $*" >&2; exit 1; }

"$WIMM" kv serve --memory 4M --clients 4 --port 0 -f "$FABRIC" > "$T/serve" 2>&1 &
SERVER=$!
for i in $(seq 100); do grep -q port "$T/serve" && break; sleep 0.1; done
PORT=$(sed -n 's/.*port \([0-9]*\) .*/\1/p' "$T/serve" | head -1)
[ -n "$PORT" ] || fail "the server did not start: $(cat "$T/serve")"
H=127.0.0.1:$PORT
kv() { "$WIMM" kv "$@" -f "$FABRIC"; }

printf 'hello, slot pool' | kv put "$H" greeting - || fail "put from stdin"
[ "$(kv get "$H" greeting)" = "hello, slot pool" ] || fail "get after put"
head -c 200000 /dev/urandom > "$T/big"
kv put --pin "$H" big "$T/big" || fail "put of a file"
kv get "$H" big > "$T/big.out" && cmp -s "$T/big" "$T/big.out" || fail "get of a file"
kv del "$H" greeting || fail "del"
kv get "$H" greeting 2> "$T/err" && fail "get after del succeeded"
grep -q "not found" "$T/err" || fail "a miss does not say not found: $(cat "$T/err")"
kv del "$H" greeting 2> "$T/err"; [ $? -eq 1 ] || fail "del of a missing key: not status 1"
kv stat "$H" > "$T/stat" || fail "stat"
grep -q "keys 1 " "$T/stat" || fail "stat: $(cat "$T/stat")"
"$WIMM" kv serve --memory 12Q 2> "$T/err"; [ $? -eq 2 ] || fail "bad size: not status 2"
grep -q "bad size" "$T/err" || fail "bad size: $(cat "$T/err")"
kv stat 127.0.0.1:1 2> "$T/err"; [ $? -eq 1 ] || fail "unreachable: not status 1"
grep -q "cannot reach" "$T/err" || fail "unreachable: $(cat "$T/err")"
kill -TERM $SERVER; wait $SERVER || fail "serve did not end cleanly on SIGTERM"
grep -q "puts 2" "$T/serve" || fail "serve's final counters: $(cat "$T/serve")"
echo "kv_cli $FABRIC: pass"
