"""What the harness measures: groups of cases, each group one point (a size,
an offered rate, a chunk size) that wimm and its peers measure in turn, once
per round. A case is a dict: "key" (unique, names the figure), "tool", and
the parameters its runner needs.

Peers by transport class of the wimm fabric:
  loopback TCP (ofi:tcp, ofi:net, ofi:sockets, ofi:udp..)  fi_pingpong -p tcp -e msg,
                                                            ucx_perftest UCX_TLS=tcp
  intra-host (ofi:shm and any other fabric, e.g. ipc)      fi_pingpong -p shm -e rdm,
                                                            ucx_perftest UCX_TLS=sm
  verbs:<device> (the Soft-RoCE guest)                     perftest ib_*_lat / ib_*_bw
"""
import math
import re

STRATEGIES = ["write_imm", "write_send", "send_imm", "write_poll"]
# The fifth strategy, on the fabrics that have atomics (the harness asks
# each fabric with a short run; ofi:tcp's MSG endpoints have none).
ATOMIC_STRATEGY = "write_atomic"
WAIT_MODES = ["spin", "adaptive", "block"]
MIB = 1 << 20


def runs_on(op, fabric, atomics):
    """Whether strategy OP is measured on FABRIC, given the fabrics with ATOMICS."""
    return op != ATOMIC_STRATEGY or fabric in atomics


def strategies(fabric, atomics):
    """The strategies measured on FABRIC, given the fabrics with ATOMICS."""
    return [op for op in STRATEGIES + [ATOMIC_STRATEGY] if runs_on(op, fabric, atomics)]


# A cache line's round trip between two processes takes 50-700 ns on the
# hosts measured; one of 50 us or more means both ran on one CPU in turn:
# another process held the other (line_probe.c). A run then waits, a pause
# at a time, at most BUSY_TRIES times (harness.Runner.settle).
BUSY_LINE_NS = 50000
BUSY_TRIES, BUSY_PAUSE_S = 5, 0.2


class Settings:
    """Sizes, iterations and rounds: the quick default or BENCH_FULL."""

    def __init__(self, full, rounds, guest=False):
        self.full, self.rounds, self.guest = full, rounds, guest
        # The latency goals' runs last a fraction of a second, and the host
        # moves its vCPUs between near and far cores from one to the next
        # (a ping-pong's latency with them: line_probe.c): three times the
        # rounds (the host's run of 2026-12-07: 15.4 -> 17.2 min). The
        # guest's level moves as much (its run of 03:33: one goal's rounds
        # 0.81-1.43, its verdict the opposite of the run before): the same
        # three times there (11.6 -> 13.6 min).
        self.lat_rounds = 3 * rounds
        scale = 10 if guest else 1  # the TCG guest is about ten times slower
        self.lat_sizes = [8, 1200]
        self.rate_sizes = [8, 64, 4096] if guest else [8, 4096]
        # Quick, in the guest: perftest's own defaults (1000 round trips) x2.
        # Not scaled down there: 200 round trips last about 5 ms, a few
        # scheduler slices of the QEMU threads (docs/performance.md, section
        # 8); 2000 cost the run seconds, not minutes. On the host 20000 in
        # both modes: a process's first few thousand round trips over
        # libfabric's shm take its queues' page faults (4.8 us at the median,
        # measured), and fi_pingpong has no warm-up to absorb them, so 2000
        # averaged the start-up more than the latency (section 14); 20000
        # take at most half a second per run (ofi:tcp write_send 1200 B).
        self.lat_iters = 20000 if full or not guest else 2000
        self.rate_iters = (50000 if full else 10000) // scale
        # Quick: write_imm at the goal sizes and write_send at 1200 B (claim a);
        # the guest's perftest pairs write_poll with ib_write_lat too.
        self.lat_ops = (STRATEGIES + [ATOMIC_STRATEGY] if full or guest
                        else ["write_imm", "write_send"])
        if full:
            self.curve_sizes = [1 << k for k in range(0, 23)]  # 1 B .. 4 MiB
            self.cpu_rates = [1000, 3000, 10000, 30000, 100000, 300000, 1000000, 3000000]
            self.chunks = [4096 << k for k in range(0, 9)]  # 4 KiB .. 1 MiB
            self.bulk_iters = 5
        else:
            self.curve_sizes = [1, 1024, 65536, 4 * MIB]  # powers of 4, a few
            # Up to where spin and block meet (ipc sustains millions per
            # second); rates above a fabric's own are not run (beyond_capacity).
            self.cpu_rates = [2000, 20000, 100000, 1000000, 3000000]
            self.chunks = [4096, 65536, MIB]
            self.bulk_iters = 2
        if guest:
            self.cpu_rates = [r for r in self.cpu_rates if r <= 30000]
            if not full:
                self.curve_sizes = [1, 256, 65536, 4 * MIB]
        self.cpu_seconds = 0.2 if not full else 0.5
        # Rate and bandwidth runs last about this long (count_for_seconds);
        # the guest's too: its count comes from its own measured rate.
        self.rate_seconds = 2.0 if full else 0.5
        self.bulk_size = 16 * MIB if guest else 64 * MIB

    def curve_lat_iters(self, size):
        most, volume = (5000, 128 * MIB) if self.full else (1000, 8 * MIB)
        return max(20, min(most, (volume // 10 ** self.guest) // max(size, 1)))

    def curve_bw_iters(self, size):
        most, volume = (50000, 256 * MIB) if self.full else (10000, 32 * MIB)
        return max(32, min(most, (volume // 10 ** self.guest) // max(size, 1)))

    def describe(self):
        return {"full": self.full, "rounds": self.rounds, "lat_rounds": self.lat_rounds,
                "guest": self.guest,
                "lat_sizes": self.lat_sizes, "rate_sizes": self.rate_sizes,
                "lat_iters": self.lat_iters, "lat_ops": self.lat_ops, "rate_iters": self.rate_iters,
                "curve_sizes": self.curve_sizes, "cpu_rates": self.cpu_rates,
                "cpu_seconds": self.cpu_seconds, "rate_seconds": self.rate_seconds,
                "rate_max_msgs": RATE_MAX_MSGS, "rate_max_bytes": RATE_MAX_BYTES,
                "calibration_growth": CALIBRATION_GROWTH,
                "calibration_min_runs": CALIBRATION_MIN_RUNS,
                "calibration_max_runs": CALIBRATION_MAX_RUNS,
                "chunks": self.chunks,
                "bulk_size": self.bulk_size, "bulk_iters": self.bulk_iters}


def transport_class(fabric):
    if fabric.startswith("verbs:"):
        return "verbs"
    providers = re.split(r"[:;]", fabric)[1:]
    if any(p in ("tcp", "net", "sockets", "udp") for p in providers):
        return "tcp"
    return "intra-host"


# The wimm strategy each latency peer is compared with: perftest's tools
# pair with the strategy that waits alike, every other peer with write_imm.
LAT_PAIR = {"ib_send_lat": "write_imm", "ib_write_lat": "write_poll"}


def paired_op(peer_tool):
    """The wimm strategy a latency goal compares with PEER_TOOL."""
    return LAT_PAIR.get(peer_tool, "write_imm")


def beside_peers(wimm_cases, peer_cases):
    """One latency group's order: each wimm case a goal compares runs between
    its peers (one before it, one after; a second fabric's case after the
    peers it shares with the first), the other cases last. The guest's
    speed moves in spells of seconds that slow every tool alike
    (docs/performance.md, section 22): the runs a round compares then run
    next to each other, whichever way the round turns."""
    paired = {paired_op(p["tool"]) for p in peer_cases}
    left, out = list(peer_cases), []
    # Compared cases first (another fabric's after the peers it shares), then the rest.
    for w in sorted(wimm_cases, key=lambda w: w["op"] not in paired):
        mine = [p for p in left if paired_op(p["tool"]) == w["op"]]
        for p in mine:
            left.remove(p)
        out += mine[:1] + [w] + mine[1:]
    return out + left


# Peers of each class: (tool, label, runner parameters).
def latency_peers(cls, available):
    peers = []
    if cls == "verbs":
        for tool in ("ib_send_lat", "ib_write_lat"):
            if tool in available:
                peers.append({"tool": tool, "label": tool})
        return peers
    prov, ep, tls = ("tcp", "msg", "tcp") if cls == "tcp" else ("shm", "rdm", "sm")
    if "fi_pingpong" in available:
        peers.append({"tool": "fi_pingpong", "label": f"fi_pingpong -p {prov} -e {ep}",
                      "provider": prov, "ep_type": ep})
    if "ucx_perftest" in available:
        peers.append({"tool": "ucx_perftest", "label": f"ucp_am_lat UCX_TLS={tls}",
                      "test": "ucp_am_lat", "tls": tls})
    return peers


def rate_peers(cls, available):
    if cls == "verbs":
        return [{"tool": t, "label": t} for t in ("ib_write_bw", "ib_send_bw") if t in available]
    if "ucx_perftest" not in available:
        return []
    tls = "tcp" if cls == "tcp" else "sm"
    return [{"tool": "ucx_perftest", "label": f"{t} UCX_TLS={tls}", "test": t, "tls": tls}
            for t in ("ucp_am_bw", "ucp_put_bw")]


# ucx_perftest's bandwidth clock stops when its sender has handed the last
# message to the transport; wimm's when the receiver acknowledged it. Over
# tcp the socket buffers (Linux's tcp_wmem allows 4 MiB) take a short run
# whole, so its sender never waits for the receiver: 10000 8-byte ucp_am_bw
# messages measured 0.30-0.44 M/s, 1M of them 0.21-0.27 M/s in the same
# minutes (docs/performance.md). Its tcp runs carry at least this many bytes
# (at most PEER_TCP_MAX_MSGS messages), so the buffers hold a small part.
PEER_TCP_BYTES = 64 * MIB
PEER_TCP_MAX_MSGS = 1000000


# A rate run sized by time stays below these: a few GiB moved, and counts a
# 32-bit ITERS and the tools' per-message bookkeeping take easily.
RATE_MAX_MSGS = 5000000
RATE_MAX_BYTES = 4 << 30
# The kinds whose runs stream messages for a message rate or a bandwidth.
TIMED_KINDS = ("rate", "curve_bw")


def _round_count(n, nearest=True):
    """N to two significant digits, to the nearest or down (61234 -> 61000):
    a count one reads at a glance."""
    if n < 100:
        return int(n)
    unit = 10 ** (len(str(int(n))) - 2)
    return int(round(n / unit) if nearest else n // unit) * unit


def count_for_seconds(rate, planned, seconds, size, max_msgs=RATE_MAX_MSGS,
                      max_bytes=RATE_MAX_BYTES):
    """Messages that last about SECONDS at RATE (msg/s, measured by a
    calibration run of PLANNED messages of SIZE bytes): never fewer than
    PLANNED, at most MAX_MSGS and MAX_BYTES (each rounded down to a readable
    count); PLANNED when the rate is unknown."""
    if not rate or rate <= 0:
        return planned
    cap = _round_count(min(max_msgs, max_bytes // max(size, 1)), nearest=False)
    return max(planned, min(cap, _round_count(rate * seconds)))


# Calibration runs per case: the planned count, then the count that run
# chose, and once more when the second chose more than CALIBRATION_GROWTH
# times its own count. A short run's rate is mostly its fixed cost
# (connection, warm-up, the final acknowledgement: ipc write_poll 8 B read
# 1.25 M/s with 10000 messages and ran at 27 M/s in the rounds, 24 ms a run);
# a run that something else on the host slowed reads low (ipc write_imm 8 B
# once read 0.05 M/s where its rounds ran at 5 M/s). Either way it chooses
# too few messages, never too many, so the rounds take the largest count
# any run chose.
CALIBRATION_GROWTH = 10
CALIBRATION_MIN_RUNS = 2
CALIBRATION_MAX_RUNS = 3


def calibrate_again(run_iters, chosen, runs_so_far):
    """Whether a case whose RUNS_SO_FAR-th calibration run, of RUN_ITERS
    messages, chose CHOSEN runs once more (with CHOSEN)."""
    if runs_so_far >= CALIBRATION_MAX_RUNS:
        return False
    return runs_so_far < CALIBRATION_MIN_RUNS or chosen > CALIBRATION_GROWTH * run_iters


# On a loaded host one round of a rate case ran 250x slower than another
# (ipc 8 B: 37796 and 9371132 msg/s, 55000 messages each), so a count sized
# from one calibration run may take that much longer than planned.
RATE_SLOWDOWN = 250


def timeout_for(iters, rate, floor, slowdown=RATE_SLOWDOWN):
    """Seconds a run of ITERS messages sized at RATE may take before it is
    declared stuck: SLOWDOWN times its expected time, at least FLOOR."""
    if not rate or rate <= 0:
        return floor
    return max(floor, int(slowdown * iters / rate + 0.999))


def timed(case):
    """Whether CASE's count is sized by time (a rate or bandwidth stream)."""
    return case["kind"] in TIMED_KINDS


def beyond_capacity(groups, calibration):
    """GROUPS without the receiver-CPU cases that offer more than their
    fabric's write_imm 8 B rate in calibration (they could only show n/a,
    after a run that lasts longer than planned), and the keys left out. The
    rate is the largest of the case's calibration runs, as its count is: a
    run the host slowed reads low (ipc once read 0.05 M/s and lost its
    100000 and 1000000 msg/s points). A fabric without a successful
    calibration run keeps all its cases."""
    cap = {}
    for r in calibration:
        if (r.get("ok") and r.get("kind") == "rate" and r.get("op") == "write_imm"
                and r.get("size") == 8 and r.get("msg_rate")):
            cap[r["fabric"]] = max(cap.get(r["fabric"], 0.0), r["msg_rate"])
    kept, dropped = [], []
    for group in groups:
        g = []
        for case in group:
            if case["kind"] == "cpu" and case["offered"] > cap.get(case["fabric"], math.inf):
                dropped.append(case["key"])
            else:
                g.append(case)
        if g:
            kept.append(g)
    return kept, dropped


def with_count(case, iters, timeout=None):
    """CASE sending ITERS messages (wimm's `-n` and the peers' count), its
    runs given TIMEOUT seconds when set."""
    out = dict(case, iters=iters, planned_iters=case.get("planned_iters", case["iters"]))
    if timeout is not None:
        out["timeout"] = timeout
    if "args" in case:
        args = list(case["args"])
        args[args.index("-n") + 1] = str(iters)
        out["args"] = args
    return out


def peer_rate_iters(cls, peer, size, iters):
    """Messages a rate peer sends: ITERS, more for ucx_perftest over tcp."""
    if cls != "tcp" or peer["tool"] != "ucx_perftest":
        return iters
    return max(iters, min(PEER_TCP_MAX_MSGS, PEER_TCP_BYTES // max(size, 1)))


def _peer_case(kind, cls, peer, size, iters):
    return dict(peer, key=f"{kind}|{cls}|{peer['label']}|{size}", kind=kind, cls=cls,
                size=size, iters=iters)


def _wimm_case(kind, fabric, mode, op, size, args, **extra):
    label = extra.pop("label", op)
    return dict(extra, key=f"{kind}|{fabric}|{label}|{size}", kind=kind, tool="wimm",
                fabric=fabric, cls=transport_class(fabric), mode=mode, op=op, size=size,
                label=label, args=["-o", op, "-s", str(size)] + args)


def build(settings, fabrics, available, atomics=()):
    """The groups, in the order one round runs them; ATOMICS: the fabrics
    that also measure write_atomic's rate."""
    s = settings
    classes = sorted({transport_class(f) for f in fabrics})
    groups = []
    def point(kind, mode, size, cls, ops, iters, peers, order=lambda w, p: w + p):
        """wimm's cases of one point on the fabrics of a class (each of OPS
        that runs there) and the peers', in ORDER (wimm's first by default)."""
        g = [_wimm_case(kind, f, mode, op, size, ["-n", str(iters)], iters=iters)
             for f in fabrics if transport_class(f) == cls
             for op in ops if runs_on(op, f, atomics)]
        return order(g, [_peer_case(kind, cls, p, size,
                                    peer_rate_iters(cls, p, size, iters)
                                    if mode == "rate" else iters)
                         for p in peers])

    # Latency at the goal sizes, each goal's two runs side by side.
    for size in s.lat_sizes:
        ops = [op for op in s.lat_ops if op != "write_send" or size == 1200 or s.full]
        groups += [[dict(c, rounds=s.lat_rounds)
                    for c in point("lat", "pingpong", size, cls, ops, s.lat_iters,
                                   latency_peers(cls, available), beside_peers)]
                   for cls in classes]
    # Message rate of the strategies, then the rate peers.
    for size in s.rate_sizes:
        groups += [point("rate", "rate", size, cls, STRATEGIES + [ATOMIC_STRATEGY], s.rate_iters,
                         rate_peers(cls, available)) for cls in classes]
    # Curves: write_imm latency and bandwidth over the sizes.
    for size in s.curve_sizes:
        for cls in classes:
            groups.append(
                point("curve_lat", "pingpong", size, cls, ["write_imm"],
                      s.curve_lat_iters(size), latency_peers(cls, available))
                + point("curve_bw", "rate", size, cls, ["write_imm"], s.curve_bw_iters(size),
                        rate_peers(cls, available)))
    # Receiver CPU per doorbell at fixed offered rates, per wait mode.
    for rate in s.cpu_rates:
        n = max(200, int(rate * s.cpu_seconds))
        groups.append([_wimm_case("cpu", f, "rate", "write_imm", 8,
                                  ["-n", str(n), "--rate", str(rate), "--wait", mode],
                                  label=f"{mode}@{rate}", wait=mode, offered=rate)
                       for f in fabrics for mode in WAIT_MODES])
    # Claim (b): a transfer as per-chunk doorbells or plain writes + one.
    for chunk in s.chunks:
        groups.append([_wimm_case("bulk", f, "bulk", "write_imm", s.bulk_size,
                                  ["-n", str(s.bulk_iters), "--chunk", str(chunk),
                                   "--notify", notify],
                                  label=f"{notify}@{chunk}", notify=notify, chunk=chunk)
                       for f in fabrics for notify in ("each", "last")])
    return [g for g in groups if g]
