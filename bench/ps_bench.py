#!/usr/bin/env python3
"""The parameter server against torch.distributed all-reduce (gloo), one machine.

What one training step's communication costs: N worker processes each hold a
gradient of SIZE bytes (float32) and need the sum of all N.

  wimm ps    `wimm ps serve --update sum` and N workers (wimm.ps): a step pushes
             every shard (one write-with-imm each, 4 MiB shards), the server
             sums, the workers pull the sum (one write-with-imm per shard)
  gloo       N processes, torch.distributed.all_reduce(SUM) over gloo (TCP)
  single     one process adds N arrays of SIZE bytes (the aggregation alone, no
             communication: the floor)

Each run times STEPS steps after 2 untimed ones; its figure is the slowest
rank's mean time per step (the same statistic for wimm ps and gloo). Rounds
interleave the three; every round is kept (in the .jsonl) and the table shows
the median over rounds, with the aggregation throughput N x SIZE / time.
Output in DIR: ps-DATE[-full].jsonl (every run, appended), ps-DATE[-full].md
(the table, with the machine and its load before and after) and
ps-DATE[-full].png (time per step over model size, one line per tool and
worker count; needs matplotlib, Debian python3-matplotlib).

    ps_bench.py [-f FABRIC] [--workers 2,4,8] [--sizes 1M,16M] [--rounds 5]
                [--steps 10] [--timeout S] [--wimm PATH] [--out DIR]
    ps_bench.py --full      workers 2,4,8 x sizes 1M,16M,64M,256M

torch (Debian python3-torch) is needed only here.
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..")
sys.path.insert(0, os.path.join(REPO, "python"))

SHARD_MAX = 4 << 20
WARMUP = 2


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1].upper(), 1)
    return int(s[:-1] if mult > 1 else s) * mult


def human(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


# ------------------------------------------------------------ the workers


def ps_worker(fabric, addr, rank, steps, timeout):
    import numpy as np
    from wimm import ps

    with ps.Worker(fabric, [addr], rank, timeout=timeout) as w:
        w.grads[:] = np.float32(rank + 1)
        for _ in range(WARMUP):
            w.step(timeout=timeout)
        t0 = time.perf_counter()
        for _ in range(steps):
            w.step(timeout=timeout)
        dt = (time.perf_counter() - t0) / steps
        want = np.float32(w.workers * (w.workers + 1) / 2)
        if w.params[0] != want:
            raise SystemExit(f"ps worker {rank}: sum {w.params[0]}, want {want}")
        print(json.dumps({"step_s": dt}), flush=True)


def gloo_worker(rank, world, port, size, steps):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    t = torch.full((size // 4,), float(rank + 1), dtype=torch.float32)
    buf = t.clone()
    for _ in range(WARMUP):
        buf.copy_(t)
        dist.all_reduce(buf)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        buf.copy_(t)  # all_reduce works in place: every step sums fresh inputs
        dist.all_reduce(buf)
    dt = (time.perf_counter() - t0) / steps
    if buf[0].item() != world * (world + 1) / 2:
        raise SystemExit(f"gloo rank {rank}: sum {buf[0].item()}")
    print(json.dumps({"step_s": dt}), flush=True)
    dist.destroy_process_group()


# ------------------------------------------------------------- the runs


def collect(procs, what, args):
    times = []
    for p in procs:
        # Every step may take up to --timeout, and so may the set-up.
        out, _ = p.communicate(timeout=args.timeout * (args.steps + WARMUP + 1))
        if p.returncode != 0:
            raise SystemExit(f"{what}: a worker failed ({p.returncode})")
        times.append(json.loads(out.strip().splitlines()[-1])["step_s"])
    return max(times)


def run_ps(args, n, size):
    shard = min(size, SHARD_MAX)
    shards = -(-size // shard)
    srv = subprocess.Popen([args.wimm, "ps", "serve", "-f", args.fabric, "--port", "0",
                            "--shards", str(shards), "--shard-size", str(shard), "--workers",
                            str(n), "--update", "sum"], stdout=subprocess.PIPE, text=True)
    try:
        line = srv.stdout.readline()
        port = int(line.split(", port ")[1].split(",")[0])
        me = os.path.abspath(__file__)
        procs = [subprocess.Popen([sys.executable, me, "_ps", args.fabric,
                                   f"127.0.0.1:{port}", str(r), str(args.steps), str(args.timeout)],
                                  stdout=subprocess.PIPE, text=True) for r in range(n)]
        return collect(procs, "wimm ps", args)
    finally:
        srv.terminate()
        srv.communicate(timeout=30)


def run_gloo(args, n, size, port):
    me = os.path.abspath(__file__)
    procs = [subprocess.Popen([sys.executable, me, "_gloo", str(r), str(n), str(port), str(size),
                               str(args.steps)], stdout=subprocess.PIPE, text=True)
             for r in range(n)]
    return collect(procs, "gloo", args)


def run_single(args, n, size):
    import numpy as np

    arrays = [np.full(size // 4, r + 1, dtype=np.float32) for r in range(n)]
    out = np.empty_like(arrays[0])
    for _ in range(WARMUP):
        np.add(arrays[0], arrays[1], out=out)
    t0 = time.perf_counter()
    for _ in range(args.steps):
        np.add(arrays[0], arrays[1], out=out)
        for a in arrays[2:]:
            np.add(out, a, out=out)
    return (time.perf_counter() - t0) / args.steps


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "_ps":
        return ps_worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]),
                         float(sys.argv[6]))
    if len(sys.argv) > 1 and sys.argv[1] == "_gloo":
        return gloo_worker(*(int(x) for x in sys.argv[2:7]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-f", "--fabric", default="ofi:tcp")
    ap.add_argument("--workers", default="2,4,8")
    ap.add_argument("--sizes", default="1M,16M")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=600,
                    help="seconds a worker's step may take (a loaded host at 256 MiB needs minutes)")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--wimm", default=os.environ.get("WIMM_CLI",
                                                     os.path.join(REPO, "build", "tools", "wimm")))
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    a = ap.parse_args()
    if a.full:
        a.workers, a.sizes = "2,4,8", "1M,16M,64M,256M"
    configs = [(n, parse_size(s)) for n in map(int, a.workers.split(","))
               for s in a.sizes.split(",")]
    if a.rounds < 1 or a.steps < 1:
        ap.error("--rounds and --steps must be at least 1")
    stamp = datetime.date.today().isoformat() + ("-full" if a.full else "")
    load_before = loadavg()
    started = time.time()
    run_id = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    os.makedirs(a.out, exist_ok=True)
    jsonl = open(os.path.join(a.out, f"ps-{stamp}.jsonl"), "a")
    results = {c: {"wimm ps": [], "gloo": [], "single": []} for c in configs}
    port = 29500 + os.getpid() % 1000
    for rnd in range(a.rounds):
        for n, size in configs:
            for kind in ("wimm ps", "gloo", "single"):
                if kind == "wimm ps":
                    t = run_ps(a, n, size)
                elif kind == "gloo":
                    port += 1
                    t = run_gloo(a, n, size, port)
                else:
                    t = run_single(a, n, size)
                results[(n, size)][kind].append(t)
                rec = {"run": run_id, "round": rnd, "fabric": a.fabric, "workers": n, "bytes": size,
                       "kind": kind, "step_s": t, "steps": a.steps}
                jsonl.write(json.dumps(rec) + "\n")
                jsonl.flush()
                print(f"round {rnd}: {n} workers, {human(size)}, {kind}: {t * 1e3:.2f} ms",
                      file=sys.stderr, flush=True)
    lines = [f"Machine: {machine()}; load average before / after: {load_before} / "
             f"{loadavg()}; {(time.time() - started) / 60:.1f} min.",
             "",
             f"wimm ps ({a.fabric}) against torch.distributed all_reduce (gloo) and one "
             f"process; median over {a.rounds} interleaved rounds of {a.steps} steps, the "
             f"slowest rank's mean ms per step (aggregation GB/s = workers x bytes / time)",
             "",
             "| workers | model | wimm ps ms | gloo ms | wimm ps / gloo | single ms | wimm ps GB/s |"
             " gloo GB/s | single GB/s |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n, size in configs:
        med = {k: statistics.median(v) for k, v in results[(n, size)].items()}
        gbs = {k: n * size / v / 1e9 for k, v in med.items()}
        lines.append(f"| {n} | {human(size)} | {med['wimm ps'] * 1e3:.2f} | "
                     f"{med['gloo'] * 1e3:.2f} | {med['wimm ps'] / med['gloo']:.2f}x | "
                     f"{med['single'] * 1e3:.2f} | "
                     f"{gbs['wimm ps']:.2f} | {gbs['gloo']:.2f} | {gbs['single']:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(a.out, f"ps-{stamp}.md"), "a") as f:
        f.write(text + "\n")
    plot(results, a, os.path.join(a.out, f"ps-{stamp}.png"))


def machine():
    """The harness's description of this machine (bench/harness.py), in one line."""
    sys.path.insert(0, HERE)
    from harness import machine as describe

    m = describe("")
    return f"{m['cpu']}, {m['cores']} cores"


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def plot(results, a, path):
    """Median ms per step over model size: one line per tool and worker count."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib (Debian python3-matplotlib): no plot", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(8, 5))
    styles = {"wimm ps": "-o", "gloo": "--s", "single": ":^"}
    for n in sorted({n for n, _ in results}):
        sizes = sorted(s for m, s in results if m == n)
        for kind, style in styles.items():
            ys = [statistics.median(results[(n, s)][kind]) * 1e3 for s in sizes]
            ax.plot([s >> 20 for s in sizes], ys, style, label=f"{kind}, {n} workers")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("model size (MiB, float32)")
    ax.set_ylabel("ms per step (slowest rank, median of rounds)")
    ax.set_title(f"wimm ps ({a.fabric}) vs gloo all_reduce vs one process, {a.rounds} rounds")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
