"""The conformance essentials through the Python package, on one fabric (--fabric)."""

import array
import asyncio
import gc
import mmap
import os
import signal
import subprocess
import sys
import threading
import time
import weakref

import numpy as np
import pytest

import wimm
from conftest import timeout

HERE = os.path.dirname(os.path.abspath(__file__))


def test_imm_round_trip(pair):
    src = pair.cctx.register(bytearray(64))
    imms = [0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0x11223344, 0xDEADBEEF, 0x00FF00FF]
    for imm in imms:
        pair.client.write_imm(src, 0, 0, 0, imm)  # zero length: a pure doorbell
    events = pair.events(len(imms))
    assert [e.imm for e in events] == imms  # host order, in post order
    assert all(e.len == 0 and e.conn is pair.server and e.status == 0 for e in events)


def test_data_integrity(make_pair):
    p = make_pair(window_len=1 << 20, rx_depth=32)
    rng = np.random.default_rng(7)
    src_arr = rng.integers(0, 256, size=1 << 20, dtype=np.uint8)
    src = p.cctx.register(src_arr)
    expected = np.zeros(1 << 20, dtype=np.uint8)
    # Sizes across inline, one packet and many packets; offsets unaligned.
    chunks = [(0, 0, 1), (1, 5, 7), (100, 4093, 4096), (9000, 70001, 65536),
              (200000, 300001, 300000), (0, (1 << 20) - 3, 3)]
    for i, (so, do, n) in enumerate(chunks):
        p.client.write_imm(src, so, do, n, i)
        expected[do:do + n] = src_arr[so:so + n]
    events = p.events(len(chunks))
    assert [(e.imm, e.len) for e in events] == [(i, c[2]) for i, c in enumerate(chunks)]
    got = np.frombuffer(p.window, dtype=np.uint8)
    assert np.array_equal(got, expected)


def test_allocated_window(make_pair, fabric):
    # Memory of Context.allocate as the window (on ipc mapped into the writer).
    p = make_pair(window_len=1 << 20, allocate=True)
    assert len(p.wmr) == 1 << 20 and bytes(p.window[:16]) == bytes(16)
    src_arr = np.arange(1 << 16, dtype=np.uint8)
    src = p.cctx.register(src_arr)
    for i, (do, n) in enumerate([(0, 1), (3, 1200), (4096, 65536), ((1 << 20) - 7, 7)]):
        p.client.write_imm(src, 0, do, n, i)
        (e,) = p.events(1)
        assert (e.imm, e.len) == (i, n)
        assert bytes(p.window[do:do + n]) == src_arr[:n].tobytes()
    with pytest.raises(wimm.Error) as err:
        p.client.write_imm(src, 0, (1 << 20) - 6, 7, 9)
    assert err.value.name == "WIMM_E_BOUNDS"
    with pytest.raises(ValueError):
        p.sctx.allocate(0)
    with pytest.raises(ValueError):
        p.sctx.allocate(8, 1 << 7)
    r = p.cctx.allocate(100)
    r.buffer[99] = 7
    r.deregister()


def test_send_imm_data(make_pair):
    p = make_pair(recv_size=256)
    payload = bytes(range(200))
    buf = bytearray(256)
    buf[:200] = payload
    src = p.cctx.register(buf)
    p.client.send_imm(src, 0, 200, 7)
    p.client.send_imm(src, 10, 0, 8)
    first, second = p.events(2)
    assert (first.type, first.imm, first.len, first.data) == (wimm.EV_SEND_IMM, 7, 200, payload)
    assert (second.imm, second.len, second.data) == (8, 0, b"")
    with pytest.raises(wimm.Error) as e:
        p.client.send_imm(src, 0, 257, 9)  # buffer is 256 bytes: local bounds first
    assert e.value.name == "WIMM_E_LOCAL_BOUNDS"


def test_write_and_read(pair):
    data = bytearray(os.urandom(4096))
    src = pair.cctx.register(data)
    pair.client.write(src, 0, 1000, 4096, wimm.F_SIGNAL)
    done = pair.client_events(1, (wimm.EV_SEND_DONE,))
    assert done[0].op == wimm.Op.WRITE
    back = bytearray(4096)
    dst = pair.cctx.register(back)
    pair.client.read(dst, 0, 1000, 4096)
    done = pair.client_events(1, (wimm.EV_SEND_DONE,))
    assert done[0].op == wimm.Op.READ and done[0].len == 4096
    assert back == data and pair.window[1000:5096] == data


def test_bounds_errors_post_nothing(pair):
    src = pair.cctx.register(bytearray(128))
    wlen = len(pair.window)
    cases = [
        ((src, 0, wlen - 10, 11, 1), "WIMM_E_BOUNDS"),
        ((src, 0, wlen, 1, 1), "WIMM_E_BOUNDS"),
        ((src, 100, 0, 29, 1), "WIMM_E_LOCAL_BOUNDS"),
        ((src, 0, 0, 129, 1), "WIMM_E_LOCAL_BOUNDS"),
        # beyond 32 bits: the declared (converting) call path
        ((src, 0, 1 << 40, 1, 1), "WIMM_E_BOUNDS"),
        ((src, 1 << 33, 0, 1, 1), "WIMM_E_LOCAL_BOUNDS"),
        ((src, 0, 0, (1 << 32) + 1, 1), "WIMM_E_TOOBIG"),
    ]
    for args, name in cases:
        with pytest.raises(wimm.Error) as e:
            pair.client.write_imm(*args)
        assert e.value.name == name, args
        assert e.value.code == getattr(wimm, name[len("WIMM_"):])
    with pytest.raises(ValueError):
        pair.client.write_imm(src, 0, -1, 1, 1)
    with pytest.raises(ValueError):
        pair.client.write_imm(src, 0, 0, 1, 1 << 32)
    with pytest.raises(ValueError):
        pair.client.write_imm(src, 0, 0, 1, -1)
    with pytest.raises(ValueError):
        pair.client.write_imm(src, 0, 0, 1, 1, 1 << 40)  # flags that C would truncate
    with pytest.raises(wimm.Error) as e:
        pair.client.write_imm(src, 0, 0, 1, 1, 1 << 7)  # an unknown flag
    assert e.value.name == "WIMM_E_INVAL"
    with pytest.raises(TypeError):
        pair.client.write_imm(bytearray(8), 0, 0, 1, 1)
    # Nothing was posted: the next doorbell is the first event.
    pair.client.write_imm(src, 0, wlen - 128, 128, 99)
    (ev,) = pair.events(1)
    assert ev.imm == 99 and ev.len == 128
    assert pair.sctx.poll() == []


def test_no_window_and_perm(make_pair):
    p = make_pair(window_len=0)
    src = p.cctx.register(bytearray(16))
    with pytest.raises(wimm.Error) as e:
        p.client.write_imm(src, 0, 0, 1, 1)
    assert e.value.name == "WIMM_E_NOWINDOW"
    p.client.write_imm(src, 0, 0, 0, 5)  # a pure doorbell needs no window
    assert p.events(1)[0].imm == 5
    q = make_pair(window_len=64, access=wimm.REMOTE_WRITE)
    dst = q.cctx.register(bytearray(16))
    with pytest.raises(wimm.Error) as e:
        q.client.read(dst, 0, 0, 16)
    assert e.value.name == "WIMM_E_PERM"


def test_credits_again(make_pair):
    depth = 4
    p = make_pair(rx_depth=depth)
    src = p.cctx.register(bytearray(8))
    assert p.client.info().peer_rx_depth == depth
    for i in range(depth):
        p.client.write_imm(src, 0, 0, 0, i)
    assert p.client.credits == 0
    with pytest.raises(wimm.Error) as e:
        p.client.write_imm(src, 0, 0, 0, 100)
    assert e.value.name == "WIMM_E_AGAIN" and e.value.code == wimm.E_AGAIN
    # The receiver consumes the doorbells; credits flow back and posting works again.
    assert [ev.imm for ev in p.events(depth)] == list(range(depth))
    deadline = time.monotonic() + timeout(10)
    sent = depth
    later = []
    while sent < 2 * depth:
        later += [ev.imm for ev in p.sctx.poll() if ev.type == wimm.EV_WRITE_IMM]
        p.cctx.poll()
        try:
            p.client.write_imm(src, 0, 0, 0, sent)
            sent += 1
        except wimm.Error as err:
            assert err.name == "WIMM_E_AGAIN"
            assert time.monotonic() < deadline, "credits never came back"
    if len(later) < depth:
        later += [ev.imm for ev in p.events(depth - len(later))]
    assert later == list(range(depth, 2 * depth))


def test_disconnect_when_peer_dies(fabric, host):
    with wimm.Context(fabric) as ctx:
        listener = ctx.listen(f"{host}:0", rx_depth=8)
        peer = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "peer.py"), fabric, f"{host}:{listener.port}"],
            stdout=subprocess.PIPE, text=True,
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
        try:
            conn = listener.accept(timeout=timeout(30))
            deadline = time.monotonic() + timeout(30)
            while not any(e.type == wimm.EV_WRITE_IMM and e.imm == 42 for e in ctx.poll()):
                assert time.monotonic() < deadline, "no doorbell from the peer"
            src = ctx.register(bytearray(8))
            conn.write_imm(src, 0, 0, 0, 43)
            # Drive the answer out while the peer reads it.
            ready = []
            reader = threading.Thread(target=lambda: ready.append(peer.stdout.readline()))
            reader.start()
            while reader.is_alive():
                ctx.poll()
                reader.join(0.001)
            assert ready == ["ready\n"]
            peer.send_signal(signal.SIGKILL)
            peer.wait()
            killed = time.monotonic()
            down = []
            while not down:
                down = [e for e in ctx.wait(timeout=0.1) if e.type == wimm.EV_DISCONNECT]
                assert time.monotonic() - killed < timeout(5), "no DISCONNECT after the kill"
            assert down[0].conn is conn
            assert not conn.connected
            with pytest.raises(wimm.Error) as e:
                conn.write_imm(src, 0, 0, 0, 1)
            assert e.value.name == "WIMM_E_DISCONNECTED"
        finally:
            if peer.poll() is None:
                peer.kill()
                peer.wait()


class Buf(bytearray):
    """A bytearray that can be weakly referenced."""


def test_registered_buffer_cannot_be_collected(make_pair):
    p = make_pair(window=Buf(4096))
    alive = weakref.ref(p.window)
    with pytest.raises(BufferError):
        p.window.extend(b"x")  # pinned: its memory cannot move while registered
    p.window = None  # the region (and the connection's window) is all that is left
    gc.collect()
    assert alive() is not None, "the registered buffer was collected"
    # The memory is still the window: the peer's write lands in it.
    src = p.cctx.register(bytearray(b"hello"))
    p.client.write_imm(src, 0, 100, 5, 1)
    p.events(1)
    assert alive()[100:105] == b"hello"
    p.close()  # closes the connection, the listener, then deregisters
    gc.collect()
    assert alive() is None, "a deregistered buffer should be released"


def test_register_buffer_kinds(fabric):
    with wimm.Context(fabric) as ctx:
        m = mmap.mmap(-1, 8192)
        arr = np.zeros((16, 16), dtype=np.float32)
        kinds = [bytearray(10), memoryview(bytearray(33)), m, array.array("d", [0.0] * 9), arr]
        for obj in kinds:
            r = ctx.register(obj, wimm.REMOTE_WRITE)
            assert len(r) == memoryview(obj).nbytes
            r.buffer[0] = 0x5A  # the very memory of obj: no copy
            assert memoryview(obj).cast("B")[0] == 0x5A
            r.deregister()
        r = ctx.register(m)
        with pytest.raises(BufferError):
            m.close()
        r.deregister()
        m.close()
        with pytest.raises(TypeError):
            ctx.register(b"read-only bytes")
        with pytest.raises(ValueError):
            ctx.register(np.zeros((8, 8), dtype=np.uint8)[:, ::2])
        with pytest.raises(ValueError):
            ctx.register(bytearray(8), 1 << 7)


def test_imm_layout():
    lay = wimm.ImmLayout([("worker", 4), ("shard", 8), ("iter", 20)])
    imm = lay.pack(worker=3, shard=17, iter=5)
    assert imm == (3 << 28) | (17 << 20) | 5
    assert lay.pack(3, 17, 5) == imm
    assert lay.unpack(imm) == (3, 17, 5) and lay.unpack(imm).shard == 17
    top = lay.pack(15, 255, (1 << 20) - 1)
    assert top == 0xFFFFFFFF and lay.unpack(top) == (15, 255, (1 << 20) - 1)
    for bad in [(16, 0, 0), (0, 256, 0), (0, 0, 1 << 20), (0, 0, 1 << 40)]:
        with pytest.raises(wimm.Error) as e:
            lay.pack(*bad)
        assert e.value.name == "WIMM_E_RANGE"
    with pytest.raises(ValueError):
        lay.pack(-1, 0, 0)
    with pytest.raises(TypeError):
        lay.pack(1, 2)
    with pytest.raises(TypeError):
        lay.pack(worker=1, shard=2)
    for fields, name in [([("a", 16), ("b", 17)], "WIMM_E_RANGE"), ([("a", 0)], "WIMM_E_RANGE"),
                         ([("a", 33)], "WIMM_E_RANGE"), ([], "WIMM_E_INVAL"),
                         ([("a", 4), ("a", 4)], "WIMM_E_INVAL"),
                         ([(str(i), 1) for i in range(9)], "WIMM_E_INVAL")]:
        with pytest.raises(wimm.Error) as e:
            wimm.ImmLayout(fields)
        assert e.value.name == name, fields


def test_wait_releases_the_gil(fabric):
    with wimm.Context(fabric) as ctx:
        spins = 0
        waiter = threading.Thread(target=ctx.wait, kwargs=dict(mode=wimm.WaitMode.BLOCK,
                                                               timeout=0.5))
        start = time.monotonic()
        waiter.start()
        while waiter.is_alive():
            spins += 1
        elapsed = time.monotonic() - start
        waiter.join()
        assert elapsed >= 0.45
        # With the GIL held by the waiting thread this loop could not run
        # for the half second; free, it runs about a million times.
        assert spins > 10000, f"only {spins} iterations while another thread waited"


def test_asyncio_events(pair):
    src = pair.cctx.register(bytearray(64))

    async def sender():
        for i in range(20):
            pair.client.write_imm(src, 0, 0, 0, i)
            pair.cctx.poll()
            await asyncio.sleep(0.002)
        for _ in range(200):  # keep the sender's side moving (tcp: manual progress)
            pair.cctx.poll()
            await asyncio.sleep(0.001)

    async def receiver():
        got = []
        first = await pair.sctx.next_events()
        got += [e.imm for e in first if e.type == wimm.EV_WRITE_IMM]
        async for ev in pair.sctx.events():
            if ev.type == wimm.EV_WRITE_IMM:
                got.append(ev.imm)
            if len(got) == 20:
                return got

    async def main():
        task = asyncio.create_task(sender())
        got = await asyncio.wait_for(receiver(), timeout(20))
        await task
        return got

    assert asyncio.run(main()) == list(range(20))


def test_errors_carry_names(fabric, host):
    with pytest.raises(wimm.Error) as e:
        wimm.Context("nosuch:fabric")
    assert e.value.name == "WIMM_E_NOFABRIC"
    with wimm.Context(fabric) as ctx:
        with pytest.raises(wimm.Error) as e:
            ctx.connect("not an address", timeout=timeout(5))
        assert e.value.name == "WIMM_E_ADDR"
        listener = ctx.listen(f"{host}:0")
        with pytest.raises(wimm.Error) as e:
            listener.accept(timeout=0)
        assert e.value.name == "WIMM_E_AGAIN"
        assert "WIMM_E_AGAIN" in str(e.value)


def test_close_with_live_objects(pair):
    # Leaving the context closes connections, listeners and regions first.
    pair.cctx.register(bytearray(64))
    pair.cctx.close()
    pair.sctx.close()
    with pytest.raises(ValueError):
        pair.client.write_imm(None, 0, 0, 0, 1)


def test_atomics(make_pair, fabric):
    """fetch_add / cmp_swap on a word of the peer's window; NOTSUP where the fabric has
    no atomics (libfabric tcp's MSG endpoints)."""
    p = make_pair(window_len=64, access=wimm.REMOTE_WRITE | wimm.REMOTE_ATOMIC)
    assert p.client.info().peer_window_access == wimm.REMOTE_WRITE | wimm.REMOTE_ATOMIC
    res = p.cctx.register(bytearray(16))
    word = memoryview(p.window)[8:16].cast("Q")
    word[0] = 41
    if fabric == "ofi:tcp":
        with pytest.raises(wimm.Error) as e:
            p.client.fetch_add(res, 0, 8, 1)
        assert e.value.name == "WIMM_E_NOTSUP" and "FI_ATOMIC" in e.value.provider_text
        assert word[0] == 41
        return
    p.client.fetch_add(res, 0, 8, 1)
    done = p.client_events(1, (wimm.EV_SEND_DONE,))[0]
    assert done.op == wimm.Op.FETCH_ADD and done.len == 8
    old = memoryview(res.buffer)[0:8].cast("Q")
    assert old[0] == 41 and word[0] == 42
    p.client.cmp_swap(res, 8, 8, 42, 2**64 - 1)
    assert p.client_events(1, (wimm.EV_SEND_DONE,))[0].op == wimm.Op.CMP_SWAP
    assert memoryview(res.buffer)[8:16].cast("Q")[0] == 42 and word[0] == 2**64 - 1


def test_atomic_errors(make_pair):
    p = make_pair(window_len=64, access=wimm.REMOTE_WRITE)
    res = p.cctx.register(bytearray(16))
    with pytest.raises(wimm.Error) as e:
        p.client.fetch_add(res, 0, 8, 1)
    assert e.value.name == "WIMM_E_PERM"
    q = make_pair(window_len=64, access=wimm.REMOTE_ATOMIC)
    qres = q.cctx.register(bytearray(16))
    for call, name in ((lambda: q.client.fetch_add(qres, 0, 64, 1), "WIMM_E_BOUNDS"),
                       (lambda: q.client.cmp_swap(qres, 12, 8, 0, 1), "WIMM_E_LOCAL_BOUNDS"),
                       (lambda: q.client.fetch_add(qres, 0, 4, 1), "WIMM_E_INVAL")):
        with pytest.raises(wimm.Error) as e:
            call()
        assert e.value.name == name
    with pytest.raises(ValueError):
        q.client.fetch_add(qres, 0, 8, -1)
    with pytest.raises(TypeError):
        q.client.cmp_swap(bytearray(8), 0, 8, 0, 1)


def post_driving(pair, prep, imm, flags=0):
    """prep.post(imm, flags), polling both sides while there is no credit (one thread
    drives both, so F_WAIT could wait for a receiver that never polls). Returns the
    doorbells the server's polls took meanwhile."""
    deadline = time.monotonic() + timeout(10)
    seen = []
    while True:
        try:
            prep.post(imm, flags)
            return seen
        except wimm.Error as e:
            assert e.name == "WIMM_E_AGAIN" and time.monotonic() < deadline, e
        seen += [e for e in pair.sctx.poll() if e.type in (wimm.EV_WRITE_IMM, wimm.EV_SEND_IMM)]
        pair.cctx.poll()


def test_prepared_write_imm(make_pair):
    # Prepared once, posted with a new imm each time: one event per post, in post
    # order, and the bytes as they are at each post.
    p = make_pair(rx_depth=8)
    buf = bytearray(256)
    src = p.cctx.register(buf)
    imms = [0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xDEADBEEF]
    with p.client.prepare(wimm.Op.WRITE_IMM, src, 16, 1000, 64) as prep:
        assert (prep.conn, prep.op, prep.src, prep.length) == (p.client, wimm.Op.WRITE_IMM,
                                                              src, 64)
        for i, imm in enumerate(imms):
            buf[16:80] = bytes([i + 1]) * 64
            post_driving(p, prep, imm)
            (ev,) = p.events(1)
            assert (ev.type, ev.imm, ev.len, ev.conn) == (wimm.EV_WRITE_IMM, imm, 64, p.server)
            assert p.window[1000:1064] == bytes([i + 1]) * 64
        # Several in flight, then their events in post order.
        seen = []
        for imm in range(100, 104):
            seen += post_driving(p, prep, imm)
        seen += p.events(4 - len(seen))
        assert [e.imm for e in seen] == list(range(100, 104))
        with pytest.raises(ValueError):
            prep.post(1 << 32)
        with pytest.raises(ValueError):
            prep.post(-1)
        with pytest.raises(ValueError):
            prep.post(1, 1 << 40)  # flags that C would truncate
        with pytest.raises(wimm.Error) as e:
            prep.post(1, 1 << 7)  # an unknown flag
        assert e.value.name == "WIMM_E_INVAL"
    with pytest.raises(ValueError):
        prep.post(1)  # closed
    prep.close()  # again: nothing
    assert p.sctx.poll() == []  # the refused posts posted nothing


def test_prepared_signal_and_credits(make_pair):
    depth = 4
    p = make_pair(rx_depth=depth)
    src = p.cctx.register(bytearray(8))
    prep = p.client.prepare(wimm.Op.WRITE_IMM, src, 0, 0, 8)
    # A doorbell takes a credit, as write_imm's does: depth posts, then AGAIN.
    for i in range(depth):
        prep.post(i)
    with pytest.raises(wimm.Error) as e:
        prep.post(99)
    assert e.value.name == "WIMM_E_AGAIN" and e.value.code == wimm.E_AGAIN
    assert [e.imm for e in p.events(depth)] == list(range(depth))
    # Signaled: a SEND_DONE of op WRITE_IMM at the sender, the doorbell at the peer
    # (both sides' events: the fixture's helpers drop the other side's).
    post_driving(p, prep, 7, wimm.F_SIGNAL)
    done, rung = [], []
    deadline = time.monotonic() + timeout(10)
    while not (done and rung):
        done += [e for e in p.cctx.poll() if e.type == wimm.EV_SEND_DONE]
        rung += [e for e in p.sctx.poll() if e.type == wimm.EV_WRITE_IMM]
        assert time.monotonic() < deadline, f"events missing: {done} {rung}"
    assert done[0].op == wimm.Op.WRITE_IMM and done[0].conn is p.client
    assert [e.imm for e in rung] == [7]
    # A pure doorbell needs no source.
    bell = p.client.prepare(wimm.Op.WRITE_IMM, None, 0, 0, 0)
    assert bell.src is None
    post_driving(p, bell, 5)
    assert [(e.imm, e.len) for e in p.events(1)] == [(5, 0)]
    bell.close()
    prep.close()


def test_prepared_send_imm(make_pair):
    p = make_pair(recv_size=256)
    buf = bytearray(256)
    src = p.cctx.register(buf)
    prep = p.client.prepare(wimm.Op.SEND_IMM, src, 8, 0, 200)
    for imm in (1, 2, 0x80000001):
        buf[8:208] = bytes((imm + j) % 256 for j in range(200))
        post_driving(p, prep, imm)
        (ev,) = p.events(1)
        assert (ev.type, ev.imm, ev.len) == (wimm.EV_SEND_IMM, imm, 200)
        assert ev.data == bytes(buf[8:208])
    for args, name in (((src, 0, 0, 257), "WIMM_E_LOCAL_BOUNDS"),
                       ((src, 0, 8, 16), "WIMM_E_INVAL"),  # dst_off with SEND_IMM
                       ((None, 0, 0, 0), None)):
        if name is None:
            p.client.prepare(wimm.Op.SEND_IMM, *args).close()  # zero length: fine
            continue
        with pytest.raises(wimm.Error) as e:
            p.client.prepare(wimm.Op.SEND_IMM, *args)
        assert e.value.name == name
    prep.close()
    q = make_pair(window_len=64, recv_size=16)
    qsrc = q.cctx.register(bytearray(64))
    with pytest.raises(wimm.Error) as e:
        q.client.prepare(wimm.Op.SEND_IMM, qsrc, 0, 0, 17)
    assert e.value.name == "WIMM_E_TRUNC"
    r = make_pair(window_len=64)  # no receive buffers
    rsrc = r.cctx.register(bytearray(8))
    with pytest.raises(wimm.Error) as e:
        r.client.prepare(wimm.Op.SEND_IMM, rsrc, 0, 0, 8)
    assert e.value.name == "WIMM_E_NORECV"


def test_prepared_write(pair):
    data = bytearray(os.urandom(4096))
    src = pair.cctx.register(data)
    bell = pair.cctx.register(bytearray(8))
    prep = pair.client.prepare(wimm.Op.WRITE, src, 0, 2000, 4096)
    # Signaled: a SEND_DONE of op WRITE says it is done.
    prep.post(flags=wimm.F_SIGNAL)
    (done,) = pair.client_events(1, (wimm.EV_SEND_DONE,))
    assert done.op == wimm.Op.WRITE
    assert pair.window[2000:6096] == data
    # Unsignaled, twice with new bytes: a doorbell after it on the connection
    # announces it; the write itself raises no event at the peer.
    for round_ in range(2):
        data[:] = os.urandom(4096)
        prep.post(12345)  # imm: ignored by a plain write
        pair.client.write_imm(bell, 0, 0, 0, round_)
        events = pair.events(1, types=tuple(wimm.EventType))
        assert [(e.type, e.imm) for e in events] == [(wimm.EV_WRITE_IMM, round_)]
        assert pair.window[2000:6096] == data
    prep.close()


def test_prepared_errors(make_pair, pair):
    src = pair.cctx.register(bytearray(128))
    wlen = len(pair.window)
    cases = [
        ((wimm.Op.WRITE_IMM, src, 0, wlen - 10, 11), "WIMM_E_BOUNDS"),
        ((wimm.Op.WRITE, src, 0, wlen, 1), "WIMM_E_BOUNDS"),
        ((wimm.Op.WRITE_IMM, src, 0, 1 << 40, 1), "WIMM_E_BOUNDS"),
        ((wimm.Op.WRITE_IMM, src, 100, 0, 29), "WIMM_E_LOCAL_BOUNDS"),
        ((wimm.Op.WRITE_IMM, src, 0, 0, (1 << 32) + 1), "WIMM_E_TOOBIG"),
        ((wimm.Op.READ, src, 0, 0, 8), "WIMM_E_INVAL"),  # reads are not prepared
        ((wimm.Op.FETCH_ADD, src, 0, 0, 8), "WIMM_E_INVAL"),
        ((99, src, 0, 0, 8), "WIMM_E_INVAL"),
        ((wimm.Op.WRITE_IMM, None, 0, 0, 8), "WIMM_E_INVAL"),  # bytes need a source
    ]
    for args, name in cases:
        with pytest.raises(wimm.Error) as e:
            pair.client.prepare(*args)
        assert e.value.name == name, args
        assert e.value.code == getattr(wimm, name[len("WIMM_"):])
    with pytest.raises(ValueError):
        pair.client.prepare(wimm.Op.WRITE_IMM, src, 0, -1, 1)
    with pytest.raises(TypeError):
        pair.client.prepare(wimm.Op.WRITE_IMM, bytearray(8), 0, 0, 1)
    with pytest.raises(TypeError):
        pair.client.prepare("write_imm", src, 0, 0, 1)
    other = pair.sctx.register(bytearray(8))
    with pytest.raises(ValueError):
        pair.client.prepare(wimm.Op.WRITE_IMM, other, 0, 0, 8)  # another context's region
    assert pair.cctx._preps == {}  # nothing was made
    # The source is held: deregistering it is BUSY until the Prep is closed.
    prep = pair.client.prepare(wimm.Op.WRITE_IMM, src, 0, 0, 128)
    with pytest.raises(wimm.Error) as e:
        src.deregister()
    assert e.value.name == "WIMM_E_BUSY"
    prep.post(3)  # the refused deregister left both usable
    assert [e.imm for e in pair.events(1)] == [3]
    prep.close()
    src.deregister()
    # A peer without a window, one whose window is not writable.
    q = make_pair(window_len=0)
    qsrc = q.cctx.register(bytearray(8))
    with pytest.raises(wimm.Error) as e:
        q.client.prepare(wimm.Op.WRITE_IMM, qsrc, 0, 0, 8)
    assert e.value.name == "WIMM_E_NOWINDOW"
    r = make_pair(window_len=64, access=wimm.REMOTE_READ)
    rsrc = r.cctx.register(bytearray(8))
    with pytest.raises(wimm.Error) as e:
        r.client.prepare(wimm.Op.WRITE, rsrc, 0, 0, 8)
    assert e.value.name == "WIMM_E_PERM"


def test_prepared_source_kept_alive(pair):
    # The Prep holds its region, which holds the buffer: dropping every other
    # reference of the test's lets nothing go.
    prep = pair.client.prepare(wimm.Op.WRITE_IMM, pair.cctx.register(Buf(b"held!")), 0, 10, 5)
    alive = weakref.ref(prep.src.obj)
    gc.collect()
    assert alive() is not None
    prep.post(1)
    pair.events(1)
    assert pair.window[10:15] == b"held!"
    region = prep.src
    prep.close()
    region.deregister()
    del region
    gc.collect()
    assert alive() is None, "a deregistered buffer should be released"


def test_prepared_after_the_connection(pair):
    src = pair.cctx.register(bytearray(16))
    prep = pair.client.prepare(wimm.Op.WRITE_IMM, src, 0, 0, 16)
    send = pair.client.prepare(wimm.Op.WRITE, src, 0, 0, 16)
    prep.post(1)
    assert [e.imm for e in pair.events(1)] == [1]
    pair.client.close()  # wimm_conn_delete: the Preps outlive it
    for p in (prep, send):
        with pytest.raises(wimm.Error) as e:
            p.post(2)
        assert e.value.name == "WIMM_E_DISCONNECTED"
        with pytest.raises(wimm.Error) as e:
            p.post(2, wimm.F_WAIT | wimm.F_SIGNAL)
        assert e.value.name == "WIMM_E_DISCONNECTED"
    with pytest.raises(wimm.Error) as e:
        src.deregister()  # still held by the orphans
    assert e.value.name == "WIMM_E_BUSY"
    with pytest.raises(ValueError):
        pair.client.prepare(wimm.Op.WRITE_IMM, src, 0, 0, 16)  # the connection is closed
    prep.close()
    send.close()
    src.deregister()


def test_prepared_when_the_peer_leaves(pair):
    src = pair.cctx.register(bytearray(16))
    prep = pair.client.prepare(wimm.Op.WRITE_IMM, src, 0, 0, 16)
    pair.server.close()
    pair.client_events(1, (wimm.EV_DISCONNECT,))
    with pytest.raises(wimm.Error) as e:
        prep.post(1)
    assert e.value.name == "WIMM_E_DISCONNECTED"
    with pytest.raises(wimm.Error) as e:
        pair.client.prepare(wimm.Op.WRITE_IMM, src, 0, 0, 16)  # a connection that is down
    assert e.value.name == "WIMM_E_DISCONNECTED"
    prep.close()


def test_prepared_closed_with_the_context(pair):
    src = pair.cctx.register(bytearray(16))
    prep = pair.client.prepare(wimm.Op.WRITE_IMM, src, 0, 0, 16)
    pair.cctx.close()  # closes the Prep first, so the region can go too
    with pytest.raises(ValueError):
        prep.post(1)
    prep.close()
