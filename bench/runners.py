"""One run of one tool: wimm (server + client processes), fi_pingpong,
ucx_perftest, perftest. Each runner returns a dict of figures in common units
(one-way µs, messages/s, bytes/s) plus the command line; a failed run raises
RunError, a tool that did not use the transport it was asked for raises
TransportError (the harness stops: its figures would be mislabelled).

Conventions of the tools, converted here once:
- wimm pingpong: one-way = round trip / 2; median and average per run.
- fi_pingpong: usec/xfer = total time / (2 x iterations), a one-way AVERAGE
  (it prints no median); MB/sec with MB = 10^6.
- ucx_perftest: latency tests print one-way (round trip / 2) "50.0%ile"
  (its median, over the samples it keeps) and "overall" (the average);
  bandwidth in MB/s with MB = 2^20, message rate in messages/s.
- perftest ib_*_lat: t_typical (median) and t_avg, one-way (round trip / 2);
  ib_*_bw: MsgRate in Mpps; bytes/s = rate x size.
"""
import json
import os
import re
import shlex
import socket
import subprocess
import time

MIB = 1 << 20
RUN_TIMEOUT = 120  # seconds a run may take unless told otherwise
# Servers started and not yet reaped: an interrupted harness ends them.
LIVE_SERVERS = set()


def kill_live_servers():
    for proc in list(LIVE_SERVERS):
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        LIVE_SERVERS.discard(proc)


class RunError(Exception):
    """A run failed: the tool exited non-zero, timed out or printed nothing usable.
    `costly`: it failed by a timeout, which later rounds would only repeat."""

    def __init__(self, message, costly=False):
        super().__init__(message)
        self.costly = costly


class TransportError(Exception):
    """A tool ran over another transport than the one it was asked for."""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(text, lines=6):
    """The last lines of a tool's output, without the frames of a backtrace."""
    kept = [line for line in text.strip().splitlines()
            if not line.startswith("/") and "(+0x" not in line]
    return " | ".join(kept[-lines:])


def _wait_listening(proc, err_path, pattern, seconds):
    """Wait until the server's stderr has `pattern`; False if it died first."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with open(err_path, errors="replace") as f:
            if pattern in f.read():
                return True
        if proc.poll() is not None:
            return False
        time.sleep(0.01)
    return False


class Pair:
    """A server process in the background and a client in the foreground,
    both with their output in files of a work folder."""

    def __init__(self, work, name, timeout):
        self.work, self.name, self.timeout = work, name, timeout
        self.server = None

    def path(self, what):
        return os.path.join(self.work, f"{self.name}.{what}")

    def start_server(self, argv, env=None):
        # The child keeps its own copies of the two files; ours close here.
        with open(self.path("server.out"), "w") as out, open(self.path("server.err"), "w") as err:
            self.server = subprocess.Popen(argv, stdout=out, stderr=err, env=env,
                                           start_new_session=True)
        LIVE_SERVERS.add(self.server)

    def run_client(self, argv, env=None):
        try:
            done = subprocess.run(argv, capture_output=True, text=True, env=env,
                                  timeout=self.timeout)
        except subprocess.TimeoutExpired as e:
            self.kill_server()
            raise RunError(f"{shlex.join(argv)}: no result after {self.timeout} s",
                           costly=True) from e
        return done

    def finish_server(self):
        """Wait for the server; its exit status, stdout and stderr."""
        try:
            rc = self.server.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.kill_server()
            rc = "timeout"
        LIVE_SERVERS.discard(self.server)
        self.server = None
        with open(self.path("server.out"), errors="replace") as f:
            out = f.read()
        with open(self.path("server.err"), errors="replace") as f:
            err = f.read()
        return rc, out, err

    def kill_server(self):
        if self.server is not None and self.server.poll() is None:
            self.server.kill()
            self.server.wait()
        LIVE_SERVERS.discard(self.server)
        self.server = None


def run_wimm(wimm, work, mode, fabric, args, host="127.0.0.1", timeout=RUN_TIMEOUT):
    """`wimm MODE -f FABRIC ARGS` as a server and a client; the client's JSON
    object, with the receiver's CPU (its own JSON line) merged in."""
    port = free_port()
    # The server gets a --timeout too: a server waiting "forever" is not
    # needed here, and a stuck run must end.
    common = [wimm, mode, "-f", fabric, "-p", str(port), "--timeout", "60", "--json"] + args
    pair = Pair(work, "wimm", timeout)
    pair.start_server(common)
    if not _wait_listening(pair.server, pair.path("server.err"), "listening on port", 60):
        rc, _, err = pair.finish_server()
        raise RunError(f"wimm {mode} server did not start ({rc}): {_tail(err)}", costly=True)
    client = pair.run_client(common + [host])
    rc, out, err = pair.finish_server()
    cmd = shlex.join(common + [host])
    if client.returncode != 0 or rc != 0:
        raise RunError(f"{cmd}: client {client.returncode}, server {rc}: "
                       f"{_tail(client.stderr)} / {_tail(err)}")
    try:
        result = json.loads(client.stdout.strip().splitlines()[-1])
        receiver = [json.loads(line) for line in out.splitlines() if line.strip()]
    except (ValueError, IndexError) as e:
        raise RunError(f"{cmd}: unreadable JSON: {client.stdout[:200]!r}") from e
    # wimm names the fabric it opened: it must be the one asked for.
    if result.get("fabric") != fabric:
        raise TransportError(f"{cmd}: asked for {fabric}, wimm ran on {result.get('fabric')}")
    for r in receiver:
        if r.get("role") == "receiver":
            result.update({k: v for k, v in r.items() if k.startswith("rx_")})
    result["cmd"] = cmd
    return result


def _listening(port):
    """Whether some socket listens on TCP port PORT (from /proc/net/tcp*):
    looking does not connect, so a server that takes one client is not
    disturbed."""
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                for line in f.readlines()[1:]:
                    cols = line.split()
                    if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except OSError:
            pass
    return False


def _retry_client(pair, argv, env, port, attempts=20):
    """Peers' servers print nothing until done: wait until the server's port
    listens, then run the client (again if it still came too early)."""
    deadline = time.monotonic() + 60
    while not _listening(port) and pair.server.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    for _ in range(attempts):
        done = pair.run_client(argv, env)
        if done.returncode == 0:
            return done
        if pair.server.poll() is not None:
            break
        time.sleep(0.1)
    rc, _, err = pair.finish_server()
    raise RunError(f"{shlex.join(argv)}: client {done.returncode}, server {rc}: "
                   f"{_tail(done.stdout + done.stderr)} / {_tail(err)}")


def _finish_peer(pair, argv):
    rc, _, err = pair.finish_server()
    if rc != 0:
        raise RunError(f"{shlex.join(argv)}: server exited {rc}: {_tail(err)}")


def run_fi_pingpong(work, provider, ep_type, size, iters, timeout=RUN_TIMEOUT):
    """fi_pingpong -p PROVIDER -e EP_TYPE: libfabric restricts its fi_getinfo
    to that provider, so the run fails rather than fall back to another."""
    port = free_port()
    base = ["fi_pingpong", "-p", provider, "-e", ep_type, "-S", str(size), "-I", str(iters)]
    pair = Pair(work, "fi", timeout)
    pair.start_server(base + ["-B", str(port)])
    argv = base + ["-P", str(port), "127.0.0.1"]
    done = _retry_client(pair, argv, None, port)
    _finish_peer(pair, argv)
    # bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
    lines = done.stdout.splitlines()
    for i, line in enumerate(lines):
        if line.split()[:2] == ["bytes", "#sent"] and i + 1 < len(lines):
            cols = lines[i + 1].split()
            return {"avg_us": float(cols[6]), "bw_Bps": float(cols[5]) * 1e6,
                    "cmd": shlex.join(argv)}
    raise RunError(f"{shlex.join(argv)}: no result line in {_tail(done.stdout)!r}")


# The UCX transports a UCX_TLS setting may end up on, by what it claims.
UCX_ALLOWED = {
    "tcp": {"tcp"},
    "sm": {"posix", "sysv", "cma", "knem", "xpmem", "self"},
}


def _ucx_transports(text):
    """Transport names of the lanes UCX reports (ep_cfg[..]: am(tcp/lo ...))."""
    names = set()
    for line in text.splitlines():
        if "ep_cfg[" in line:
            cfg = line.split("ep_cfg[", 1)[1]
            names.update(m.group(1) for m in re.finditer(r"([a-z_0-9]+)/[A-Za-z_0-9.:-]+", cfg))
    return names


def check_ucx_lanes(log, tls, cmd):
    """The transports of UCX's lanes in its log; TransportError unless every
    one belongs to TLS."""
    used = _ucx_transports(log)
    if not used:
        raise TransportError(f"{cmd}: UCX reported no lanes: cannot check the transport")
    if not used <= UCX_ALLOWED[tls]:
        raise TransportError(f"{cmd}: UCX_TLS={tls} ran over {sorted(used)}")
    return used


def run_ucx(work, test, tls, size, iters, timeout=RUN_TIMEOUT):
    """ucx_perftest -t TEST with UCX_TLS=TLS; checks in UCX's own log that
    every lane it set up uses an allowed transport of that TLS."""
    env = dict(os.environ, UCX_TLS=tls, UCX_LOG_LEVEL="info")
    port = free_port()
    common = ["ucx_perftest", "-p", str(port)]
    pair = Pair(work, "ucx", timeout)
    pair.start_server(common, env)
    argv = common + ["127.0.0.1", "-t", test, "-s", str(size), "-n", str(iters),
                     "-w", str(max(1, iters // 10)), "-v"]
    done = _retry_client(pair, argv, env, port)
    _finish_peer(pair, argv)
    cmd = f"UCX_TLS={tls} " + shlex.join(argv)
    used = check_ucx_lanes(done.stdout + done.stderr, tls, cmd)
    # CSV: iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr
    rows = [line.split(",") for line in done.stdout.splitlines()
            if re.match(r"^\s*\d+,[0-9.]+,", line)]
    if not rows:
        raise RunError(f"{cmd}: no CSV result in {_tail(done.stdout)!r}")
    cols = rows[-1]
    return {"median_us": float(cols[1]), "avg_us": float(cols[3]),
            "bw_Bps": float(cols[5]) * MIB, "msg_rate": float(cols[7]),
            "transports": sorted(used), "cmd": cmd}


PERFTEST_TIMEOUT = 300  # the guest's perftest runs are slow (TCG)


def run_perftest(work, tool, device, size, iters, addr, timeout=PERFTEST_TIMEOUT):
    """perftest ib_*_lat / ib_*_bw between two processes on ADDR; checks the
    device it reports."""
    port = free_port()
    base = [tool, "-d", device, "-x", "1", "-s", str(size), "-n", str(iters), "-p", str(port)]
    pair = Pair(work, "perftest", timeout)
    pair.start_server(base)
    argv = base + [addr]
    done = _retry_client(pair, argv, None, port)
    _finish_peer(pair, argv)
    out = done.stdout
    m = re.search(r"Device\s*:\s*(\S+)", out)
    if not m or m.group(1) != device:
        raise TransportError(f"{shlex.join(argv)}: ran on device {m and m.group(1)}, not {device}")
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 5 and cols[0] == str(size) and all(
                re.match(r"^[0-9.]+$", c) for c in cols[:5]):
            if tool.endswith("_lat"):
                # #bytes #iterations t_min t_max t_typical t_avg ...
                return {"median_us": float(cols[4]), "avg_us": float(cols[5]),
                        "cmd": shlex.join(argv)}
            # #bytes #iterations BW_peak BW_average MsgRate[Mpps]: bytes/s
            # from the message rate, whatever perftest's MB is.
            rate = float(cols[4]) * 1e6
            return {"bw_Bps": rate * size, "msg_rate": rate, "cmd": shlex.join(argv)}
    raise RunError(f"{shlex.join(argv)}: no result line in {_tail(out)!r}")


def run_line_probe(probe, ms=20):
    """wimm_line_probe's round trip (ns), or None when it did not run: the
    probe only describes the host, a run never fails on it."""
    try:
        done = subprocess.run([probe, "-t", str(ms)], capture_output=True, text=True,
                              timeout=30)
        if done.returncode == 0:
            return json.loads(done.stdout.strip().splitlines()[-1])["line_rtt_ns"]
    except (OSError, subprocess.TimeoutExpired, ValueError, KeyError, IndexError):
        pass
    return None
