#!/usr/bin/env python3
"""How a parameter server's workers should get new parameters: measured.

Two ways for a worker to learn "shard s is at a new version" and hold its
bytes, each timed as a round from "the server has the new version" to "the
server hears the worker has it" (a 0-byte doorbell back, the same on both):

  write_imm  the server writes the shard into the worker's window with one
             write-with-imm; the worker takes the doorbell (libwimm_ps's way)
  read       the server bumps a version word in its own memory; the worker
             RDMA-reads the version until it changes, reads the shard, reads
             the version again (a torn copy shows as a changed version)

Server and worker are threads with a context each (the GIL is released in
every wimm call). Rounds of the two alternate (interleaved); every round is
kept; the table shows the median and the 10th/90th percentile of each.

    ps_pull.py [-f FABRIC] [--sizes 65536,1048576,4194304] [--rounds 200]
"""

import argparse
import os
import statistics
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import wimm  # noqa: E402

VERSION = 8  # the version word's bytes, in front of the shard


def events(ctx, want, what):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for ev in ctx.wait(timeout=0.01):
            if ev.type == want:
                return ev
            if ev.type in (wimm.EV_DISCONNECT, wimm.EV_ERROR):
                raise SystemExit(f"{what}: {ev}")
    raise SystemExit(f"{what}: nothing in 10 s")


def measure(fabric, size, rounds):
    sctx, wctx = wimm.Context(fabric), wimm.Context(fabric)
    shard = bytearray(VERSION + size)  # the server's: version word + shard
    window = bytearray(VERSION + size)  # the worker's window / read target
    smr = sctx.register(shard, wimm.REMOTE_READ | wimm.LOCAL)
    wmr = wctx.register(window, wimm.REMOTE_WRITE)
    listener = sctx.listen("127.0.0.1:0", window=smr, rx_depth=16)
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("c", listener.accept(timeout=10)))
    t.start()
    wconn = wctx.connect(f"127.0.0.1:{listener.port}", window=wmr, rx_depth=16, timeout=10)
    t.join()
    sconn = got["c"]
    times = {"write_imm": [], "read": []}
    version = [0]

    def worker(kind, n):
        for _ in range(n):
            if kind == "write_imm":
                events(wctx, wimm.EV_WRITE_IMM, "worker: parameters")
            else:
                seen = struct.unpack_from("<Q", window)[0]
                while True:
                    wconn.read(wmr, 0, 0, VERSION)
                    events(wctx, wimm.EV_SEND_DONE, "worker: version")
                    v = struct.unpack_from("<Q", window)[0]
                    if v != seen:
                        break
                wconn.read(wmr, 0, 0, VERSION + size)
                events(wctx, wimm.EV_SEND_DONE, "worker: shard")
                wconn.read(wmr, 0, 0, VERSION)
                events(wctx, wimm.EV_SEND_DONE, "worker: version again")
            wconn.write_imm(None, 0, 0, 0, 1, wimm.F_WAIT)

    for r in range(rounds):
        for kind in ("write_imm", "read"):
            w = threading.Thread(target=worker, args=(kind, 1))
            w.start()
            t0 = time.perf_counter()
            version[0] += 1
            struct.pack_into("<Q", shard, 0, version[0])
            if kind == "write_imm":
                sconn.write_imm(smr, 0, 0, VERSION + size, version[0] & 0xffff, wimm.F_WAIT)
            events(sctx, wimm.EV_WRITE_IMM, "server: the worker's doorbell")
            times[kind].append(time.perf_counter() - t0)
            w.join()
    wconn.close()
    sconn.close()
    listener.close()
    smr.close()
    wmr.close()
    sctx.close()
    wctx.close()
    return times


def pct(xs, p):
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * len(s)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-f", "--fabric", default="ofi:tcp")
    ap.add_argument("--sizes", default="65536,1048576,4194304")
    ap.add_argument("--rounds", type=int, default=200)
    a = ap.parse_args()
    print(f"{a.fabric}: per round, from the new version to the worker's doorbell back "
          f"({a.rounds} interleaved rounds each; median [p10, p90] in us)")
    print(f"{'shard bytes':>12} {'write_imm':>26} {'read (version, shard, version)':>32}")
    for size in (int(s) for s in a.sizes.split(",")):
        t = measure(a.fabric, size, a.rounds)
        cells = []
        for kind in ("write_imm", "read"):
            us = [x * 1e6 for x in t[kind]]
            cells.append(f"{statistics.median(us):9.0f} [{pct(us, 0.1):6.0f}, {pct(us, 0.9):6.0f}]")
        print(f"{size:>12} {cells[0]:>26} {cells[1]:>32}")


if __name__ == "__main__":
    main()
