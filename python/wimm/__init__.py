"""wimm: data + doorbell messaging over RDMA Write-with-Immediate, from Python.

A thin layer over libwimm (ctypes, no compiled extension)::

    import wimm
    with wimm.Context("ofi:tcp") as ctx:
        buf = bytearray(1 << 20)
        window = ctx.register(buf, wimm.REMOTE_WRITE)      # zero copies
        listener = ctx.listen("0.0.0.0:7471", window=window, rx_depth=64)
        conn = listener.accept()
        for ev in ctx.wait():
            if ev.type == wimm.EV_WRITE_IMM:
                print(ev.imm, bytes(buf[:ev.len]))

Every failing call raises wimm.Error, whose .name is the WIMM_E_* name.
See python/README.md for a tutorial and wimm(7) for the contract.
"""

import asyncio
import collections
import ctypes
import enum
import struct

from ._lib import lib
from . import _lib

__all__ = [
    "Error",
    "Context",
    "Region",
    "Listener",
    "Conn",
    "Prep",
    "Event",
    "EventType",
    "Op",
    "WaitMode",
    "ImmLayout",
    "Limits",
    "ConnInfo",
    "library_path",
]

__version__ = "0.1.0"

library_path = lib.path

# ------------------------------------------------------------------ constants

LOCAL = 0
REMOTE_WRITE = 1 << 0
REMOTE_READ = 1 << 1
REMOTE_ATOMIC = 1 << 2

F_SIGNAL = 1 << 0
F_WAIT = 1 << 1

CTX_POLLING = 1 << 0


class EventType(enum.IntEnum):
    WRITE_IMM = 1
    SEND_IMM = 2
    SEND_DONE = 3
    DISCONNECT = 4
    ERROR = 5
    CONNECT = 6
    ESTABLISHED = 7
    COUNT = 8


class Op(enum.IntEnum):
    WRITE_IMM = 1
    WRITE = 2
    SEND_IMM = 3
    READ = 4
    FETCH_ADD = 5
    CMP_SWAP = 6


class WaitMode(enum.IntEnum):
    SPIN = 0
    BLOCK = 1
    ADAPTIVE = 2


_EVENT_TYPES = {int(t): t for t in EventType}
_OPS = {int(o): o for o in Op}
_SEND_IMM = int(EventType.SEND_IMM)

EV_WRITE_IMM = EventType.WRITE_IMM
EV_SEND_IMM = EventType.SEND_IMM
EV_SEND_DONE = EventType.SEND_DONE
EV_DISCONNECT = EventType.DISCONNECT
EV_ERROR = EventType.ERROR
EV_CONNECT = EventType.CONNECT
EV_ESTABLISHED = EventType.ESTABLISHED
EV_COUNT = EventType.COUNT

# ---------------------------------------------------------------------- errors


def _error_codes():
    """WIMM_E_* names by code, read from the library (the header's table)."""
    codes = {}
    code = -1
    while True:
        name = lib.wimm_err_name(code).decode()
        if name == "WIMM_E_UNKNOWN":
            return codes
        codes[code] = name
        code -= 1


ERROR_NAMES = _error_codes()
# wimm.E_AGAIN == -3, ...: compare Error.code against these.
for _code, _name in ERROR_NAMES.items():
    globals()[_name[len("WIMM_") :]] = _code
del _code, _name


class Error(Exception):
    """A libwimm call failed.

    .code            the negative WIMM_E_* value
    .name            its name, e.g. "WIMM_E_AGAIN"
    .provider_error  the provider's own code (errno, fi_errno, ibv_wc_status), 0 if none
    .provider_text   the provider's text for it, "" if none
    """

    def __init__(self, code, what="", provider_error=0, provider_text=""):
        self.code = code
        self.name = lib.wimm_err_name(code).decode()
        self.what = what
        self.provider_error = provider_error
        self.provider_text = provider_text
        msg = f"{self.name}: {lib.wimm_strerror(code).decode()}"
        if what:
            msg = f"{what}: {msg}"
        if provider_error or provider_text:
            msg += f" (provider: {provider_text} [{provider_error}])"
        super().__init__(msg)


def _raise(code, ctx_handle, what):
    text = ctypes.c_char_p()
    prov = lib.wimm_provider_error(ctx_handle, ctypes.byref(text))
    raise Error(code, what, prov, (text.value or b"").decode(errors="replace"))


def _timeout_ms(timeout):
    """Seconds (float) or None (forever) -> the C API's milliseconds (-1 forever)."""
    if timeout is None:
        return -1
    if timeout < 0:
        raise ValueError(f"timeout must be >= 0 seconds or None, not {timeout!r}")
    return min(int(timeout * 1000), 2**31 - 1)


def _u32(name, value):
    if not 0 <= value <= 0xFFFFFFFF:
        raise ValueError(f"{name} must be in 0..2**32-1, not {value!r}")
    return value


def _u64(name, value):
    if not 0 <= value <= 0xFFFFFFFFFFFFFFFF:
        raise ValueError(f"{name} must be in 0..2**64-1, not {value!r}")
    return value


# ---------------------------------------------------------------------- values

Limits = collections.namedtuple("Limits", "max_msg inject_size imm_bytes max_depth")
ConnInfo = collections.namedtuple(
    "ConnInfo",
    "peer_window_len peer_window_access peer_rx_depth peer_recv_size credits connected",
)


_EventBase = collections.namedtuple(
    "Event", "type conn listener imm len data op op_seq status prov_err")


class Event(_EventBase):
    """One event from Context.poll / wait / next_events (a named tuple).

    type      EventType
    conn      the Conn (None for CONNECT)
    listener  the Listener (CONNECT only)
    imm, len  the doorbell (host order) and the byte count
    data      SEND_IMM: the received bytes (a copy, bytes); else None
    op        Op of a SEND_DONE / ERROR; op_seq its number on the connection
    status    0 or a WIMM_E_* code; status_name its name; prov_err the provider's code
    """

    __slots__ = ()

    @property
    def status_name(self):
        return lib.wimm_err_name(self.status).decode() if self.status else "WIMM_OK"

    def __repr__(self):
        parts = [f"{self.type.name}"]
        if self.type in (EventType.WRITE_IMM, EventType.SEND_IMM):
            parts.append(f"imm={self.imm:#x} len={self.len}")
        if self.type in (EventType.SEND_DONE, EventType.ERROR):
            parts.append(f"op={getattr(self.op, 'name', self.op)} op_seq={self.op_seq}")
        if self.status:
            parts.append(f"status={self.status_name} prov_err={self.prov_err}")
        return f"<wimm.Event {' '.join(parts)}>"


# struct wimm_event as the C compiler lays it out, read in one pass: much
# cheaper than a ctypes field access per member.
_EVENT_STRUCT = struct.Struct("@iPPPIIPiQiiP")
assert _EVENT_STRUCT.size == ctypes.sizeof(_lib.Event), "struct wimm_event layout changed"
_new_tuple = tuple.__new__


# ------------------------------------------------------------------ the objects

# (fast, declared) function pairs of the hot path; see _lib._FAST.
def _hot(name):
    declared = getattr(lib, name)
    return (lib.fast[name] if lib.fast else declared), declared


_WRITE_IMM = _hot("wimm_write_imm")
_WRITE = _hot("wimm_write")
_SEND_IMM_FN = _hot("wimm_send_imm")
_READ = _hot("wimm_read")
_PREP_POST = _hot("wimm_prep_post")
_POLL = _hot("wimm_poll")[0]
_BATCH = 64  # events per poll: the size of a context's event array


class _Scoped:
    """with obj: ... closes obj at the end."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Context(_Scoped):
    """A fabric context: Context("ofi:tcp"), Context("verbs:rxe0"), Context("auto").

    Keyword arguments are struct wimm_ctx_attr's: cq_budget, spin_us,
    post_wait_ms, and polling=True for WIMM_CTX_POLLING. A context and its
    objects belong to one thread at a time. Closing it (or leaving the with
    block) closes its prepared operations, connections, listeners and regions
    first.
    """

    EVENT_BATCH = _BATCH

    def __init__(self, uri="auto", *, cq_budget=0, spin_us=0, post_wait_ms=0, polling=False,
                 flags=0):
        attr = _lib.CtxAttr(cq_budget, spin_us, flags | (CTX_POLLING if polling else 0),
                            post_wait_ms)
        h = ctypes.c_void_p()
        rc = lib.wimm_ctx_open(uri.encode(), ctypes.byref(attr), ctypes.byref(h))
        if rc < 0:
            _raise(rc, None, f"open fabric {uri!r}")
        self._h = h
        self.uri = uri
        self._conns = {}  # handle value -> Conn (events name them by pointer)
        self._listeners = {}
        self._regions = []
        self._preps = {}  # handle value -> Prep (the C context counts them)
        self._events = (_lib.Event * self.EVENT_BATCH)()
        self._events_raw = memoryview(
            (ctypes.c_char * ctypes.sizeof(self._events)).from_buffer(self._events))

    # -- life cycle
    def close(self):
        if self._h is None:
            return
        for p in list(self._preps.values()):
            p.close()  # they hold their source regions
        for c in list(self._conns.values()):
            c.close()
        for listener in list(self._listeners.values()):
            listener.close()
        for r in list(self._regions):
            r.deregister()
        rc = lib.wimm_ctx_close(ctypes.byref(self._h))
        if rc < 0:
            _raise(rc, self._h, "close the context")
        self._h = None

    def __del__(self):
        if getattr(self, "_h", None) is not None:
            try:
                self.close()
            except Error:
                pass

    def _handle(self):
        if self._h is None:
            raise ValueError("the context is closed")
        return self._h

    # -- properties
    @property
    def fabric(self):
        """The URI the context resolved to ("ofi:tcp" for "auto")."""
        return lib.wimm_ctx_fabric(self._handle()).decode()

    @property
    def limits(self):
        out = _lib.FabricLimits()
        rc = lib.wimm_ctx_limits(self._handle(), ctypes.byref(out))
        if rc < 0:
            _raise(rc, self._h, "limits")
        return Limits(out.max_msg, out.inject_size, out.imm_bytes, out.max_depth)

    def fileno(self):
        """The context's fd (wimm_ctx_fd): readable when events may be there."""
        fd = ctypes.c_int()
        rc = lib.wimm_ctx_fd(self._handle(), ctypes.byref(fd))
        if rc < 0:
            _raise(rc, self._h, "context fd")
        return fd.value

    fd = property(fileno)

    # -- regions and connections
    def register(self, buffer, access=LOCAL):
        """Register a writable, contiguous buffer-protocol object in place (no copy).

        bytearray, memoryview, mmap.mmap, array.array, numpy arrays (a torch
        CPU tensor through .numpy()). The Region keeps the buffer alive and
        exported (a bytearray cannot be resized, an mmap not closed) until
        deregistered.
        """
        return Region(self, buffer, access)

    def allocate(self, length, access=LOCAL):
        """Memory wimm allocates and registers (wimm_mr_alloc): zeroed, page-aligned
        shared memory, freed on deregister. On the ipc fabric a window in it is mapped
        into a writer of the same user, whose writes are then plain stores. .buffer is
        a memoryview of it (valid until deregistered)."""
        return Region(self, None, access, allocate=length)

    def listen(self, addr, *, window=None, window_off=0, window_len=0, rx_depth=0, recv_size=0,
               sq_depth=0):
        """Listen on "host:port" (port 0: a free one, see .port); the attributes apply to
        every accepted connection."""
        attr = _conn_attr(self, window, window_off, window_len, rx_depth, recv_size, sq_depth)
        h = ctypes.c_void_p()
        rc = lib.wimm_listen(self._handle(), addr.encode(), ctypes.byref(attr), ctypes.byref(h))
        if rc < 0:
            _raise(rc, self._h, f"listen on {addr}")
        return Listener(self, h, window)

    def connect(self, addr, *, timeout=None, window=None, window_off=0, window_len=0, rx_depth=0,
                recv_size=0, sq_depth=0):
        """Connect to "host:port" (timeout in seconds; None: the library's 10 s)."""
        attr = _conn_attr(self, window, window_off, window_len, rx_depth, recv_size, sq_depth)
        h = ctypes.c_void_p()
        rc = lib.wimm_connect(self._handle(), addr.encode(), ctypes.byref(attr),
                              _timeout_ms(timeout), ctypes.byref(h))
        if rc < 0:
            _raise(rc, self._h, f"connect to {addr}")
        return Conn(self, h, window)

    # -- events
    def _convert(self, n):
        conns = self._conns
        listeners = self._listeners
        types = _EVENT_TYPES
        ops = _OPS
        string_at = ctypes.string_at
        # SEND_IMM bytes live in a receive slot until the next poll: copy them now.
        return [
            _new_tuple(Event, (types[t], conns.get(c), listeners.get(li), imm, ln,
                               string_at(d, ln) if t == _SEND_IMM else None, ops.get(op, op),
                               seq, st, pe))
            for t, c, li, _user, imm, ln, d, op, seq, st, pe, _counter in _EVENT_STRUCT.iter_unpack(
                self._events_raw[: n * _EVENT_STRUCT.size])
        ]

    def poll(self, max_events=EVENT_BATCH):
        """Events available now (possibly []); drives progress and returns credits."""
        n = _POLL(self._h, self._events, max_events if max_events < _BATCH else _BATCH)
        if n < 0:
            self._handle()
            _raise(n, self._h, "poll")
        return self._convert(n) if n else []

    def wait(self, max_events=EVENT_BATCH, mode=WaitMode.ADAPTIVE, timeout=None):
        """Wait (seconds; None forever) for at least one event; [] on timeout.

        The GIL is released while the library waits."""
        n = lib.wimm_wait(self._handle(), self._events, min(max_events, self.EVENT_BATCH),
                          int(mode), _timeout_ms(timeout))
        if n < 0:
            _raise(n, self._h, "wait")
        return self._convert(n) if n else []

    def progress(self):
        """Drive the fabric without taking events (write_poll receivers)."""
        rc = lib.wimm_progress(self._handle())
        if rc < 0:
            _raise(rc, self._h, "progress")

    def arm(self):
        """wimm_ctx_arm: True when armed (safe to sleep on the fd), False when events are
        already pending (poll first)."""
        rc = lib.wimm_ctx_arm(self._handle())
        if rc == E_AGAIN:
            return False
        if rc < 0:
            _raise(rc, self._h, "arm")
        return True

    async def next_events(self, max_events=EVENT_BATCH):
        """Await the next batch of events (asyncio), sleeping on the context's fd.

        The arm rule of the C API: poll; if nothing, arm; only when arm says
        armed, wait for the fd; then poll again."""
        loop = asyncio.get_running_loop()
        fd = self.fileno()
        while True:
            events = self.poll(max_events)
            if events:
                return events
            if not self.arm():
                continue  # events arrived between the poll and the arm
            ready = loop.create_future()
            loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
            try:
                await ready
            finally:
                loop.remove_reader(fd)

    async def events(self):
        """Async iterator over events: ``async for ev in ctx.events(): ...``."""
        while True:
            for ev in await self.next_events():
                yield ev


def _conn_attr(ctx, window, window_off, window_len, rx_depth, recv_size, sq_depth):
    if window is not None:
        if not isinstance(window, Region):
            raise TypeError("window must be a Region from ctx.register(), not "
                            f"{type(window).__name__}")
        if window.ctx is not ctx:
            raise ValueError("the window belongs to another context")
        window = window._handle()
    for name, v in (("window_off", window_off), ("window_len", window_len)):
        if v < 0:
            raise ValueError(f"{name} must be >= 0, not {v}")
    return _lib.ConnAttr(window, window_off, window_len, _u32("rx_depth", rx_depth),
                         _u32("recv_size", recv_size), _u32("sq_depth", sq_depth), None)


def _check_access(access):
    if access & ~(REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC):
        raise ValueError(f"access must combine LOCAL, REMOTE_WRITE, REMOTE_READ, "
                         f"REMOTE_ATOMIC, not {access!r}")


class Region(_Scoped):
    """A registered memory region over a Python buffer (Context.register).

    .buffer is a byte-wise memoryview of the registered memory; .obj the
    object registered. Deregister with .deregister() (or let the context
    close it)."""

    def __init__(self, ctx, obj, access, allocate=None):
        if allocate is not None:
            self._init_allocated(ctx, allocate, access)
            return
        mv = memoryview(obj)
        if mv.readonly:
            mv.release()
            raise TypeError(f"cannot register a read-only buffer ({type(obj).__name__}); "
                            "use a bytearray, mmap, or a writable numpy array")
        if not mv.c_contiguous:
            mv.release()
            raise ValueError("cannot register a non-contiguous buffer: copy it into a "
                             "contiguous one first (numpy.ascontiguousarray)")
        try:
            _check_access(access)
        except ValueError:
            mv.release()
            raise
        flat = mv.cast("B") if mv.ndim != 1 or mv.format != "B" else mv
        # An export of the buffer: it pins the memory (no resize, no close)
        # and keeps obj alive as long as this region holds it.
        self._cbuf = (ctypes.c_char * flat.nbytes).from_buffer(flat)
        self.obj = obj
        self.buffer = flat
        self._mv = mv
        self.ctx = ctx
        self.access = access
        self.addr = ctypes.addressof(self._cbuf)
        self.len = flat.nbytes
        h = ctypes.c_void_p()
        rc = lib.wimm_mr_reg(ctx._handle(), self.addr, self.len, access, ctypes.byref(h))
        if rc < 0:
            self._release()
            _raise(rc, ctx._h, f"register {self.len} bytes")
        self._h = h
        ctx._regions.append(self)

    def _init_allocated(self, ctx, length, access):
        if not isinstance(length, int) or length <= 0:
            raise ValueError(f"allocate needs a positive length, not {length!r}")
        _check_access(access)
        h = ctypes.c_void_p()
        rc = lib.wimm_mr_alloc(ctx._handle(), length, access, ctypes.byref(h))
        if rc < 0:
            _raise(rc, ctx._h, f"allocate {length} bytes")
        self._h = h
        self.ctx = ctx
        self.access = access
        self.addr = lib.wimm_mr_addr(h)
        self.len = length
        self._cbuf = (ctypes.c_char * length).from_address(self.addr)
        self.obj = None
        self._mv = memoryview(self._cbuf).cast("B")
        self.buffer = self._mv
        ctx._regions.append(self)

    def __len__(self):
        return self.len

    def _handle(self):
        if self._h is None:
            raise ValueError("the region is deregistered")
        return self._h

    def _release(self):
        self._cbuf = None
        if self.buffer is not self._mv:
            self.buffer.release()
        self._mv.release()
        self.buffer = None
        self.obj = None

    def deregister(self):
        """Deregister (WIMM_E_BUSY while a live connection exposes it or a prepared
        operation sends from it) and let go of the buffer."""
        if self._h is None:
            return
        rc = lib.wimm_mr_dereg(ctypes.byref(self._h))
        if rc < 0:
            _raise(rc, self.ctx._h, "deregister")
        self._h = None
        self.ctx._regions.remove(self)
        # Allocated memory is unmapped by now: views made from .buffer must not be
        # used after this (as with any buffer freed under them).
        self._release()

    def close(self):
        self.deregister()


class _Child(_Scoped):
    """A listener or connection: a handle the C library deletes through its address,
    registered with its context by handle value (events name them so)."""

    _what = ""

    def __init__(self, ctx, h, window, registry):
        self.ctx = ctx
        self._h = h
        self._window = window  # the attributes name it: keep it registered
        self._registry = registry
        registry[h.value] = self

    def _handle(self):
        if self._h is None:
            raise ValueError(f"the {self._what} is closed")
        return self._h

    @staticmethod
    def _delete(handle_ref):
        raise NotImplementedError

    def close(self):
        if self._h is None:
            return
        key = self._h.value
        rc = self._delete(ctypes.byref(self._h))
        if rc < 0:
            _raise(rc, self.ctx._h, f"close the {self._what}")
        self._h = None
        self._registry.pop(key, None)


class Listener(_Child):
    """A passive endpoint (Context.listen)."""

    _what = "listener"
    _delete = staticmethod(lib.wimm_listener_delete)

    def __init__(self, ctx, h, window):
        super().__init__(ctx, h, window, ctx._listeners)

    @property
    def port(self):
        return lib.wimm_listener_port(self._handle())

    def fileno(self):
        return lib.wimm_listener_fd(self._handle())

    def accept(self, timeout=None):
        """Accept one connection (seconds; None forever; 0 polls). GIL released while
        waiting. Raises Error TIMEDOUT (AGAIN for 0) when none comes."""
        h = ctypes.c_void_p()
        rc = lib.wimm_accept(self._handle(), _timeout_ms(timeout), ctypes.byref(h))
        if rc < 0:
            _raise(rc, self.ctx._h, "accept")
        return Conn(self.ctx, h, self._window)


class Conn(_Child):
    """A reliable connection to one peer (Context.connect, Listener.accept).

    Offsets and lengths are bytes; src / dst are Regions of the same
    context. Every post raises Error with nothing posted on failure, e.g.
    WIMM_E_AGAIN without credit (pass flags=wimm.F_WAIT to wait instead),
    WIMM_E_BOUNDS outside the peer's window."""

    _what = "connection"
    _delete = staticmethod(lib.wimm_conn_delete)

    def __init__(self, ctx, h, window):
        super().__init__(ctx, h, window, ctx._conns)

    def _check(self, region, *sizes):
        if region.ctx is not self.ctx or region._h is None:
            self._handle()
            raise ValueError("the region is deregistered or belongs to another context")
        for v in sizes:
            if v < 0:
                raise ValueError(f"offsets and lengths must be >= 0, not {v}")

    def write_imm(self, src, src_off, dst_off, length, imm, flags=0):
        """Write src[src_off:src_off+length] to the peer's window at dst_off and ring the
        doorbell imm (one WRITE_IMM event at the peer, after the bytes landed)."""
        if imm >> 31:  # as int32 for the fast call: same low 32 bits
            imm = _u32("imm", imm) - 0x100000000
        self._post(_WRITE_IMM, "write_imm", src, (src_off, dst_off, length, imm, flags),
                   src_off, dst_off, length, flags)

    def write(self, src, src_off, dst_off, length, flags=0):
        """Plain RDMA write: no doorbell, no credit."""
        self._post(_WRITE, "write", src, (src_off, dst_off, length, flags), src_off,
                   dst_off, length, flags)

    def send_imm(self, src, src_off, length, imm, flags=0):
        """Two-sided send into one of the peer's receive buffers, carrying imm."""
        if imm >> 31:
            imm = _u32("imm", imm) - 0x100000000
        self._post(_SEND_IMM_FN, "send_imm", src, (src_off, length, imm, flags), src_off, 0,
                   length, flags)

    def read(self, dst, dst_off, src_off, length, flags=F_SIGNAL):
        """RDMA read of the peer's window at src_off into dst[dst_off:]; completes with a
        SEND_DONE event (op READ)."""
        self._post(_READ, "read", dst, (dst_off, src_off, length, flags), dst_off,
                   src_off, length, flags)

    def fetch_add(self, result, result_off, dst_off, add, flags=F_SIGNAL):
        """Add `add` (modulo 2**64) to the 64-bit word at dst_off of the peer's window
        (8-byte aligned; the window needs REMOTE_ATOMIC); the word's old value lands in
        result[result_off:result_off+8] (native byte order), announced by a SEND_DONE event
        (op FETCH_ADD). Error WIMM_E_NOTSUP where the fabric has no atomics (ofi:tcp)."""
        self._atomic(lib.wimm_fetch_add, "fetch_add", result, result_off, dst_off,
                     (_u64("add", add),), flags)

    def cmp_swap(self, result, result_off, dst_off, compare, swap, flags=F_SIGNAL):
        """Store `swap` into the peer's word at dst_off if it equals `compare`; the old
        value lands in result as for fetch_add (SEND_DONE, op CMP_SWAP)."""
        self._atomic(lib.wimm_cmp_swap, "cmp_swap", result, result_off, dst_off,
                     (_u64("compare", compare), _u64("swap", swap)), flags)

    def prepare(self, op, src, src_off, dst_off, length):
        """A Prep: op (Op.WRITE_IMM, Op.WRITE or Op.SEND_IMM) of src[src_off:src_off+length]
        to the peer's window at dst_off (SEND_IMM: into a receive buffer, dst_off 0),
        checked once here with the operation's own errors, then posted any number of
        times with Prep.post(imm, flags). The bytes are read at each post. src stays
        registered (its deregister raises WIMM_E_BUSY) until the Prep is closed; a
        zero-length WRITE_IMM (a pure doorbell) may pass src=None."""
        if not isinstance(op, int):
            self._handle()
            raise TypeError(f"prepare: op must be a wimm.Op, not {type(op).__name__}")
        if not -(2**31) <= op < 2**31:
            raise ValueError(f"prepare: {op!r} is no wimm.Op")
        if src is not None:
            if not isinstance(src, Region):
                self._handle()
                raise TypeError(f"prepare: expected a Region, not {type(src).__name__}")
            self._check(src, src_off, dst_off, length)
        else:
            for v in (src_off, dst_off, length):
                if v < 0:
                    raise ValueError(f"offsets and lengths must be >= 0, not {v}")
        h = ctypes.c_void_p()
        rc = lib.wimm_prep_new(self._handle(), int(op), None if src is None else src._h,
                               src_off, dst_off, length, ctypes.byref(h))
        if rc < 0:
            _raise(rc, self.ctx._h, f"prepare {getattr(op, 'name', op)}")
        return Prep(self, h, _OPS.get(op, op), src, src_off, dst_off, length)

    def _atomic(self, fn, what, region, result_off, dst_off, operands, flags):
        if not isinstance(region, Region):
            self._handle()
            raise TypeError(f"{what}: expected a Region, not {type(region).__name__}")
        self._check(region, result_off, dst_off)
        rc = fn(self._handle(), region._h, result_off, dst_off, *operands, flags)
        if rc:
            _raise(rc, self.ctx._h, what)

    def _post(self, fns, what, region, args, a, b, length, flags):
        # Python ints go straight to ctypes; only a failure looks closer. A
        # None region is NULL: fine for a zero-length doorbell.
        try:
            h = None if region is None else region._h
        except AttributeError:  # not a Region: raises TypeError
            self._failed(E_INVAL, what, region, a, b, length)
            raise
        # The fast call passes ints as C int, truncating silently: only for
        # values that are non-negative int32 (a negative or a wide one takes
        # the declared call, whose size_t the library then bounds-checks).
        if (a | b | length | flags) >> 31:
            if not 0 <= flags <= 0xFFFFFFFF:
                raise ValueError(f"{what}: flags must be a combination of F_SIGNAL and F_WAIT")
            rc = fns[1](self._h, h, *args)
        else:
            rc = fns[0](self._h, h, *args)
        if rc:
            self._failed(rc, what, region, a, b, length)

    def _failed(self, rc, what, region, a, b, length):
        # Explain what ctypes could not (wrong types, negative numbers that
        # it wrapped around), then the library's own refusal.
        self._handle()
        if region is None and length == 0:
            _raise(rc, self.ctx._h, what)
        if not isinstance(region, Region):
            raise TypeError(f"{what}: expected a Region, not {type(region).__name__}")
        self._check(region, a, b, length)
        _raise(rc, self.ctx._h, what)

    def info(self):
        out = _lib.ConnInfo()
        rc = lib.wimm_conn_info(self._handle(), ctypes.byref(out))
        if rc < 0:
            _raise(rc, self.ctx._h, "connection info")
        return ConnInfo(out.peer_window_len, out.peer_window_access, out.peer_rx_depth,
                        out.peer_recv_size, out.credits, bool(out.connected))

    @property
    def credits(self):
        return self.info().credits

    @property
    def connected(self):
        return self.info().connected


class Prep(_Scoped):
    """A prepared operation (Conn.prepare): checked once, posted many times.

    .conn, .op, .src, .src_off, .dst_off, .length are what it was prepared
    with; it holds .src (and so its buffer) and .conn for as long as it lives.
    Close it with .close() (wimm_prep_delete; again is a no-op), by leaving a
    with block, or let the context close it. It may outlive its connection:
    once the connection is closed (or down), post raises WIMM_E_DISCONNECTED."""

    def __init__(self, conn, h, op, src, src_off, dst_off, length):
        self.conn = conn
        self.ctx = conn.ctx
        self.op = op
        self.src = src  # the C object holds the region: keep it, and its buffer
        self.src_off = src_off
        self.dst_off = dst_off
        self.length = length
        self._h = h
        self.ctx._preps[h.value] = self

    def _handle(self):
        if self._h is None:
            raise ValueError("the prepared operation is closed")
        return self._h

    def post(self, imm=0, flags=0):
        """Post it with doorbell imm (ignored by a plain WRITE) and flags (F_SIGNAL,
        F_WAIT): what the operation's own call does, events and credits included.
        Raises Error with nothing posted, e.g. WIMM_E_AGAIN without credit,
        WIMM_E_DISCONNECTED once the connection is down or closed."""
        if imm >> 31:  # as int32 for the fast call: same low 32 bits
            imm = _u32("imm", imm) - 0x100000000
        if flags >> 31:
            if not 0 <= flags <= 0xFFFFFFFF:
                raise ValueError("post: flags must be a combination of F_SIGNAL and F_WAIT")
            rc = _PREP_POST[1](self._h, imm, flags)
        else:
            rc = _PREP_POST[0](self._h, imm, flags)
        if rc:
            self._handle()  # closed: passed as NULL, refused as INVAL
            _raise(rc, self.ctx._h, f"post the prepared {getattr(self.op, 'name', self.op)}")

    def close(self):
        if self._h is None:
            return
        key = self._h.value
        rc = lib.wimm_prep_delete(ctypes.byref(self._h))
        if rc < 0:
            _raise(rc, self.ctx._h, "close the prepared operation")
        self._h = None
        self.ctx._preps.pop(key, None)


# ---------------------------------------------------------------- imm layouts


class ImmLayout:
    """Named fields of the 32-bit imm, most significant first.

    >>> lay = ImmLayout([("worker", 4), ("shard", 8), ("iter", 20)])
    >>> imm = lay.pack(worker=3, shard=17, iter=5)      # or lay.pack(3, 17, 5)
    >>> lay.unpack(imm)
    Imm(worker=3, shard=17, iter=5)

    Widths 1..32 adding up to at most 32, distinct names (Error
    WIMM_E_RANGE for a width or total out of range, WIMM_E_INVAL for no,
    empty, duplicate or more than 8 fields); a value too wide for its field
    raises Error WIMM_E_RANGE, a negative one ValueError.
    """

    def __init__(self, fields):
        fields = [(str(name), int(bits)) for name, bits in fields]
        if len(fields) > _lib.IMM_MAX_FIELDS:
            raise Error(E_INVAL, f"imm layout: at most {_lib.IMM_MAX_FIELDS} fields, "
                        f"got {len(fields)}")
        self._names = [name.encode() for name, _ in fields]
        cfields = (_lib.ImmField * max(len(fields), 1))()
        for i, (name, bits) in enumerate(fields):
            # 1..32 is the library's check: out of it (negative included) is RANGE.
            cfields[i] = _lib.ImmField(self._names[i], bits if 0 <= bits <= 32 else 33)
        self._c = _lib.ImmLayout()
        rc = lib.wimm_imm_layout_init(ctypes.byref(self._c), cfields, len(fields))
        if rc < 0:
            raise Error(rc, f"imm layout {fields}")
        self.fields = tuple(fields)
        self.names = tuple(name for name, _ in fields)
        self._values = (ctypes.c_uint32 * len(fields))()
        self._imm = ctypes.c_uint32()
        self.Imm = collections.namedtuple("Imm", self.names, rename=True)

    def pack(self, *values, **named):
        """The imm of these field values (positional, or by name: all fields)."""
        if named:
            if values:
                raise TypeError("pack() takes the values by position or by name, not both")
            missing = [n for n in self.names if n not in named]
            extra = [n for n in named if n not in self.names]
            if missing or extra:
                raise TypeError(f"pack(): missing fields {missing}, unknown fields {extra}")
            values = [named[n] for n in self.names]
        if len(values) != len(self.names):
            raise TypeError(f"pack() needs {len(self.names)} values ({', '.join(self.names)}),"
                            f" got {len(values)}")
        for i, (name, v) in enumerate(zip(self.names, values)):
            if v < 0:
                raise ValueError(f"imm field {name!r}: {v} is negative")
            if v > 0xFFFFFFFF:
                raise Error(E_RANGE, f"imm field {name!r}: {v} does not fit")
            self._values[i] = v
        rc = lib.wimm_imm_pack(ctypes.byref(self._c), self._values, ctypes.byref(self._imm))
        if rc < 0:
            bad = [f"{n}={v} (max {(1 << b) - 1})" for (n, b), v in zip(self.fields, values)
                   if v >> b]
            raise Error(rc, "imm layout: " + ", ".join(bad))
        return self._imm.value

    def unpack(self, imm):
        """The field values of imm, as a named tuple (bits outside the fields ignored)."""
        _u32("imm", imm)
        rc = lib.wimm_imm_unpack(ctypes.byref(self._c), imm, self._values)
        if rc < 0:
            raise Error(rc, "imm layout: unpack")
        return self.Imm(*self._values)

    def max(self, name):
        """Largest value field `name` holds."""
        for n, bits in self.fields:
            if n == name:
                return (1 << bits) - 1
        raise KeyError(name)

    def __repr__(self):
        return f"ImmLayout({list(self.fields)})"
