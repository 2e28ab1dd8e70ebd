#!/usr/bin/env python3
"""report.py FILE EXPR: exit 0 if the Python expression EXPR holds for the
JSON report of `wimm doctor --json` in FILE (bound to `r`), else 1.
msgs(r) gives its request packets grouped into messages, each starting at
an opcode that starts one (Write First 6, Only 10, Only with Immediate 11).
report.py FILE --symptoms prints the sender/receiver/counters lines."""
import json
import sys


def msgs(r):
    out = []
    for p in r["packets"]:
        if not 6 <= p["opcode"] <= 11:
            continue
        if p["opcode"] in (6, 10, 11):
            out.append([p])
        elif out:
            out[-1].append(p)
    return out


def main():
    try:
        with open(sys.argv[1]) as f:
            r = json.load(f)
    except (OSError, ValueError) as e:
        print("# report.py: %s: %s" % (sys.argv[1], e))
        return 1
    if sys.argv[2] == "--symptoms":
        for k in ("sender", "receiver", "counters"):
            print("#   %-9s %s" % (k + ":", r[k]))
        return 0
    return 0 if eval(sys.argv[2], {"msgs": msgs, "r": r}) else 1


sys.exit(main())
