#!/usr/bin/python3
"""The like-for-like benchmark: wimm against every peer available here.

  harness.py [--build DIR] [--name NAME] [--out DIR] [--guest] [--note TEXT] [--only REGEX]

Sizes every rate and bandwidth case by calibration runs (the largest count
they choose lasts about rate_seconds), runs every group of plan.py once per
round (wimm's cases and the peers' in turn, a latency goal's two runs side by
side, their order reversed every other round so drift hits both alike), keeps
every run in bench/results/<name>-<date>.json (-run2, -run3.. when that
exists: no results file is overwritten), then
writes the report (report.py): the markdown tables with the verdicts and
the PNG plots. --only REGEX: only the cases whose key matches.
BENCH_FULL=1: the long curves; BENCH_ROUNDS=N: rounds (at least 5; the latency
goals run 3N).
Progress goes to stderr. Exits 1 when a tool ran another transport than the
one claimed (its figures would be mislabelled), 2 on bad usage.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plan  # noqa: E402
import report  # noqa: E402
import runners  # noqa: E402

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
PROJECT_DIR = os.path.dirname(BENCH_DIR)
PEER_TOOLS = ["fi_pingpong", "ucx_perftest", "ib_send_lat", "ib_write_lat", "ib_write_bw",
              "ib_send_bw"]


def say(text):
    print(f"bench: {text}", file=sys.stderr, flush=True)


def find_wimm(build):
    for candidate in ("tools/wimm", "wimm", "bin/wimm"):
        path = os.path.join(build, candidate)
        if os.access(path, os.X_OK):
            # Relative to the project when inside it: the commands recorded
            # in the results then name no folder of this machine.
            path = os.path.abspath(path)
            rel = os.path.relpath(path, PROJECT_DIR)
            return path if rel.startswith("..") else os.path.join(".", rel)
    raise SystemExit(f"bench: no wimm executable under {build} (build it first: make build)")


def find_probe(build):
    """wimm_line_probe of the build, or None (the report then has no host
    column)."""
    path = os.path.join(build, "bench", "wimm_line_probe")
    return path if os.access(path, os.X_OK) else None


def wimm_fabrics(wimm):
    """Every fabric `wimm info --json` lists, once, in its order."""
    out = runners.subprocess.run([wimm, "info", "--json"], capture_output=True, text=True,
                                 timeout=60)
    if out.returncode != 0:
        raise SystemExit(f"bench: wimm info --json failed: {out.stderr.strip()}")
    seen = []
    for f in json.loads(out.stdout)["fabrics"]:
        if f["fabric"] not in seen:
            seen.append(f["fabric"])
    return seen


class Runner:
    """Runs cases, keeps every record."""

    def __init__(self, wimm, work, host, probe=None):
        self.wimm, self.work, self.host, self.probe = wimm, work, host, probe
        self.records = []

    def host_line(self):
        """The host's cache-line round trip between two processes now (ns),
        or None without the probe (it did not build, or failed)."""
        return runners.run_line_probe(self.probe) if self.probe else None

    def settle(self, tries=plan.BUSY_TRIES, pause=plan.BUSY_PAUSE_S):
        """The host's level before a run: probed again, after a pause, while
        a CPU is taken (another process runs there: the last run's exit,
        the kernel's own work), at most TRIES times. (the level, [the busy
        probes before it])."""
        busy = []
        line = self.host_line()
        while line is not None and line >= plan.BUSY_LINE_NS and len(busy) < tries:
            busy.append(line)
            time.sleep(pause)
            line = self.host_line()
        return line, busy

    def execute(self, case, device=None):
        tool = case["tool"]
        # A count sized by time comes with its own time limit; else the runner's.
        limit = {"timeout": case["timeout"]} if "timeout" in case else {}
        if tool == "wimm":
            return runners.run_wimm(self.wimm, self.work, case["mode"], case["fabric"],
                                    case["args"], host=self.host, **limit)
        if tool == "fi_pingpong":
            return runners.run_fi_pingpong(self.work, case["provider"], case["ep_type"],
                                           case["size"], case["iters"], **limit)
        if tool == "ucx_perftest":
            return runners.run_ucx(self.work, case["test"], case["tls"], case["size"],
                                   case["iters"], **limit)
        return runners.run_perftest(self.work, tool, device, case["size"], case["iters"],
                                    self.host, **limit)


def probe_fabrics(runner, fabrics):
    """A short ping-pong on each fabric: the ones that cannot run one are
    reported as unusable instead of failing every round."""
    usable, unusable = [], {}
    for fabric in fabrics:
        try:
            runners.run_wimm(runner.wimm, runner.work, "pingpong", fabric, ["-n", "200"],
                             host=runner.host, timeout=45)
            usable.append(fabric)
        except runners.RunError as e:
            unusable[fabric] = str(e)[-400:]
            say(f"fabric {fabric} is unusable here: {str(e)[-200:]}")
    return usable, unusable


def probe_atomics(runner, fabrics):
    """The fabrics among FABRICS that run write_atomic (a short rate run
    each), and for the others what their run said (ofi:tcp: NOTSUP)."""
    have, lacking = [], {}
    for fabric in fabrics:
        try:
            runners.run_wimm(runner.wimm, runner.work, "rate", fabric,
                             ["-o", plan.ATOMIC_STRATEGY, "-s", "8", "-n", "200"],
                             host=runner.host, timeout=45)
            have.append(fabric)
        except runners.RunError as e:
            # The client's own words say why (the server only sees it leave).
            why = re.search(r"wimm: client: [^|]*", str(e))
            lacking[fabric] = why.group(0).strip() if why else str(e)[-400:]
            say(f"fabric {fabric}: no write_atomic here: {lacking[fabric][-200:]}")
    return have, lacking


def attempt(runner, case, device, failed):
    """One run of CASE as a record; a timeout puts its key in FAILED."""
    record = {k: v for k, v in case.items() if k != "args"}
    record["time"] = round(time.time(), 3)
    try:
        record.update(runner.execute(case, device), ok=True)
    except runners.RunError as e:
        if e.costly:
            failed[case["key"]] = str(e)
        record.update(ok=False, error=str(e)[-600:])
        say(f"run failed: {str(e)[-300:]}")
    return record


def calibrate(runner, groups, seconds, device, failed, records, checkpoint=lambda: None):
    """GROUPS with every rate and bandwidth case sized by time: one run of
    its planned count measures its rate, plan.count_for_seconds turns that
    into the count of every round, and more runs check it
    (plan.calibrate_again). Each calibration run goes to RECORDS
    (kept in the JSON, in no median)."""
    sized = []
    for group in groups:
        out = []
        for case in group:
            if not plan.timed(case):
                out.append(case)
                continue
            out.append(calibrate_case(runner, case, seconds, device, failed, records))
        sized.append(out)
        checkpoint()
    return sized


def calibrate_case(runner, case, seconds, device, failed, records):
    """CASE with the count of its rounds: the largest count its calibration
    runs chose (plan.calibrate_again says how many run)."""
    floor = runners.PERFTEST_TIMEOUT if case["tool"].startswith("ib_") else runners.RUN_TIMEOUT
    best = (case["iters"], floor)  # what a case without a measured rate keeps
    run_case, runs = case, 0
    while True:
        runs += 1
        say(f"calibration {case['key']}: {run_case['iters']} messages")
        record = attempt(runner, run_case, device, failed)
        rate = record.get("msg_rate") if record["ok"] else None
        if rate:
            iters = plan.count_for_seconds(rate, case["iters"], seconds, case["size"])
            timeout = plan.timeout_for(iters, rate, floor)
            say(f"calibration {case['key']}: {rate:.0f} msg/s -> {iters} messages "
                f"(about {iters / rate:.2f} s, time limit {timeout} s)")
            best = max(best, (iters, timeout))
        else:
            iters, timeout = best
            say(f"calibration {case['key']}: no rate, keeping {iters} messages")
        record.update(calibration=True, chosen_iters=iters, chosen_timeout=timeout)
        records.append(record)
        if not rate or not plan.calibrate_again(run_case["iters"], iters, runs):
            break
        run_case = plan.with_count(case, iters, timeout)
    return plan.with_count(case, *best)


def total_runs(groups, rounds):
    """Runs in all rounds: a case's own rounds (the latency goals') or ROUNDS."""
    return sum(c.get("rounds", rounds) for g in groups for c in g)


def run_rounds(runner, groups, rounds, device, checkpoint=lambda: None, failed=None):
    total = total_runs(groups, rounds)
    last = max((c.get("rounds", rounds) for g in groups for c in g), default=rounds)
    done, start = 0, time.monotonic()
    # key -> error: a case that timed out once (calibration included) is not retried
    failed = {} if failed is None else failed
    for rnd in range(1, last + 1):
        for group in groups:
            # The cases with rounds left, in turn as before.
            active = [c for c in group if c.get("rounds", rounds) >= rnd]
            if not active:
                continue
            order = active if rnd % 2 else list(reversed(active))
            for case in order:
                done += 1
                elapsed = time.monotonic() - start
                left = elapsed / (done - 1) * (total - done + 1) if done > 1 else 0
                say(f"round {rnd}/{case.get('rounds', rounds)} [{done}/{total}, "
                    f"{elapsed / 60:.1f} min, "
                    f"~{left / 60:.1f} min left] {case['key']}")
                if case["key"] in failed:
                    record = {k: v for k, v in case.items() if k != "args"}
                    record.update(ok=False, time=round(time.time(), 3),
                                  error="skipped, as an earlier run timed out or did not "
                                  f"start: {failed[case['key']]}")
                else:
                    # Where the host has put our CPUs right before the run:
                    # intra-host figures move with it (line_probe.c).
                    # A run starts once no other process holds a CPU.
                    line, busy = runner.settle()
                    record = attempt(runner, case, device, failed)
                    if line is not None:
                        record["host_line_ns"] = line
                    if busy:
                        record["host_busy_ns"] = busy
                record["round"] = rnd
                runner.records.append(record)
            # A run killed from outside (the guest's time limit) leaves
            # every group finished so far on disk.
            checkpoint()


# libfabric's shm names an endpoint's region /dev/shm/PID:... after its
# process.
SHM_REGION = re.compile(r"^([0-9]+):")


def clear_stale_shm(directory="/dev/shm"):
    """Remove the shm regions of processes that are gone; how many. A killed
    process leaves its region behind, and a later process given the same id
    fails its fi_enable with EBUSY once: wimm tries again, fi_pingpong exits
    and its run would count as failed. Such a region belongs to nobody."""
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    removed = 0
    for name in names:
        m = SHM_REGION.match(name)
        if not m or os.path.exists(f"/proc/{m.group(1)}"):
            continue
        try:
            os.unlink(os.path.join(directory, name))
            removed += 1
        except OSError:
            pass
    return removed


def machine(note):
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f
                       if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"host": platform.node(), "cpu": cpu, "cores": os.cpu_count(),
            "kernel": platform.release(), "note": note}


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def tool_versions(wimm):
    versions = {}
    for name, argv in (("wimm", [wimm, "--version"]), ("libfabric", ["fi_info", "--version"]),
                       ("ucx", ["ucx_info", "-v"])):
        try:
            out = runners.subprocess.run(argv, capture_output=True, text=True, timeout=30)
            versions[name] = " ".join(out.stdout.split()[:4])
        except (OSError, runners.subprocess.TimeoutExpired):
            pass
    return versions


def results_stem(out, base):
    """OUT/BASE, or OUT/BASE-run2, -run3.. : the first of which no file
    (.json, .md, the checkpoint, the plots BASE-*.png) exists yet; its .json
    is created (empty) to reserve it."""
    names = set(os.listdir(out)) if os.path.isdir(out) else set()
    for n in range(1, 10000):
        stem = base if n == 1 else f"{base}-run{n}"
        taken = re.compile(re.escape(stem) + r"(\.|-(?!run\d+[.-])[^.]*\.png$)")
        if any(taken.match(name) for name in names):
            continue
        try:
            # Created here, exclusively: a run started meanwhile takes the next name.
            with open(os.path.join(out, stem + ".json"), "x"):
                return os.path.join(out, stem)
        except FileExistsError:
            continue
    raise SystemExit(f"bench: {out}: no free name for {base}")


def only_filter(pattern):
    """The --only argument as a compiled regular expression."""
    try:
        return re.compile(pattern)
    except re.error as e:
        raise argparse.ArgumentTypeError(f"not a regular expression: {pattern!r}: {e}")


def narrow(groups, only):
    """The cases of GROUPS whose key ONLY (a compiled pattern, or None: all)
    matches, the groups left empty dropped."""
    if only is None:
        return groups
    return [g for g in ([c for c in g if only.search(c["key"])] for g in groups) if g]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--name", default=None, help="results file prefix (default: host or "
                        "softroce)")
    parser.add_argument("--out", default=os.path.join(BENCH_DIR, "results"))
    parser.add_argument("--guest", action="store_true",
                        help="in the Soft-RoCE guest: verbs fabrics against perftest")
    parser.add_argument("--device", default=os.environ.get("DEVICE", "rxe0"))
    parser.add_argument("--host", default=None, help="address the clients connect to")
    parser.add_argument("--note", default=os.environ.get("BENCH_NOTE", ""))
    parser.add_argument("--only", type=only_filter, default=None, metavar="REGEX",
                        help="only the cases whose key (e.g. rate|ipc|write_imm|8) matches")
    args = parser.parse_args()
    full = os.environ.get("BENCH_FULL", "") not in ("", "0")
    rounds_text = os.environ.get("BENCH_ROUNDS", "5")
    rounds = int(rounds_text) if rounds_text.isdigit() else 0
    if rounds < 5:
        parser.error(f"BENCH_ROUNDS={rounds_text!r}: give a number of at least 5 (medians of "
                     "fewer rounds say little)")
    settings = plan.Settings(full, rounds, guest=args.guest)
    name = args.name or ("softroce" if args.guest else "host")
    host = args.host or ("192.0.2.1" if args.guest else "127.0.0.1")

    # The recorded commands run from the project folder.
    args.build, args.out = os.path.abspath(args.build), os.path.abspath(args.out)
    os.chdir(PROJECT_DIR)
    wimm = find_wimm(args.build)
    fabrics = wimm_fabrics(wimm)
    if args.guest:
        fabrics = [f for f in fabrics if f.startswith("verbs:")]
    else:
        fabrics = [f for f in fabrics if not f.startswith("verbs:")]
    available = {t for t in PEER_TOOLS if shutil.which(t)}
    say(f"fabrics listed: {', '.join(fabrics)}; peers here: {', '.join(sorted(available))}")
    stale = clear_stale_shm()
    if stale:
        say(f"removed {stale} shm regions of processes that are gone")
    # Atomics are not asked yet: a pattern naming write_atomic is valid here.
    if not narrow(plan.build(settings, fabrics, available, atomics=fabrics), args.only):
        parser.error(f"--only '{args.only.pattern}': no case matches (keys look like "
                     "rate|ipc|write_imm|8; a literal | is \\|)")
    date = datetime.datetime.now(datetime.timezone.utc)
    meta = {"date": date.strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(args.note),
            "load_before": loadavg(), "versions": tool_versions(wimm),
            "settings": settings.describe(), "peers": sorted(available),
            "side_by_side": True}  # plan.beside_peers orders the latency groups
    if args.only:
        meta["only"] = args.only.pattern
    if args.guest:
        try:
            with open("/sys/devices/system/clocksource/clocksource0/current_clocksource") as f:
                meta["clocksource"] = f.read().strip()
        except OSError:
            meta["clocksource"] = "unknown"
    with tempfile.TemporaryDirectory(prefix="wimm-bench-") as work:
        runner = Runner(wimm, work, host, find_probe(args.build))
        if not runner.probe:
            say("no wimm_line_probe in the build: the host's level is not recorded")
        usable, unusable = probe_fabrics(runner, fabrics)
        meta.update(fabrics=usable, unusable=unusable)
        meta["atomics"], meta["no_atomics"] = probe_atomics(runner, usable)
        groups = narrow(plan.build(settings, usable, available, meta["atomics"]), args.only)
        if not groups:
            raise SystemExit(f"bench: --only '{args.only.pattern}': no case on the usable "
                             f"fabrics ({', '.join(usable) or 'none'}) matches")
        started = time.monotonic()
        os.makedirs(args.out, exist_ok=True)
        stem = results_stem(args.out, f"{name}-{date.strftime('%Y-%m-%d')}")
        say(f"results: {stem}.json")
        calibration, failed = [], {}

        def checkpoint():
            partial = dict(meta, aborted=f"incomplete: {len(runner.records)} runs so far")
            with open(stem + ".json.tmp", "w") as f:
                json.dump({"meta": partial, "calibration": calibration, "runs": runner.records},
                          f, indent=1)
            os.replace(stem + ".json.tmp", stem + ".json")

        checkpoint()
        # Interrupted (Ctrl-C, SIGTERM), the runs so far are still written.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            groups = calibrate(runner, groups, settings.rate_seconds, args.device, failed,
                               calibration, checkpoint)
            groups, meta["beyond_capacity"] = plan.beyond_capacity(groups, calibration)
            for key in meta["beyond_capacity"]:
                say(f"not run: {key} (above the fabric's write_imm 8 B rate in calibration)")
            run_rounds(runner, groups, rounds, args.device, checkpoint, failed)
        except runners.TransportError as e:
            say(f"error: {e}")
            meta["aborted"] = str(e)
        except KeyboardInterrupt:
            meta["aborted"] = (f"interrupted after {len(runner.records)} of "
                               f"{total_runs(groups, rounds)} runs: the later "
                               "groups have fewer rounds than the earlier ones")
            say(meta["aborted"])
        finally:
            runners.kill_live_servers()
        meta["load_after"] = loadavg()
        meta["minutes"] = round((time.monotonic() - started) / 60, 1)
    with open(stem + ".json", "w") as f:
        json.dump({"meta": meta, "calibration": calibration, "runs": runner.records}, f,
                  indent=1)
    say(f"raw results: {stem}.json")
    report.write(stem)
    if "aborted" in meta:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
