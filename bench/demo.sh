#!/usr/bin/env bash
# bench/demo.sh [BUILD_DIR]
#
# The notification strategies side by side on the default fabric
# ("auto": an RDMA device if there is one, else ofi:tcp), 8-byte messages:
# ping-pong latency and streaming message rate, each with `wimm ... --self`
# (server and client in one process, a context each).
# Exits non-zero if any run fails.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BUILD=${1:-build}
WIMM=$(find_wimm "$BUILD")
FABRIC=${WIMM_DEMO_FABRIC:-auto}
SIZE=8

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The fifth, write_atomic, where the fabric has atomics (NOTSUP elsewhere:
# then its row says so).
ops="$STRATEGIES write_atomic"
for op in $ops; do
    for mode in pingpong rate; do
        say "$mode $op ($FABRIC, $SIZE B)"
        if ! timeout 120 "$WIMM" "$mode" --self --json -f "$FABRIC" -o "$op" -s "$SIZE" \
            >"$work/$mode-$op.json" 2>"$work/$mode-$op.err"; then
            if [ "$op" = write_atomic ] && grep -q WIMM_E_NOTSUP "$work/$mode-$op.err"; then
                rm -f "$work/$mode-$op.json"
                continue
            fi
            cat "$work/$mode-$op.err" >&2
            die "wimm $mode -o $op failed"
        fi
    done
done

# shellcheck disable=SC2086 # one argument per strategy
python3 - "$work" $ops <<'EOF'
import json, os, sys
work, ops = sys.argv[1], sys.argv[2:]
rows, missing = [], []
for op in ops:
    if not os.path.exists(f"{work}/pingpong-{op}.json"):
        missing.append(op)
        continue
    pp = json.load(open(f"{work}/pingpong-{op}.json"))
    rt = json.load(open(f"{work}/rate-{op}.json"))
    rows.append((op, pp, rt))
fabric = rows[0][1]["fabric"]
print(f"\nwimm: {len(rows)} ways to say 'your data is here' -- fabric {fabric}, "
      f"{rows[0][1]['size']}-byte messages")
print("latency = one-way (round trip / 2); msg rate pingpong = round trips/s;"
      " rate mode = streamed messages/s\n")
head = ("strategy", "median us", "p99 us", "msg rate pingpong", "msg rate (rate mode)")
table = [head] + [(op, f"{pp['median_us']:.2f}", f"{pp['p99_us']:.2f}",
                   f"{pp['msg_rate'] / 1e3:.1f} k/s", f"{rt['msg_rate'] / 1e6:.3f} M/s")
                  for op, pp, rt in rows]
widths = [max(len(r[i]) for r in table) for i in range(len(head))]
for n, r in enumerate(table):
    print("| " + " | ".join(c.ljust(w) if i == 0 else c.rjust(w)
                            for i, (c, w) in enumerate(zip(r, widths))) + " |")
    if n == 0:
        print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
print("\nwrite_imm: data + doorbell in one operation; write_send: write, then a 0-byte send;\n"
      "send_imm: two-sided send into a posted buffer; write_poll: write, receiver polls a flag\n"
      "byte (no completion: only works where bytes land in order, see docs/errata.md E8);\n"
      "write_atomic: write, then a fetch-and-add on a signal word the receiver polls.")
for op in missing:
    print(f"{op}: not on {fabric} (the fabric has no atomics: try -f ofi:shm, ipc or verbs)")
EOF
