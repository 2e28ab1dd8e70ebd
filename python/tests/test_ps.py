"""wimm.ps: the parameter server's bindings, and a real training job through it.

The training (python/examples/ps_train.py) runs the server and the workers as
processes of their own: logistic regression on scikit-learn's digits must
reach the single process's test accuracy within ps_train.TOLERANCE, and with
one backup configured and a worker SIGKILLed half-way the others finish.
"""

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import wimm
from wimm import ps

from conftest import timeout

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")
sys.path.insert(0, EXAMPLES)
import ps_train  # noqa: E402


def test_sums_and_stats(fabric, host):
    """Two workers (threads, a context each) push known values: every pull is
    their exact sum, and the server's statistics say so."""
    with ps.Server(fabric, f"{host}:0", shards=3, shard_size=4096, workers=2) as s:
        s.start()
        addr = f"{host}:{s.port}"
        errors = []

        def work(rank):
            try:
                with ps.Worker(fabric, [addr], rank, timeout=timeout(10)) as w:
                    assert (w.shards, w.nfloats, w.workers) == (3, 3 * 1024, 2)
                    for step in range(20):
                        it = w.iteration(0)
                        w.grads[:] = np.arange(w.nfloats, dtype=np.float32) * (rank + 1) + it
                        w.step(timeout=timeout(10))
                        want = np.arange(w.nfloats, dtype=np.float32) * 3 + 2 * it
                        assert np.array_equal(w.params, want), f"step {step}"
                        assert w.iteration(0) == it + 1
            except Exception as e:  # reported by the main thread
                errors.append(e)

        threads = [threading.Thread(target=work, args=(r,)) for r in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        st = ps.stat(fabric, addr)
        assert (st["applied"], st["pushes"], st["stale"]) == (60, 120, 0)
        assert st["mode"] == "sync" and st["update"] == "sum"


def test_errors(fabric, host):
    with pytest.raises(ValueError):
        ps.Server(fabric, f"{host}:0", shards=1, shard_size=4096, workers=1, update="adam")
    with pytest.raises(wimm.Error) as e:
        ps.Server(fabric, f"{host}:0", shards=1, shard_size=4097, workers=1)
    assert e.value.name == "WIMM_E_INVAL"
    with ps.Server(fabric, f"{host}:0", shards=1, shard_size=4096, workers=2) as s:
        s.start()
        with pytest.raises(wimm.Error) as e:
            ps.Worker(fabric, [f"{host}:{s.port}"], 5, timeout=timeout(10))
        assert e.value.name == "WIMM_E_RANGE"


def train(fabric, host, *args):
    out = subprocess.run([sys.executable, os.path.join(EXAMPLES, "ps_train.py"), "run", "-f",
                          fabric, "--host", host, "--timeout", str(timeout(30)), *args],
                         capture_output=True, text=True, timeout=timeout(240))
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_training_matches_one_process(fabric, host):
    r = train(fabric, host, "--workers", "3", "--steps", "150")
    assert len(r["workers"]) == 3 and r["stale"] == 0
    for w in r["workers"]:
        assert w["iteration"] >= 150
        assert abs(w["accuracy"] - r["single"]) <= ps_train.TOLERANCE, r
    assert r["single"] > 0.85


def test_training_survives_a_killed_worker_with_a_backup(fabric, host):
    r = train(fabric, host, "--workers", "3", "--steps", "150", "--kill-one")
    assert len(r["workers"]) == 2 and not r["failed"], r
    for w in r["workers"]:
        assert w["iteration"] >= 150 and w["accuracy"] > 0.8, r
