"""The parameter server of libwimm_ps (include/wimm/ps.h), from Python.

A server holds float32 parameters cut into shards; workers push a gradient
per shard with one write-with-imm and pull the new parameters, which the
server writes into their windows::

    from wimm import ps
    server = ps.Server("ofi:tcp", "0.0.0.0:7490", shards=4, shard_size=4096,
                       workers=2, update="sgd", learning_rate=0.1)
    server.start()                           # its loop in a thread of its own

    # in each worker process:
    w = ps.Worker("ofi:tcp", ["host:7490"], rank=0)
    w.grads[:] = gradient_of(w.params)       # numpy views, nfloats each
    w.step(timeout=10)                       # push every shard, pull

libwimm_ps is looked up next to libwimm (the build tree's
src/services/ps/, or the installed library directory), or at the path in
WIMM_PS_LIBRARY. Failures raise wimm.Error.
"""

import ctypes
import os
import threading
from ctypes import (
    POINTER,
    Structure,
    c_char_p,
    c_float,
    c_int,
    c_int64,
    c_size_t,
    c_uint,
    c_uint32,
    c_uint64,
    c_void_p,
)

import numpy as np

from . import Error
from ._lib import lib as _wimm

MAX_WORKERS = 256
MAX_SHARDS = 1024
MAX_SHARD_SIZE = 4 << 20
DEFAULT_PORT = 7490

MODES = {"sync": 0, "async": 1}
UPDATES = {"sum": 0, "average": 1, "sgd": 2}


class _ServerAttr(Structure):
    _fields_ = [
        ("fabric", c_char_p),
        ("addr", c_char_p),
        ("shards", c_uint32),
        ("first_shard", c_uint32),
        ("shard_size", c_uint32),
        ("workers", c_uint32),
        ("backups", c_uint32),
        ("mode", c_int),
        ("staleness", c_uint32),
        ("update", c_int),
        ("learning_rate", c_float),
        ("initial", POINTER(c_float)),
        ("stall_ms", c_uint32),
        ("liveness_ms", c_uint32),
        ("on_apply", c_void_p),  # not offered from Python
        ("apply_arg", c_void_p),
        ("log", c_void_p),
        ("log_arg", c_void_p),
    ]


_STAT_FIELDS = (
    "shards first_shard shard_size workers backups mode update staleness workers_live "
    "iteration_min iteration_max pushes applied stale duplicates bad_shard bad_worker "
    "bad_length future params_sent workers_lost refused stalls stalled_shard "
    "stalled_iteration stalled_ms"
).split()


class _Stats(Structure):
    _fields_ = [(n, c_uint64) for n in _STAT_FIELDS] + [("waiting", c_uint64 * (MAX_WORKERS // 64))]


class _WorkerAttr(Structure):
    _fields_ = [
        ("fabric", c_char_p),
        ("servers", POINTER(c_char_p)),
        ("nservers", c_uint32),
        ("rank", c_uint32),
        ("timeout_ms", c_int),
        ("liveness_ms", c_uint32),
        ("log", c_void_p),
        ("log_arg", c_void_p),
        ("flags", c_uint),
    ]


class _WorkerInfo(Structure):
    _fields_ = [
        ("shards", c_uint32),
        ("shard_size", c_uint32),
        ("nfloats", c_size_t),
        ("workers", c_uint32),
        ("backups", c_uint32),
        ("mode", c_int),
        ("params", POINTER(c_float)),
        ("grads", POINTER(c_float)),
    ]


class _WorkerStats(Structure):
    _fields_ = [
        ("pushes", c_uint64),
        ("pulls", c_uint64),
        ("params_in", c_uint64),
        ("stall_reports", c_uint64),
        ("waiting_for", c_int64),
        ("server_lost", c_int64),
    ]


P = c_void_p
_SIGNATURES = {
    "wimm_ps_server_new": (c_int, [POINTER(_ServerAttr), POINTER(P)]),
    "wimm_ps_server_delete": (c_int, [POINTER(P)]),
    "wimm_ps_server_port": (c_int, [P]),
    "wimm_ps_server_run": (c_int, [P, c_int]),
    "wimm_ps_server_stats": (c_int, [P, POINTER(_Stats)]),
    "wimm_ps_stat": (c_int, [c_char_p, c_char_p, c_int, POINTER(_Stats)]),
    "wimm_ps_worker_new": (c_int, [POINTER(_WorkerAttr), POINTER(P)]),
    "wimm_ps_worker_delete": (c_int, [POINTER(P)]),
    "wimm_ps_worker_info": (c_int, [P, POINTER(_WorkerInfo)]),
    "wimm_ps_worker_push": (c_int, [P, c_uint32]),
    "wimm_ps_worker_pull": (c_int, [P, c_int]),
    "wimm_ps_worker_step": (c_int, [P, c_int]),
    "wimm_ps_worker_iteration": (c_int, [P, c_uint32, POINTER(c_uint64)]),
    "wimm_ps_worker_stats": (c_int, [P, POINTER(_WorkerStats)]),
}


def _candidates():
    env = os.environ.get("WIMM_PS_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(_wimm.path)
    yield os.path.join(here, "src", "services", "ps", "libwimm_ps.so")
    yield os.path.join(here, "libwimm_ps.so.0")
    yield "libwimm_ps.so.0"


def _load():
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path}: {e}")
            continue
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        return lib
    raise OSError("cannot load libwimm_ps (" + "; ".join(tried) + "); set WIMM_PS_LIBRARY")


_ps = _load()


def _check(rc, what):
    if rc < 0:
        raise Error(rc, what)
    return rc


def _ms(timeout):
    """Seconds (float) or None (forever) -> milliseconds (-1 forever)."""
    if timeout is None:
        return -1
    if timeout < 0:
        raise ValueError(f"timeout must be >= 0 seconds or None, not {timeout!r}")
    return min(int(timeout * 1000), 2**31 - 1)


def _stats_dict(st):
    d = {n: getattr(st, n) for n in _STAT_FIELDS}
    d["mode"] = {v: k for k, v in MODES.items()}.get(d["mode"], d["mode"])
    d["update"] = {v: k for k, v in UPDATES.items()}.get(d["update"], d["update"])
    d["waiting"] = [w for w in range(MAX_WORKERS) if st.waiting[w // 64] >> (w % 64) & 1]
    return d


def stat(fabric, addr, timeout=10.0):
    """The statistics of the server at addr ("host:port"), as a dict."""
    st = _Stats()
    _check(_ps.wimm_ps_stat(fabric.encode(), addr.encode(), _ms(timeout), ctypes.byref(st)),
           f"statistics of {addr}")
    return _stats_dict(st)


class Server:
    """A parameter server in this process (wimm_ps_server_new(3)).

    mode "sync" (iterations of `workers` - `backups` pushes) or "async"
    (every push applied, `staleness` > 0 bounds how old it may be); update
    "sum", "average" or "sgd" (with learning_rate); initial: None (zeros) or
    shards * shard_size / 4 floats.
    """

    def __init__(self, fabric, addr="0.0.0.0:0", *, shards, shard_size, workers, backups=0,
                 first_shard=0, mode="sync", staleness=0, update="sum", learning_rate=0.1,
                 initial=None, stall_ms=0, liveness_ms=0):
        if mode not in MODES or update not in UPDATES:
            raise ValueError(f"mode is one of {list(MODES)}, update one of {list(UPDATES)}")
        self._initial = None
        attr = _ServerAttr(fabric=fabric.encode(), addr=addr.encode(), shards=shards,
                           first_shard=first_shard, shard_size=shard_size, workers=workers,
                           backups=backups, mode=MODES[mode], staleness=staleness,
                           update=UPDATES[update], learning_rate=learning_rate,
                           stall_ms=stall_ms, liveness_ms=liveness_ms)
        if initial is not None:
            self._initial = np.ascontiguousarray(initial, dtype=np.float32)
            if self._initial.size * 4 != shards * shard_size:
                raise ValueError(f"initial has {self._initial.size} floats, the shards hold "
                                 f"{shards * shard_size // 4}")
            attr.initial = self._initial.ctypes.data_as(POINTER(c_float))
        self._h = P()
        _check(_ps.wimm_ps_server_new(ctypes.byref(attr), ctypes.byref(self._h)),
               f"parameter server on {addr} ({fabric})")
        self.port = _ps.wimm_ps_server_port(self._h)
        self._thread = None
        self._stop = threading.Event()
        self._failure = None

    def run(self, timeout=0.1):
        """One turn of the loop; the number of updates it applied."""
        return _check(_ps.wimm_ps_server_run(self._h, _ms(timeout)), "server loop")

    def stats(self):
        """The statistics (only while no loop thread runs: the server is single-threaded)."""
        if self._thread:
            raise RuntimeError("the loop runs in its thread: use wimm.ps.stat(fabric, addr)")
        st = _Stats()
        _check(_ps.wimm_ps_server_stats(self._h, ctypes.byref(st)), "server statistics")
        return _stats_dict(st)

    def _loop(self):
        try:
            while not self._stop.is_set():
                self.run(0.05)
        except Error as e:
            self._failure = e

    def start(self):
        """Run the loop in a thread of its own until stop()."""
        self._thread = threading.Thread(target=self._loop, name="wimm-ps-server", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        """Stop the loop thread; raises what ended it, if anything did."""
        if self._thread:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if self._failure:
            raise self._failure

    def close(self):
        if self._h:
            try:
                self.stop()
            finally:
                _ps.wimm_ps_server_delete(ctypes.byref(self._h))
                self._h = P()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Worker:
    """A worker of one or more servers (wimm_ps_worker_new(3)).

    .params   the parameters the servers last wrote (numpy float32, read-only view)
    .grads    where to put the gradients before push()/step() (numpy float32 view)
    .shards, .shard_size, .workers, .backups, .mode   the model's geometry
    """

    def __init__(self, fabric, servers, rank, *, timeout=10.0, liveness_ms=0):
        if isinstance(servers, str):
            servers = [servers]
        enc = [s.encode() for s in servers]
        self._servers = (c_char_p * len(enc))(*enc)
        attr = _WorkerAttr(fabric=fabric.encode(), servers=self._servers, nservers=len(enc),
                           rank=rank, timeout_ms=_ms(timeout), liveness_ms=liveness_ms)
        self._h = P()
        _check(_ps.wimm_ps_worker_new(ctypes.byref(attr), ctypes.byref(self._h)),
               f"worker {rank} of {', '.join(servers)}")
        info = _WorkerInfo()
        _ps.wimm_ps_worker_info(self._h, ctypes.byref(info))
        self.rank = rank
        self.shards = info.shards
        self.shard_size = info.shard_size
        self.nfloats = info.nfloats
        self.workers = info.workers
        self.backups = info.backups
        self.mode = {v: k for k, v in MODES.items()}[info.mode]
        params = np.ctypeslib.as_array(info.params, shape=(info.nfloats,))
        params.flags.writeable = False
        self.params = params
        self.grads = np.ctypeslib.as_array(info.grads, shape=(info.nfloats,))

    def _live(self):
        if not self._h:
            raise ValueError("the worker is closed")
        return self._h

    def push(self, shard):
        _check(_ps.wimm_ps_worker_push(self._live(), shard), f"push shard {shard}")

    def pull(self, timeout=None):
        _check(_ps.wimm_ps_worker_pull(self._live(), _ms(timeout)), "pull")

    def step(self, timeout=None):
        """Push every shard, then pull."""
        _check(_ps.wimm_ps_worker_step(self._live(), _ms(timeout)), "step")

    def iteration(self, shard=0):
        """The iteration the next push of shard is for, counted from the server's start."""
        v = c_uint64()
        _check(_ps.wimm_ps_worker_iteration(self._live(), shard, ctypes.byref(v)), "iteration")
        return v.value

    def stats(self):
        st = _WorkerStats()
        _check(_ps.wimm_ps_worker_stats(self._live(), ctypes.byref(st)), "worker statistics")
        return {n: getattr(st, n) for n, _ in _WorkerStats._fields_}

    def close(self):
        if self._h:
            # The views point into memory the worker frees.
            self.params = self.grads = None
            _ps.wimm_ps_worker_delete(ctypes.byref(self._h))
            self._h = P()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
