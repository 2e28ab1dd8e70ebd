"""Fixtures of the wimm Python suite.

The fabric comes from --fabric (or WIMM_TEST_FABRIC; default ofi:tcp), the
host the tests listen on and connect to from WIMM_TEST_HOST (default
127.0.0.1; 192.0.2.1 in the Soft-RoCE guest). A fabric that cannot be opened
fails the suite: a skipped suite would look like a pass.
"""

import os
import threading
import time

import pytest

import wimm

SCALE = float(os.environ.get("WIMM_TEST_TIMEOUT_SCALE", "1"))


def pytest_addoption(parser):
    parser.addoption("--fabric", default=os.environ.get("WIMM_TEST_FABRIC", "ofi:tcp"),
                     help="fabric URI to run on (ofi:tcp, ofi:shm, verbs:rxe0, ...)")


@pytest.fixture(scope="session")
def fabric(request):
    uri = request.config.getoption("--fabric")
    # Fails (not skips) when the fabric cannot be opened.
    with wimm.Context(uri):
        pass
    return uri


@pytest.fixture(scope="session")
def host():
    return os.environ.get("WIMM_TEST_HOST", "127.0.0.1")


def timeout(seconds):
    return seconds * SCALE


class Pair:
    """Two contexts of one fabric and a connection between them: the server side
    exposes `window` (a bytearray of window_len bytes; allocate=True: memory of
    Context.allocate, the window's .buffer) to the client."""

    def __init__(self, fabric, host, window_len=1 << 16, window=None, rx_depth=16, recv_size=0,
                 access=wimm.REMOTE_WRITE | wimm.REMOTE_READ, client_window=None,
                 allocate=False, **ctx_attr):
        self.sctx = wimm.Context(fabric, **ctx_attr)
        self.cctx = wimm.Context(fabric, **ctx_attr)
        if allocate:
            self.wmr = self.sctx.allocate(window_len, access)
            self.window = self.wmr.buffer
        else:
            self.window = bytearray(window_len) if window is None else window
            self.wmr = self.sctx.register(self.window, access) if len(self.window) else None
        self.listener = self.sctx.listen(f"{host}:0", window=self.wmr, rx_depth=rx_depth,
                                         recv_size=recv_size)
        accepted = {}

        def accept():
            try:
                accepted["conn"] = self.listener.accept(timeout=timeout(10))
            except Exception as e:  # reported by the main thread
                accepted["error"] = e

        t = threading.Thread(target=accept)
        t.start()
        self.cwin = self.cctx.register(client_window, wimm.REMOTE_WRITE) if client_window \
            else None
        try:
            self.client = self.cctx.connect(f"{host}:{self.listener.port}",
                                            timeout=timeout(10), window=self.cwin,
                                            rx_depth=rx_depth, recv_size=recv_size)
        finally:
            t.join()
        if "error" in accepted:
            raise accepted["error"]
        self.server = accepted["conn"]

    def events(self, n, types=(wimm.EV_WRITE_IMM, wimm.EV_SEND_IMM), seconds=10):
        """The next n events of `types` at the server, driving both sides."""
        return self._collect(self.sctx, self.cctx, n, types, seconds)

    def client_events(self, n, types, seconds=10):
        """The same at the client."""
        return self._collect(self.cctx, self.sctx, n, types, seconds)

    @staticmethod
    def _collect(ctx, other, n, types, seconds):
        got = []
        deadline = time.monotonic() + timeout(seconds)
        while len(got) < n:
            other.poll()
            got += [e for e in ctx.poll() if e.type in types]
            if time.monotonic() > deadline:
                raise AssertionError(f"only {len(got)} of {n} events in {seconds} s: {got}")
        return got

    def close(self):
        self.cctx.close()
        self.sctx.close()


@pytest.fixture
def make_pair(fabric, host):
    made = []

    def make(**kw):
        p = Pair(fabric, host, **kw)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


@pytest.fixture
def pair(make_pair):
    return make_pair()


def pytest_terminal_summary(terminalreporter):
    # The plain closing line that tests/errata/run-in-guest.sh (and CI) sum
    # up; errors (a fixture that failed, e.g. an unopenable fabric) are failures.
    stats = terminalreporter.stats
    passed = len(stats.get("passed", []))
    failed = len(stats.get("failed", [])) + len(stats.get("error", []))
    terminalreporter.write_line(f"{passed} passed, {failed} failed")
