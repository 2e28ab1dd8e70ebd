#!/usr/bin/env python3
"""Logistic regression on scikit-learn's digits through wimm's parameter server.

The model: softmax regression, 64 pixels + a bias -> 10 classes (650 float32
weights), trained by full-batch gradient descent. Each worker holds every
world-th training sample; a step pushes its part of the gradient (scaled so
that the server's average of the pushes is the full-batch gradient) and pulls
the new weights, which the server computes (SGD: w -= lr * average).

    ps_train.py serve   [-f FABRIC] [--port P] [--workers N] [--backups B] [--lr X]
    ps_train.py worker  [-f FABRIC] [--rank R] [--world N] [--steps S] SERVER
    ps_train.py single  [--steps S] [--lr X]            the same training, one process
    ps_train.py run     [-f FABRIC] [--workers N] [--steps S] [--kill-one] [--host H]
                        the server and N worker processes, then the comparison
                        (H: the address they reach it at, default 127.0.0.1;
                        on verbs the RDMA device's)

A worker's rank, world size and server also come from the environment a
launcher sets: RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT (torchrun),
OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE (mpirun). Each worker prints one
JSON line: its rank, the steps it took and the test accuracy of the final
weights. `run` compares the workers' accuracy with the single process's
(same data, same steps, same learning rate): they must agree within
TOLERANCE. With --kill-one it configures one backup worker and SIGKILLs
worker 1 half-way; the others must still finish every step. On ofi:shm the
worker kills itself, on SIGUSR1, between two calls into wimm (libfabric 1.17's
shm takes a spinlock in the peer's shared memory inside its calls: a process
killed while it holds one leaves its peers spinning, see the README's known
limits of the providers).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from wimm import ps  # noqa: E402

FEATURES, CLASSES = 65, 10
NPARAMS = FEATURES * CLASSES
SHARD_SIZE = 1024  # bytes: 256 floats, so the model spans 3 shards
SHARDS = -(-NPARAMS * 4 // SHARD_SIZE)
# The accuracy of the distributed run may differ from the single process's
# by float32 summation order only: at most this much.
TOLERANCE = 0.01


def dataset():
    """Digits, scaled to [0, 1] with a bias column, split 80/20 with a fixed seed."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = np.hstack([d.data / 16.0, np.ones((len(d.data), 1))]).astype(np.float32)
    y = d.target
    order = np.random.default_rng(7).permutation(len(x))
    cut = int(0.8 * len(x))
    train, test = order[:cut], order[cut:]
    return x[train], y[train], x[test], y[test]


def gradient(w, x, y):
    """The cross-entropy gradient summed over the samples (not averaged)."""
    z = x @ w.reshape(FEATURES, CLASSES)
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(y)), y] -= 1.0
    return (x.T @ p).astype(np.float32).ravel()


def accuracy(w, x, y):
    return float(np.mean(np.argmax(x @ w.reshape(FEATURES, CLASSES), axis=1) == y))


def single(steps, lr):
    """The same training in one process: full-batch gradient descent."""
    xt, yt, xs, ys = dataset()
    w = np.zeros(NPARAMS, dtype=np.float32)
    for _ in range(steps):
        w -= np.float32(lr) * gradient(w, xt, yt) / np.float32(len(xt))
    return accuracy(w, xs, ys)


def env_int(*names):
    for n in names:
        v = os.environ.get(n)
        if v:
            return int(v)
    return None


def crash_on_usr1():
    """SIGUSR1: SIGKILL this process. Python runs the handler between
    bytecodes, so never inside a call into the library."""
    signal.signal(signal.SIGUSR1, lambda *_: os.kill(os.getpid(), signal.SIGKILL))


def kill_signal(fabric):
    """How `run` kills a worker: SIGKILL, on ofi:shm SIGUSR1 (crash_on_usr1)."""
    return signal.SIGUSR1 if fabric == "ofi:shm" else signal.SIGKILL


def worker(fabric, server, rank, world, steps, timeout):
    if kill_signal(fabric) == signal.SIGUSR1:
        crash_on_usr1()
    xt, yt, xs, ys = dataset()
    mine = slice(rank, None, world)
    x, y = xt[mine], yt[mine]
    # The server averages the pushes: scaled by world / N, that average is
    # the full-batch gradient (sum over all N samples / N).
    scale = np.float32(world / len(xt))
    with ps.Worker(fabric, [server], rank, timeout=timeout) as w:
        if w.workers != world:
            raise SystemExit(f"worker {rank}: the server takes {w.workers} workers, not {world}")
        taken = 0
        # Until every shard is there: with a backup, shards advance one by
        # one (a push may be stale on one shard and counted on another).
        while min(w.iteration(s) for s in range(w.shards)) < steps:
            params = np.array(w.params[:NPARAMS])
            w.grads[:NPARAMS] = gradient(params, x, y) * scale
            # Only the shards short of the last step: a push past it would
            # wait for workers that, seeing every shard there, have stopped
            # (more of them than there are backups).
            for s in range(w.shards):
                if w.iteration(s) < steps:
                    w.push(s)
            w.pull(timeout=timeout)
            taken += 1
        acc = accuracy(np.array(w.params[:NPARAMS]), xs, ys)
        print(json.dumps({"rank": rank, "steps": taken, "iteration": w.iteration(0),
                          "accuracy": acc}), flush=True)


def serve(fabric, port, workers, backups, lr, timeout=30.0):
    # The liveness bound follows the workers' timeout (a slow machine's
    # loops are slow to answer): 3 s for the default 30.
    liveness_ms = int(max(3.0, timeout / 10) * 1000)
    with ps.Server(fabric, f"0.0.0.0:{port}", shards=SHARDS, shard_size=SHARD_SIZE,
                   workers=workers, backups=backups, update="sgd", learning_rate=lr,
                   stall_ms=1000, liveness_ms=liveness_ms) as s:
        print(json.dumps({"port": s.port}), flush=True)
        stop = []
        signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
        while not stop:
            s.run(0.1)
        print(json.dumps({"stats": s.stats()}), flush=True)


def run(fabric, workers, steps, lr, kill_one, timeout, host="127.0.0.1"):
    """The server and the workers as processes of their own."""
    me = os.path.abspath(__file__)
    backups = 1 if kill_one else 0
    srv = subprocess.Popen([sys.executable, me, "serve", "-f", fabric, "--port", "0",
                            "--workers", str(workers), "--backups", str(backups),
                            "--lr", str(lr), "--timeout", str(timeout)],
                           stdout=subprocess.PIPE, text=True)
    try:
        port = json.loads(srv.stdout.readline())["port"]
        procs = []
        for r in range(workers):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(workers),
                       MASTER_ADDR=host, MASTER_PORT=str(port))
            procs.append(subprocess.Popen([sys.executable, me, "worker", "-f", fabric,
                                           "--steps", str(steps), "--timeout", str(timeout)],
                                          env=env, stdout=subprocess.PIPE, text=True))
        if kill_one:
            # Half-way: the server's statistics say where it stands.
            deadline = time.monotonic() + timeout * 4
            while ps.stat(fabric, f"{host}:{port}")["iteration_min"] < steps // 2:
                if time.monotonic() > deadline:
                    raise SystemExit("no progress before the kill")
                time.sleep(0.05)
            procs[1].send_signal(kill_signal(fabric))
        results, failed = [], []
        for r, p in enumerate(procs):
            out, _ = p.communicate(timeout=timeout * 20)
            if kill_one and r == 1:
                # Killed, not finished: it must not have had a say.
                if p.returncode != -signal.SIGKILL:
                    failed.append((r, p.returncode))
                continue
            if p.returncode != 0:
                failed.append((r, p.returncode))
                continue
            results.append(json.loads(out.strip().splitlines()[-1]))
        stats = ps.stat(fabric, f"{host}:{port}")
    finally:
        srv.send_signal(signal.SIGTERM)
        try:
            srv.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            srv.kill()
    return results, failed, stats


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["serve", "worker", "single", "run"])
    ap.add_argument("server", nargs="?", help="worker: HOST:PORT (default MASTER_ADDR:MASTER_PORT)")
    ap.add_argument("-f", "--fabric", default="ofi:tcp")
    ap.add_argument("--port", type=int, default=ps.DEFAULT_PORT)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--backups", type=int, default=0)
    ap.add_argument("--rank", type=int)
    ap.add_argument("--world", type=int)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--kill-one", action="store_true")
    ap.add_argument("--host", default="127.0.0.1", help="run: the server's address")
    a = ap.parse_args()
    if a.command == "serve":
        serve(a.fabric, a.port, a.workers, a.backups, a.lr, a.timeout)
    elif a.command == "worker":
        rank = a.rank if a.rank is not None else env_int("RANK", "OMPI_COMM_WORLD_RANK")
        world = a.world if a.world is not None else env_int("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE")
        server = a.server or "%s:%s" % (os.environ.get("MASTER_ADDR", "127.0.0.1"),
                                        os.environ.get("MASTER_PORT", ps.DEFAULT_PORT))
        if rank is None or world is None:
            raise SystemExit("worker: --rank/--world, or RANK/WORLD_SIZE, or OMPI_COMM_WORLD_*")
        worker(a.fabric, server, rank, world, a.steps, a.timeout)
    elif a.command == "single":
        print(json.dumps({"accuracy": single(a.steps, a.lr)}))
    else:
        results, failed, stats = run(a.fabric, a.workers, a.steps, a.lr, a.kill_one, a.timeout,
                                     a.host)
        base = single(a.steps, a.lr)
        print(json.dumps({"single": base, "workers": results, "failed": failed,
                          "stale": stats["stale"], "workers_lost": stats["workers_lost"]}))
        ok = not failed and len(results) == a.workers - (1 if a.kill_one else 0)
        ok = ok and all(r["iteration"] >= a.steps for r in results)
        if not a.kill_one:
            ok = ok and all(abs(r["accuracy"] - base) <= TOLERANCE for r in results)
        sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
