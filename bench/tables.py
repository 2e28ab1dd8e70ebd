#!/usr/bin/env python3
"""Markdown tables for the bench/ scripts.

Input: a file of JSON lines, one per measurement: the objects `wimm ... --json`
prints, plus {"kind": "lat"|"bw", "tool": <reference tool>, ...} lines the
scripts write for the reference tools they parsed.

  tables.py ofi RESULTS [--libfabric V] [--load L] [--repeats N] [--iters N] [--rate-iters N]
  tables.py softroce RESULTS [--iters N] [--rate-iters N]
"""
import argparse
import datetime
import json
import os
import statistics
import sys

STRATEGIES = ["write_imm", "write_send", "send_imm", "write_poll"]


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def table(head, rows, align):
    out = ["| " + " | ".join(head) + " |",
           "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def ratio(a, b):
    return f"{a / b:.2f}x" if a is not None and b else "n/a"


def num(v, digits=2):
    return "n/a" if v is None else f"{v:.{digits}f}"


def is_wimm(r, mode):
    return r.get("mode") == mode and "tool" not in r


def ofi_report(args):
    rows = load(args.results)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    targets = {"ofi:tcp": 1.15, "ofi:shm": 1.25}
    print(f"## wimm vs fi_pingpong, libfabric {args.libfabric or '?'} ({now})\n")
    print(f"Machine: {cpu_model()}, {os.cpu_count()} cores; load average before / after: "
          f"{args.load or '?'}. Server and client share the machine's cores.\n")
    print(f"8-byte ping-pong, {args.iters} iterations per run, {args.repeats} runs alternating "
          "fi_pingpong and `wimm pingpong --self -o write_imm`; each figure is the median of the "
          "runs' figures. One-way latency in µs. fi_pingpong's usec/xfer is total time / "
          "(2 × iterations), an average: `wimm avg / fi` is the like-for-like ratio, "
          "`wimm median / fi` is shown too; `best` columns compare the least disturbed run of "
          "each tool. fi_pingpong uses send/recv (`-e msg` for tcp, "
          "`-e rdm` for shm); wimm uses write-with-imm.\n")
    lat_rows = []
    details = []
    for fabric in ("ofi:tcp", "ofi:shm"):
        fi = [r["usec_xfer"] for r in rows if r.get("tool") == "fi_pingpong"
              and r["fabric"] == fabric]
        wm = [r for r in rows if is_wimm(r, "pingpong") and r["fabric"] == fabric]
        if not fi or not wm:
            continue
        fi_med = statistics.median(fi)
        w_med = statistics.median(r["median_us"] for r in wm)
        w_avg = statistics.median(r["avg_us"] for r in wm)
        # Best of the runs: on a shared machine the least disturbed run of
        # each tool is the closest to what the fabric can do.
        fi_best = min(fi)
        w_best = min(r["avg_us"] for r in wm)
        target = targets[fabric]
        met = "yes" if w_avg / fi_med <= target else "no"
        met_best = "yes" if w_best / fi_best <= target else "no"
        lat_rows.append((fabric, num(fi_med), num(w_med), num(w_avg), ratio(w_med, fi_med),
                         ratio(w_avg, fi_med), num(fi_best), num(w_best),
                         ratio(w_best, fi_best), f"≤ {target:.2f}x", f"{met} / {met_best}"))
        runs = ", ".join(f"{a:.2f}/{r['median_us']:.2f}/{r['avg_us']:.2f}"
                         for a, r in zip(fi, wm))
        details.append(f"- {fabric} per run (fi usec/xfer / wimm median / wimm avg): "
                       f"{runs}")
    print(table(("fabric", "fi_pingpong µs", "wimm median µs", "wimm avg µs",
                 "wimm median / fi", "wimm avg / fi", "best fi µs", "best wimm avg µs",
                 "best / best", "target", "met (avg / best)"),
                lat_rows, "lrrrrrrrrrl"))
    print()
    print("\n".join(details))
    print()

    print(f"### Message rate, `wimm rate --self`, {args.rate_iters} messages per run\n")
    print("Million messages per second from the client's first post to the server's final "
          "acknowledgement; one run each.\n")
    rate_rows = []
    for fabric in ("ofi:tcp", "ofi:shm"):
        for op in STRATEGIES:
            got = {r["size"]: r for r in rows if is_wimm(r, "rate") and r["fabric"] == fabric
                   and r["op"] == op}
            if not got:
                continue
            small, big = got.get(8), got.get(4096)
            rate_rows.append((fabric, op,
                              num(small and small["msg_rate"] / 1e6, 3),
                              num(big and big["msg_rate"] / 1e6, 3),
                              num(big and big["bw_mbps"], 0)))
    print(table(("fabric", "strategy", "8 B Mmsg/s", "4096 B Mmsg/s", "4096 B MB/s"),
                rate_rows, "llrrr"))


def softroce_report(args):
    rows = load(args.results)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")

    def ref(tool, size, key):
        """Median over the rounds of one perftest figure, or None."""
        values = [r[key] for r in rows if r.get("tool") == tool and r.get("size") == size]
        return statistics.median(values) if values else None

    def wimm(mode, op, size, key):
        values = [r[key] for r in rows if is_wimm(r, mode) and r["op"] == op
                  and r["size"] == size and r[key] is not None]
        return statistics.median(values) if values else None

    print(f"## wimm vs perftest on Soft-RoCE (verbs:rxe0 in a QEMU TCG guest, {now})\n")
    print(f"Server and client are two processes on 192.0.2.1 (rxe loopback); {args.iters} "
          f"iterations per latency run, {args.rate_iters} messages per rate run; "
          f"{args.repeats} rounds alternating the tools, each figure the median over the "
          "rounds. One-way latency in µs: perftest's t_typical (its median) and wimm's median; "
          "both halve the round trip. Both stamp iterations with the TSC (wimm converts "
          "by the loop's clock_gettime time; guest clocksource: "
          f"{args.clocksource}). The guest is slow and noisy: compare only within this run.\n")
    lat_rows = []
    for size in (8, 1200):
        for op in STRATEGIES:
            lat_rows.append((size, op, num(wimm("pingpong", op, size, "median_us")),
                             num(wimm("pingpong", op, size, "avg_us")),
                             num(wimm("pingpong", op, size, "p99_us"))))
    print(table(("bytes", "wimm strategy", "median µs", "avg µs", "p99 µs"), lat_rows,
                "rlrrr"))
    print()
    ref_rows = []
    for size in (8, 1200):
        for tool in ("ib_send_lat", "ib_write_lat"):
            ref_rows.append((size, tool, num(ref(tool, size, "typical_us")),
                             num(ref(tool, size, "avg_us"))))
    print(table(("bytes", "perftest", "t_typical µs", "t_avg µs"), ref_rows, "rlrr"))
    print()

    goals = []
    for size in (8, 1200):
        for op, tool in (("write_imm", "ib_send_lat"), ("write_poll", "ib_write_lat")):
            w, r = wimm("pingpong", op, size, "median_us"), ref(tool, size, "typical_us")
            met = "n/a" if w is None or r is None else ("yes" if w / r <= 1.10 else "no")
            goals.append((f"{op} vs {tool}, {size} B (median / t_typical)", num(w), num(r),
                          ratio(w, r), "≤ 1.10x", met))
    rates = (("write_imm", "ib_write_bw", "≥ 0.90x"), ("write_poll", "ib_write_bw", "(context)"),
             ("write_imm", "ib_send_bw", "(context)"))
    for op, tool, goal in rates:
        w, r = wimm("rate", op, 64, "msg_rate"), ref(tool, 64, "mpps")
        w = w / 1e6 if w is not None else None
        met = "" if goal.startswith("(") else (
            "n/a" if w is None or r is None else ("yes" if w / r >= 0.9 else "no"))
        goals.append((f"rate {op} vs {tool}, 64 B (Mmsg/s)", num(w, 4), num(r, 4), ratio(w, r),
                      goal, met))
    print(table(("comparison", "wimm", "perftest", "ratio", "goal", "met"), goals,
                "lrrrll"))
    print("\nib_write_bw needs no work from the receiver's CPU; a write_imm stream does (each "
          "doorbell is a completion the receiver polls and a receive it re-posts), so "
          "write_poll vs ib_write_bw and write_imm vs ib_send_bw are shown for context.")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("which", choices=("ofi", "softroce"))
    parser.add_argument("results")
    parser.add_argument("--libfabric", default="")
    parser.add_argument("--load", default="")
    parser.add_argument("--repeats", type=int, default=0)
    parser.add_argument("--iters", type=int, default=0)
    parser.add_argument("--rate-iters", type=int, default=0)
    parser.add_argument("--clocksource", default="unknown")
    args = parser.parse_args()
    if args.which == "ofi":
        ofi_report(args)
    else:
        softroce_report(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
