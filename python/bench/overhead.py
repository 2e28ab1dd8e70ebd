#!/usr/bin/env python3
"""What the Python package adds per write_imm and per event, against the C CLI.

    python3 python/bench/overhead.py [--fabric ofi:shm] [--rounds 5] [--iters 20000]
                                     [--cli build/tools/wimm] [--json]

Each round runs, interleaved so drift and other load hit both alike:

  C pingpong   wimm pingpong --self -f FABRIC -n ITERS --json   (median one-way, µs)
  Py pingpong  the same exchange in Python: 8-byte write_imm, the peer polls its event
               and answers with one; two processes, both spinning (median one-way, µs)
  C rate       wimm rate --self -f FABRIC -n 10*ITERS --json     (µs per message)
  Py rate      the same stream in Python: write_imm of 8 bytes, the receiver counts
               the events; the sender polls only when out of credit (µs per message)

and, in one process, micro costs: a write_imm through Conn.write_imm against the bare
ctypes call of wimm_write_imm and against the floor of any ctypes call with those
arguments (a NULL connection, refused at once); and the cost per event of
Context.poll() (building the Event tuples) against the bare ctypes wimm_poll on the
same batches. "Python adds" per write_imm is wrapper - bare + floor (the C work is
bare - floor), per event Context.poll - bare wimm_poll.

The one-way latency of pingpong is one write_imm plus one event on the critical path, so
Py - C there is the Python cost of one write_imm and one event; the rate difference is the
cost per message of the slower side. Medians over the rounds are reported; every round's
figures are printed too. Both ends of every run are spinning contexts (WIMM_CTX_POLLING),
as the CLI's are with --wait spin.
"""

import argparse
import ctypes
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import wimm  # noqa: E402
from wimm import _lib  # noqa: E402

HOST = "127.0.0.1"
SIZE = 8


def pair(fabric, rx_depth=64):
    """A listening server context and a connected client context, in this process
    (the accept runs in a thread: ctypes releases the GIL while it waits)."""
    import threading

    sctx = wimm.Context(fabric, polling=True)
    cctx = wimm.Context(fabric, polling=True)
    swin = sctx.register(bytearray(4096), wimm.REMOTE_WRITE)
    cwin = cctx.register(bytearray(4096), wimm.REMOTE_WRITE)
    listener = sctx.listen(f"{HOST}:0", window=swin, rx_depth=rx_depth)
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("c", listener.accept(timeout=10)))
    t.start()
    client = cctx.connect(f"{HOST}:{listener.port}", window=cwin, rx_depth=rx_depth)
    t.join()
    return sctx, cctx, got["c"], client


# ------------------------------------------------------------------ pingpong


def _pingpong_server(fabric, port_q, iters):
    ctx = wimm.Context(fabric, polling=True)
    win = ctx.register(bytearray(4096), wimm.REMOTE_WRITE)
    src = ctx.register(bytearray(4096))
    listener = ctx.listen(f"{HOST}:0", window=win, rx_depth=64)
    port_q.put(listener.port)
    conn = listener.accept(timeout=30)
    listener.close()
    poll = ctx.poll
    EV = wimm.EV_WRITE_IMM
    for i in range(iters):
        while True:
            evs = poll(16)
            if evs and evs[0].type == EV:
                break
        conn.write_imm(src, 0, 0, SIZE, i)
    # Wait for the client's goodbye doorbell before closing.
    while not any(e.type in (wimm.EV_WRITE_IMM, wimm.EV_DISCONNECT) for e in poll(16)):
        pass
    ctx.close()


def py_pingpong(fabric, iters, warmup):
    total = iters + warmup
    q = mp.Queue()
    server = mp.Process(target=_pingpong_server, args=(fabric, q, total))
    server.start()
    port = q.get(timeout=30)
    ctx = wimm.Context(fabric, polling=True)
    win = ctx.register(bytearray(4096), wimm.REMOTE_WRITE)
    src = ctx.register(bytearray(4096))
    conn = ctx.connect(f"{HOST}:{port}", window=win, rx_depth=64, timeout=30)
    poll = ctx.poll
    EV = wimm.EV_WRITE_IMM
    now = time.perf_counter_ns
    rtt = []
    for i in range(total):
        t0 = now()
        conn.write_imm(src, 0, 0, SIZE, i)
        while True:
            evs = poll(16)
            if evs and evs[0].type == EV:
                break
        if i >= warmup:
            rtt.append(now() - t0)
    conn.write_imm(None, 0, 0, 0, 0xFFFFFFFF)
    for _ in range(1000):
        poll(16)
    server.join(30)
    ctx.close()
    return statistics.median(rtt) / 2 / 1000  # one-way µs


# ---------------------------------------------------------------------- rate


def _rate_server(fabric, port_q, count):
    ctx = wimm.Context(fabric, polling=True)
    win = ctx.register(bytearray(4096), wimm.REMOTE_WRITE)
    listener = ctx.listen(f"{HOST}:0", window=win, rx_depth=64)
    port_q.put(listener.port)
    conn = listener.accept(timeout=30)
    listener.close()
    seen = 0
    poll = ctx.poll
    while seen < count:
        for e in poll(64):
            if e.type == wimm.EV_WRITE_IMM:
                seen += 1
    conn.write_imm(None, 0, 0, 0, 1)  # the final acknowledgement
    while not any(e.type == wimm.EV_DISCONNECT for e in poll(16)):
        pass
    ctx.close()


def py_rate(fabric, count, warmup):
    q = mp.Queue()
    server = mp.Process(target=_rate_server, args=(fabric, q, count + warmup))
    server.start()
    port = q.get(timeout=30)
    ctx = wimm.Context(fabric, polling=True)
    src = ctx.register(bytearray(4096))
    conn = ctx.connect(f"{HOST}:{port}", rx_depth=64, timeout=30)
    poll = ctx.poll
    write_imm = conn.write_imm
    AGAIN = wimm.E_AGAIN
    start = None
    for i in range(count + warmup):
        if i == warmup:
            start = time.perf_counter_ns()
        while True:
            try:
                write_imm(src, 0, 0, SIZE, i)
                break
            except wimm.Error as e:
                if e.code != AGAIN:
                    raise
                poll(64)
    while not any(e.type == wimm.EV_WRITE_IMM for e in poll(64)):
        pass
    elapsed = time.perf_counter_ns() - start
    ctx.close()
    server.join(30)
    return elapsed / count / 1000  # µs per message


# ------------------------------------------------------------------------ C


def c_run(cli, mode, fabric, iters):
    out = subprocess.run([cli, mode, "--self", "-f", fabric, "-n", str(iters), "-s", str(SIZE),
                          "--json"], check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    if mode == "pingpong":
        return r["median_us"]
    return 1e6 / r["msg_rate"]


# --------------------------------------------------------------------- micro


def micro(fabric, n=20000):
    """Per-call costs inside one process: the wrapper against the bare ctypes call."""
    sctx, cctx, server, client = pair(fabric, rx_depth=64)
    src = cctx.register(bytearray(64))
    lib = _lib.lib
    # The calls Conn.write_imm and Context.poll make (see wimm/_lib.py _FAST).
    write_imm = lib.fast["wimm_write_imm"] if lib.fast else lib.wimm_write_imm
    poll = lib.fast["wimm_poll"] if lib.fast else lib.wimm_poll
    now = time.perf_counter_ns
    batch = 16  # within the 64 credits while the last batch's slots come back
    res = {"wrapper_write_imm_us": [], "ctypes_write_imm_us": [], "ctypes_call_floor_us": [],
           "poll_per_event_us": [], "ctypes_poll_per_event_us": []}
    events = (_lib.Event * 64)()
    for _ in range(n // batch):
        # batch doorbells through the wrapper, then drained by Context.poll()
        t0 = now()
        for i in range(batch):
            client.write_imm(src, 0, 0, 0, i)
        res["wrapper_write_imm_us"].append((now() - t0) / batch / 1000)
        got, t_poll = 0, 0
        while got < batch:
            t0 = now()
            evs = sctx.poll(64)
            t1 = now()
            if evs:
                got += len(evs)
                t_poll += t1 - t0
            cctx.poll(64)
        res["poll_per_event_us"].append(t_poll / batch / 1000)
        # the same through the bare ctypes functions
        t0 = now()
        for i in range(batch):
            write_imm(client._h, None, 0, 0, 0, i, 0)
        res["ctypes_write_imm_us"].append((now() - t0) / batch / 1000)
        # the floor of a ctypes call with these arguments: the library
        # refuses a NULL connection at once
        t0 = now()
        for i in range(batch):
            write_imm(None, None, 0, 0, 0, i, 0)
        res["ctypes_call_floor_us"].append((now() - t0) / batch / 1000)
        got, t_poll = 0, 0
        while got < batch:
            t0 = now()
            k = poll(sctx._h, events, 64)
            t1 = now()
            if k > 0:
                got += k
                t_poll += t1 - t0
            cctx.poll(64)
        res["ctypes_poll_per_event_us"].append(t_poll / batch / 1000)
    cctx.close()
    sctx.close()
    return {k: statistics.median(v) for k, v in res.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--fabric", default="ofi:shm")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--cli", default=os.path.join(HERE, "..", "..", "build", "tools", "wimm"))
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    a = ap.parse_args()
    if not os.access(a.cli, os.X_OK):
        sys.exit(f"overhead.py: no CLI at {a.cli}: build it (make build) or pass --cli")
    mp.set_start_method("fork")
    rounds = []
    for r in range(a.rounds):
        row = {
            "c_pingpong_us": c_run(a.cli, "pingpong", a.fabric, a.iters),
            "py_pingpong_us": py_pingpong(a.fabric, a.iters, a.iters // 10),
            "c_rate_us_per_msg": c_run(a.cli, "rate", a.fabric, 10 * a.iters),
            "py_rate_us_per_msg": py_rate(a.fabric, 10 * a.iters, a.iters),
        }
        row.update(micro(a.fabric))
        rounds.append(row)
        if not a.json:
            print(f"round {r + 1}: " + "  ".join(f"{k} {v:.3f}" for k, v in row.items()),
                  flush=True)
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    med["pingpong_overhead_us"] = med["py_pingpong_us"] - med["c_pingpong_us"]
    med["rate_overhead_us"] = med["py_rate_us_per_msg"] - med["c_rate_us_per_msg"]
    # What Python adds to one write_imm: the ctypes call itself (its floor)
    # plus the wrapper around it; to one event: Context.poll over the bare
    # wimm_poll on the same batches.
    med["write_imm_added_us"] = (med["wrapper_write_imm_us"] - med["ctypes_write_imm_us"] +
                                 med["ctypes_call_floor_us"])
    med["event_added_us"] = med["poll_per_event_us"] - med["ctypes_poll_per_event_us"]
    if a.json:
        print(json.dumps({"fabric": a.fabric, "rounds": rounds, "median": med}))
        return
    print(f"\nmedians of {a.rounds} rounds on {a.fabric} ({SIZE}-byte write_imm):")
    print(f"  one-way latency   C {med['c_pingpong_us']:.2f} µs   Python "
          f"{med['py_pingpong_us']:.2f} µs   Python adds {med['pingpong_overhead_us']:.2f} µs"
          " (one write_imm + one event)")
    print(f"  per message       C {med['c_rate_us_per_msg']:.3f} µs   Python "
          f"{med['py_rate_us_per_msg']:.3f} µs   Python adds {med['rate_overhead_us']:.3f} µs")
    print(f"  write_imm call    Conn.write_imm {med['wrapper_write_imm_us']:.3f} µs   bare ctypes "
          f"{med['ctypes_write_imm_us']:.3f} µs   ctypes floor {med['ctypes_call_floor_us']:.3f} µs"
          f"   Python adds {med['write_imm_added_us']:.3f} µs")
    print(f"  per event         Context.poll {med['poll_per_event_us']:.3f} µs   bare ctypes "
          f"wimm_poll {med['ctypes_poll_per_event_us']:.3f} µs   Python adds "
          f"{med['event_added_us']:.3f} µs")


if __name__ == "__main__":
    main()
