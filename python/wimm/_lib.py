"""ctypes declarations of libwimm (include/wimm.h) and how the library is found.

Lookup order: the WIMM_LIBRARY environment variable (a path), the build tree
this package sits in (``<repo>/build/libwimm.so``), the library directory that
``make install`` recorded in ``_install.py``, then the dynamic loader's own
search (``libwimm.so.0``).

Every function is loaded from a ``ctypes.CDLL``, which releases the GIL for
the duration of each call: a thread blocked in ``wimm_wait`` or
``wimm_accept`` does not stop the other Python threads.
"""

import ctypes
import ctypes.util
import os
import platform
from ctypes import (
    POINTER,
    Structure,
    c_char_p,
    c_int,
    c_size_t,
    c_uint,
    c_uint8,
    c_uint32,
    c_uint64,
    c_void_p,
)

IMM_MAX_FIELDS = 8  # WIMM_IMM_MAX_FIELDS


class CtxAttr(Structure):
    _fields_ = [
        ("cq_budget", c_uint32),
        ("spin_us", c_uint32),
        ("flags", c_uint),
        ("post_wait_ms", c_uint32),
        ("liveness_ms", c_uint32),
        ("log", c_void_p),  # wimm_log_fn; not offered from Python
        ("log_arg", c_void_p),
    ]


class FabricLimits(Structure):
    _fields_ = [
        ("max_msg", c_size_t),
        ("inject_size", c_size_t),
        ("imm_bytes", c_uint32),
        ("max_depth", c_uint32),
        ("private_max", c_uint32),
        ("atomic_bytes", c_uint32),
    ]


class ConnAttr(Structure):
    _fields_ = [
        ("window", c_void_p),
        ("window_off", c_size_t),
        ("window_len", c_size_t),
        ("rx_depth", c_uint32),
        ("recv_size", c_uint32),
        ("sq_depth", c_uint32),
        ("user", c_void_p),
        ("counter", c_void_p),
        ("private_data", c_void_p),
        ("private_len", c_uint32),
    ]


class ConnInfo(Structure):
    _fields_ = [
        ("peer_window_len", c_size_t),
        ("peer_window_access", c_uint),
        ("peer_rx_depth", c_uint32),
        ("peer_recv_size", c_uint32),
        ("credits", c_uint32),
        ("connected", c_int),
        ("establishing", c_int),
    ]


class Event(Structure):
    _fields_ = [
        ("type", c_int),
        ("conn", c_void_p),
        ("listener", c_void_p),
        ("user", c_void_p),
        ("imm", c_uint32),
        ("len", c_uint32),
        ("data", c_void_p),
        ("op", c_int),
        ("op_seq", c_uint64),
        ("status", c_int),
        ("prov_err", c_int),
        ("counter", c_void_p),
    ]


class ImmField(Structure):
    _fields_ = [("name", c_char_p), ("bits", c_uint)]


class ImmLayout(Structure):
    _fields_ = [
        ("nfields", c_uint),
        ("field", ImmField * IMM_MAX_FIELDS),
        ("shift", c_uint8 * IMM_MAX_FIELDS),
        ("mask", c_uint32 * IMM_MAX_FIELDS),
    ]


P = c_void_p
# name: (restype, argtypes)
_SIGNATURES = {
    "wimm_err_name": (c_char_p, [c_int]),
    "wimm_strerror": (c_char_p, [c_int]),
    "wimm_ctx_open": (c_int, [c_char_p, POINTER(CtxAttr), POINTER(P)]),
    "wimm_ctx_close": (c_int, [POINTER(P)]),
    "wimm_ctx_fabric": (c_char_p, [P]),
    "wimm_ctx_limits": (c_int, [P, POINTER(FabricLimits)]),
    "wimm_provider_error": (c_int, [P, POINTER(c_char_p)]),
    "wimm_mr_reg": (c_int, [P, P, c_size_t, c_uint, POINTER(P)]),
    "wimm_mr_alloc": (c_int, [P, c_size_t, c_uint, POINTER(P)]),
    "wimm_mr_dereg": (c_int, [POINTER(P)]),
    "wimm_mr_addr": (P, [P]),
    "wimm_listen": (c_int, [P, c_char_p, POINTER(ConnAttr), POINTER(P)]),
    "wimm_listener_delete": (c_int, [POINTER(P)]),
    "wimm_listener_port": (c_int, [P]),
    "wimm_listener_fd": (c_int, [P]),
    "wimm_accept": (c_int, [P, c_int, POINTER(P)]),
    "wimm_connect": (c_int, [P, c_char_p, POINTER(ConnAttr), c_int, POINTER(P)]),
    "wimm_conn_delete": (c_int, [POINTER(P)]),
    "wimm_conn_info": (c_int, [P, POINTER(ConnInfo)]),
    "wimm_write_imm": (c_int, [P, P, c_size_t, c_size_t, c_size_t, c_uint32, c_uint]),
    "wimm_write": (c_int, [P, P, c_size_t, c_size_t, c_size_t, c_uint]),
    "wimm_send_imm": (c_int, [P, P, c_size_t, c_size_t, c_uint32, c_uint]),
    "wimm_read": (c_int, [P, P, c_size_t, c_size_t, c_size_t, c_uint]),
    "wimm_fetch_add": (c_int, [P, P, c_size_t, c_size_t, c_uint64, c_uint]),
    "wimm_cmp_swap": (c_int, [P, P, c_size_t, c_size_t, c_uint64, c_uint64, c_uint]),
    "wimm_prep_new": (c_int, [P, c_int, P, c_size_t, c_size_t, c_size_t, POINTER(P)]),
    "wimm_prep_post": (c_int, [P, c_uint32, c_uint]),
    "wimm_prep_delete": (c_int, [POINTER(P)]),
    "wimm_poll": (c_int, [P, POINTER(Event), c_int]),
    "wimm_wait": (c_int, [P, POINTER(Event), c_int, c_int, c_int]),
    "wimm_progress": (c_int, [P]),
    "wimm_ctx_fd": (c_int, [P, POINTER(c_int)]),
    "wimm_ctx_arm": (c_int, [P]),
    "wimm_imm_layout_init": (c_int, [POINTER(ImmLayout), POINTER(ImmField), c_uint]),
    "wimm_imm_pack": (c_int, [POINTER(ImmLayout), POINTER(c_uint32), POINTER(c_uint32)]),
    "wimm_imm_unpack": (c_int, [POINTER(ImmLayout), c_uint32, POINTER(c_uint32)]),
}


def _candidates():
    env = os.environ.get("WIMM_LIBRARY")
    if env:
        # An explicit choice is final: a wrong path is an error, not a
        # reason to load some other copy.
        yield env, True
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for build in ("build", "build-asan"):
        path = os.path.join(here, "..", "..", build, "libwimm.so")
        if os.path.exists(path):
            yield os.path.normpath(path), False
    try:
        from . import _install  # written by `make install`

        yield os.path.join(_install.LIBDIR, "libwimm.so.0"), False
    except ImportError:
        pass
    yield "libwimm.so.0", False
    found = ctypes.util.find_library("wimm")
    if found:
        yield found, False


# The hot calls without argtypes: ctypes then passes Python ints as C int,
# which costs a third of the declared conversion (about 0.6 against 1.8 us
# for wimm_write_imm's seven arguments on a loaded host). It is exact for a
# non-negative value that int32 holds: the x86-64 and AArch64 conventions (as
# libffi implements them) extend an int argument to the full register, so a
# size_t parameter sees the same value, and a uint32_t parameter reads the low
# 32 bits (callers pass imm >= 2^31 as its negative two's complement). A wider
# int would be truncated without a word, so callers check and take the
# declared function for those. Elsewhere: declared only.
_FAST = ("wimm_write_imm", "wimm_write", "wimm_send_imm", "wimm_read", "wimm_prep_post",
         "wimm_poll")


def _fast_functions(path):
    if platform.machine() not in ("x86_64", "AMD64", "aarch64", "arm64"):
        return None
    raw = ctypes.CDLL(path)  # a second handle: its function objects are its own
    fast = {}
    for name in _FAST:
        fn = getattr(raw, name)
        fn.restype = c_int
        fast[name] = fn
    return fast


def load():
    """Load libwimm and declare its functions; raises OSError saying what was tried."""
    tried = []
    for path, final in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path}: {e}")
            if final:
                break
            continue
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        lib.path = path
        lib.fast = _fast_functions(path)
        return lib
    raise OSError(
        "cannot load libwimm (" + "; ".join(tried) + "). Build it (make build), install it "
        "(make install), or set WIMM_LIBRARY to the path of libwimm.so"
    )


lib = load()
