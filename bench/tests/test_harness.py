"""The harness's statistics, verdicts and parsers on fixed inputs (ctest
bench.harness): the medians over rounds, the ratio direction of each goal,
where curves cross, the UCX transport check, the count of a rate run sized
by time and its repeated calibration, the choice of a results file's name
and the report of a results file with a failed run, an unusable fabric and
its calibration runs."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import goals  # noqa: E402
import harness  # noqa: E402
import plan  # noqa: E402
import report  # noqa: E402
import runners  # noqa: E402
from stats import Index, crossing, figure, ratio, verdict  # noqa: E402

UCX_LOG = """\
[1796117746.328700] [vm:23404:0]     ucp_context.c:1849 UCX  INFO  Version 1.13.1
[1796117746.332415] [vm:23404:0]      ucp_worker.c:1763 UCX  INFO    ep_cfg[0]: am(tcp/lo tcp/eth0)
[1796117746.332415] [vm:23404:0]      ucp_worker.c:1763 UCX  INFO    ep_cfg[1]: rma(sysv/memory posix/memory)
"""


def run(key, kind, rnd, ok=True, **fig):
    return dict(fig, key=key, kind=kind, round=rnd, ok=ok, tool=fig.pop("tool", "wimm"))


class StatsTest(unittest.TestCase):
    def test_median_over_rounds_skips_failed_runs(self):
        ix = Index([run("k", "lat", 1, avg_us=3.0), run("k", "lat", 2, avg_us=1.0),
                    run("k", "lat", 3, avg_us=2.0), run("k", "lat", 4, ok=False, avg_us=99.0)])
        self.assertEqual(ix.median("k", "avg_us"), 2.0)
        self.assertEqual(ix.count("k"), (3, 4))
        self.assertIsNone(ix.median("other", "avg_us"))

    def test_round_ratios_pair_the_rounds_both_have(self):
        # Round 2 of a failed, round 3 missing on b's side: rounds 1 and 4 only.
        ix = Index([run("a", "lat", 1, median_us=1.0), run("a", "lat", 2, ok=False),
                    run("a", "lat", 3, median_us=3.0), run("a", "lat", 4, median_us=2.0),
                    run("b", "lat", 4, median_us=4.0), run("b", "lat", 1, median_us=2.0),
                    run("b", "lat", 2, median_us=2.0)])
        self.assertEqual(ix.round_ratios("a", "b", "median_us"), [0.5, 0.5])
        self.assertEqual(ix.round_ratios("a", "none", "median_us"), [])

    def test_derived_figures(self):
        r = run("k", "cpu", 1, rx_cpu_user_s=0.01, rx_cpu_sys_s=0.03, rx_doorbells=1000,
                bw_mbps=2.5, iters=4)
        self.assertAlmostEqual(figure(r, "cpu_us_per_doorbell"), 40.0)
        self.assertAlmostEqual(figure(r, "bw_Bps"), 2.5e6)
        self.assertAlmostEqual(figure(r, "bulk_cpu_ms"), 10.0)
        # A peer's bytes/s are its own figure, not wimm's MB/s.
        self.assertEqual(figure(dict(r, tool="ucx_perftest", bw_Bps=7.0), "bw_Bps"), 7.0)

    def test_verdict_directions(self):
        self.assertEqual(verdict(ratio(1.0, 1.0), 1.00), "met")
        self.assertEqual(verdict(ratio(1.1, 1.0), 1.00), "missed")
        self.assertEqual(verdict(ratio(0.9, 1.0), 0.95, lower_is_better=False), "missed")
        self.assertEqual(verdict(ratio(2.0, 1.0), 1.00, lower_is_better=False), "met")
        self.assertEqual(verdict(ratio(None, 1.0), 1.00), "n/a")
        self.assertEqual(verdict(ratio(1.0, 0), 1.00), "n/a")

    def test_crossing(self):
        x, how = crossing([1000, 10000], [10.0, 1.0], [5.0, 5.0])
        self.assertTrue(1000 < x < 10000)
        self.assertEqual(how, "a above b before")
        self.assertIsNone(crossing([1, 2, 4], [3, 3, 3], [1, 1, 1]))
        self.assertIsNone(crossing([1, 2], [None, 3], [1, 1]))


class ParseTest(unittest.TestCase):
    def test_ucx_transports(self):
        self.assertEqual(runners._ucx_transports(UCX_LOG), {"tcp", "sysv", "posix"})
        self.assertFalse({"tcp", "sysv"} <= runners.UCX_ALLOWED["tcp"])
        self.assertTrue({"sysv", "posix"} <= runners.UCX_ALLOWED["sm"])

    def test_ucx_lanes_checked(self):
        self.assertEqual(runners.check_ucx_lanes(UCX_LOG.split("\n")[1], "tcp", "c"), {"tcp"})
        with self.assertRaisesRegex(runners.TransportError, r"UCX_TLS=tcp ran over \['posix'"):
            runners.check_ucx_lanes(UCX_LOG, "tcp", "c")
        with self.assertRaisesRegex(runners.TransportError, "reported no lanes"):
            runners.check_ucx_lanes("UCX  INFO  Version 1.13.1", "sm", "c")

    def test_transport_classes(self):
        self.assertEqual(plan.transport_class("ofi:tcp"), "tcp")
        self.assertEqual(plan.transport_class("ofi:tcp;ofi_rxm"), "tcp")
        self.assertEqual(plan.transport_class("ofi:shm"), "intra-host")
        # A fabric the harness has never heard of is compared intra-host.
        self.assertEqual(plan.transport_class("ipc"), "intra-host")
        self.assertEqual(plan.transport_class("verbs:rxe0"), "verbs")

    def test_plan_peers_and_their_runs(self):
        s = plan.Settings(full=False, rounds=1)
        groups = plan.build(s, ["ofi:tcp", "ipc"], {"ucx_perftest", "fi_pingpong"})
        cases = {c["key"]: c for g in groups for c in g}
        # ipc is intra-host: measured against libfabric's shm and UCX's sm.
        self.assertIn("lat|intra-host|fi_pingpong -p shm -e rdm|8", cases)
        self.assertIn("lat|intra-host|ucp_am_lat UCX_TLS=sm|8", cases)
        self.assertIn("lat|ipc|write_imm|8", cases)
        self.assertIn("rate|ipc|write_imm|8", cases)
        # UCX over tcp streams past its socket buffers; wimm and sm do not need to.
        self.assertEqual(cases["rate|tcp|ucp_am_bw UCX_TLS=tcp|8"]["iters"], 1000000)
        self.assertEqual(cases["rate|tcp|ucp_put_bw UCX_TLS=tcp|4096"]["iters"], 16384)
        self.assertEqual(cases["curve_bw|tcp|ucp_am_bw UCX_TLS=tcp|4194304"]["iters"], 32)
        self.assertEqual(cases["rate|intra-host|ucp_am_bw UCX_TLS=sm|8"]["iters"], s.rate_iters)
        self.assertEqual(cases["rate|ofi:tcp|write_imm|8"]["args"][-1], str(s.rate_iters))
        self.assertEqual(cases["lat|tcp|ucp_am_lat UCX_TLS=tcp|8"]["iters"], s.lat_iters)

    def test_write_atomic_only_where_the_fabric_has_atomics(self):
        s = plan.Settings(full=False, rounds=1)
        keys = {c["key"] for g in plan.build(s, ["ofi:tcp", "ipc"], set(), atomics=["ipc"])
                for c in g}
        self.assertIn("rate|ipc|write_atomic|8", keys)
        self.assertIn("rate|ipc|write_atomic|4096", keys)
        self.assertNotIn("rate|ofi:tcp|write_atomic|8", keys)
        self.assertIn("rate|ofi:tcp|write_poll|8", keys)
        # Without atomics (the default), the four other strategies only.
        keys = {c["key"] for g in plan.build(s, ["ipc"], set()) for c in g}
        self.assertFalse([k for k in keys if "write_atomic" in k])
        self.assertEqual(plan.strategies("ipc", ["ipc"])[-1], "write_atomic")
        # The guest's latency points take every strategy, write_atomic where it runs.
        guest = plan.Settings(full=False, rounds=5, guest=True)
        keys = {c["key"] for g in plan.build(guest, ["verbs:rxe0", "ipc"], set(),
                                              atomics=["verbs:rxe0"]) for c in g}
        self.assertIn("lat|verbs:rxe0|write_atomic|8", keys)
        self.assertNotIn("lat|ipc|write_atomic|8", keys)
        self.assertIn("lat|ipc|write_poll|8", keys)

    def test_latency_goals_runs_side_by_side(self):
        # perftest's tools each beside the strategy they are compared with.
        guest = plan.Settings(full=False, rounds=5, guest=True)
        groups = plan.build(guest, ["verbs:rxe0"], {"ib_send_lat", "ib_write_lat"},
                            atomics=["verbs:rxe0"])
        self.assertEqual([c["key"] for c in groups[0]],
                         ["lat|verbs|ib_send_lat|8", "lat|verbs:rxe0|write_imm|8",
                          "lat|verbs|ib_write_lat|8", "lat|verbs:rxe0|write_poll|8",
                          "lat|verbs:rxe0|send_imm|8", "lat|verbs:rxe0|write_atomic|8"])
        # Two peers of one strategy: the wimm run between them; a second
        # fabric's write_imm after the second peer, the other strategies last.
        s = plan.Settings(full=False, rounds=1)
        groups = plan.build(s, ["ofi:shm", "ipc"], {"fi_pingpong", "ucx_perftest"})
        self.assertEqual([c["key"] for c in groups[1]],
                         ["lat|intra-host|fi_pingpong -p shm -e rdm|1200",
                          "lat|ofi:shm|write_imm|1200",
                          "lat|intra-host|ucp_am_lat UCX_TLS=sm|1200",
                          "lat|ipc|write_imm|1200", "lat|ofi:shm|write_send|1200",
                          "lat|ipc|write_send|1200"])
        # No peer: wimm's cases as they were; every case once in any case.
        groups = plan.build(s, ["ofi:shm"], set())
        self.assertEqual([c["key"] for c in groups[1]],
                         ["lat|ofi:shm|write_imm|1200", "lat|ofi:shm|write_send|1200"])
        # The goals compare the same pairs the order puts side by side.
        self.assertEqual(plan.paired_op("ib_write_lat"), "write_poll")
        self.assertEqual(plan.paired_op("fi_pingpong"), "write_imm")

    def test_cpu_rates_beyond_a_fabric_not_run(self):
        s = plan.Settings(full=False, rounds=1)
        groups = plan.build(s, ["ofi:tcp", "ipc"], set())
        calibration = [
            {"ok": True, "kind": "rate", "fabric": "ofi:tcp", "op": "write_imm", "size": 8,
             "msg_rate": 240000.0},
            {"ok": True, "kind": "rate", "fabric": "ofi:tcp", "op": "write_poll", "size": 8,
             "msg_rate": 9e9},
            {"ok": False, "kind": "rate", "fabric": "ipc", "op": "write_imm", "size": 8}]
        # A second calibration run the host slowed does not lower the capacity.
        calibration.append(dict(calibration[0], msg_rate=50000.0))
        kept, dropped = plan.beyond_capacity(groups, calibration)
        keys = {c["key"] for g in kept for c in g}
        # ofi:tcp: 1M and 3M are above its 240000 msg/s, in every wait mode.
        self.assertEqual(sorted(dropped), sorted(
            f"cpu|ofi:tcp|{m}@{r}|8" for m in plan.WAIT_MODES for r in (1000000, 3000000)))
        self.assertIn("cpu|ofi:tcp|block@100000|8", keys)
        # ipc's calibration failed: nothing of it is left out.
        self.assertIn("cpu|ipc|spin@3000000|8", keys)
        self.assertEqual(sum(len(g) for g in kept) + len(dropped), sum(len(g) for g in groups))

    def test_backtrace_frames_left_out(self):
        text = "wimm:1 terminated with signal 11\n/lib/libfabric.so.1(+0xbb)[0x7f]\nend"
        self.assertEqual(runners._tail(text), "wimm:1 terminated with signal 11 | end")


class CountTest(unittest.TestCase):
    def test_count_lasts_the_seconds_rounded(self):
        # 123456 msg/s for 0.5 s: 61728, read as 62000.
        self.assertEqual(plan.count_for_seconds(123456, 10000, 0.5, 8), 62000)
        self.assertEqual(plan.count_for_seconds(2e6, 10000, 2.0, 8), 4000000)
        self.assertEqual(plan.count_for_seconds(1049, 20, 0.5, 8), 520)
        self.assertEqual(plan._round_count(99), 99)
        self.assertEqual(plan._round_count(1049, nearest=False), 1000)

    def test_never_fewer_than_planned(self):
        self.assertEqual(plan.count_for_seconds(5000, 10000, 0.5, 8), 10000)
        # The ucx tcp floor is the planned count: above the cap, it still stands.
        self.assertEqual(plan.count_for_seconds(1e8, 1000000, 0.5, 8, max_msgs=500000),
                         1000000)

    def test_caps_in_messages_and_bytes(self):
        self.assertEqual(plan.count_for_seconds(2e7, 10000, 0.5, 8), plan.RATE_MAX_MSGS)
        # 4 MiB messages: at most 4 GiB, 1024 messages, read as 1000.
        self.assertEqual(plan.count_for_seconds(3000, 32, 0.5, 4 * plan.MIB), 1000)
        self.assertEqual(plan.count_for_seconds(3000, 32, 0.5, 4 * plan.MIB,
                                                max_bytes=plan.MIB << 9), 120)

    def test_unknown_rate_keeps_planned(self):
        for rate in (None, 0, -1.0):
            self.assertEqual(plan.count_for_seconds(rate, 10000, 0.5, 8), 10000)

    def test_time_limit_of_a_sized_run(self):
        # 55000 messages at 110908 msg/s: 0.5 s expected, 250x that allowed.
        self.assertEqual(plan.timeout_for(55000, 110908, 120), 124)
        self.assertEqual(plan.timeout_for(10000, 1e6, 120), 120)
        self.assertEqual(plan.timeout_for(10000, None, 300), 300)

    def test_timed_cases_and_their_new_count(self):
        s = plan.Settings(full=False, rounds=5)
        groups = plan.build(s, ["ofi:tcp"], {"ucx_perftest", "fi_pingpong"})
        cases = {c["key"]: c for g in groups for c in g}
        self.assertEqual({c["kind"] for c in cases.values() if plan.timed(c)}, {"rate", "curve_bw"})
        case = cases["rate|ofi:tcp|write_imm|8"]
        sized = plan.with_count(case, 62000)
        self.assertEqual(sized["args"][sized["args"].index("-n") + 1], "62000")
        self.assertEqual((sized["iters"], sized["planned_iters"]), (62000, s.rate_iters))
        self.assertEqual(case["args"][-1], str(s.rate_iters))  # the plan's case is unchanged
        peer = cases["rate|tcp|ucp_am_bw UCX_TLS=tcp|8"]
        self.assertEqual(plan.with_count(peer, 2000000)["iters"], 2000000)
        self.assertEqual(plan.with_count(plan.with_count(peer, 3), 4)["planned_iters"], 1000000)
        self.assertNotIn("timeout", sized)
        self.assertEqual(plan.with_count(peer, 5, timeout=130)["timeout"], 130)


class ModelRunner:
    """A tool whose run costs FIXED_S plus PER_MSG_S a message (a short run
    reads as a low rate); the runs numbered in FAIL fail, those in SLOW take
    100x as long (the host was busy)."""

    def __init__(self, fixed_s, per_msg_s, fail=(), slow=()):
        self.fixed_s, self.per_msg_s, self.counts = fixed_s, per_msg_s, []
        self.fail, self.slow = fail, slow

    def execute(self, case, device):
        self.counts.append(case["iters"])
        if len(self.counts) in self.fail:
            raise runners.RunError("client exited 1")
        seconds = self.fixed_s + case["iters"] * self.per_msg_s
        return {"msg_rate": case["iters"] / (seconds * (100 if len(self.counts) in self.slow
                                                        else 1))}


class RepeatedCalibrationTest(unittest.TestCase):
    def case(self):
        s = plan.Settings(full=False, rounds=5)
        cases = [c for g in plan.build(s, ["ipc"], set()) for c in g]
        return next(c for c in cases if c["key"] == "rate|ipc|write_poll|8")

    def sized(self, runner):
        records, failed = [], {}
        sized = harness.calibrate_case(runner, self.case(), 0.5, None, failed, records)
        return sized, records

    def test_a_short_run_runs_again_with_its_count(self):
        # 8 ms of fixed cost, 25 M/s: 10000 messages read as 1.2 M/s, a
        # count of 600000 as 19 M/s (the cap of 5 M is less than 10x that).
        runner = ModelRunner(0.008, 4e-8)
        sized, records = self.sized(runner)
        self.assertEqual(runner.counts, [10000, 600000])
        self.assertEqual([r["chosen_iters"] for r in records], [600000, 5000000])
        self.assertTrue(all(r["calibration"] for r in records))
        self.assertEqual(sized["iters"], 5000000)
        self.assertEqual(sized["planned_iters"], 10000)
        self.assertEqual(sized["timeout"], records[-1]["chosen_timeout"])
        self.assertEqual(sized["args"][sized["args"].index("-n") + 1], "5000000")

    def test_a_long_enough_run_is_checked_once(self):
        runner = ModelRunner(0.0001, 1e-5)  # 100 k/s: 10000 messages last 0.1 s
        sized, records = self.sized(runner)
        self.assertEqual(runner.counts, [10000, 50000])
        self.assertEqual([r["chosen_iters"] for r in records], [50000, 50000])
        self.assertEqual(sized["iters"], 50000)

    def test_a_first_run_the_host_slowed_is_outgrown(self):
        # 5 M/s, but the first run took 100x as long: it chose 17000.
        runner = ModelRunner(0.001, 2e-7, slow=(1,))
        sized, records = self.sized(runner)
        self.assertEqual(runner.counts, [10000, 17000, 1900000])
        self.assertEqual([r["chosen_iters"] for r in records], [17000, 1900000, 2500000])
        self.assertEqual(sized["iters"], 2500000)

    def test_a_later_run_the_host_slowed_does_not_shrink_the_count(self):
        runner = ModelRunner(0.001, 2e-7, slow=(2,))
        sized, records = self.sized(runner)
        self.assertEqual(runner.counts, [10000, 1700000])
        self.assertEqual([r["chosen_iters"] for r in records], [1700000, 25000])
        self.assertEqual(sized["iters"], 1700000)
        self.assertEqual(sized["timeout"], records[0]["chosen_timeout"])

    def test_at_most_the_maximum_of_runs(self):
        # Every run lasts 40 ms whatever its count: it never settles.
        runner = ModelRunner(0.04, 0)
        sized, records = self.sized(runner)
        self.assertEqual(runner.counts, [10000, 120000, 1500000])
        self.assertEqual(len(runner.counts), plan.CALIBRATION_MAX_RUNS)
        self.assertEqual(sized["iters"], records[-1]["chosen_iters"])
        self.assertFalse(plan.calibrate_again(10, 1000, plan.CALIBRATION_MAX_RUNS))
        self.assertTrue(plan.calibrate_again(10, 10, 1))
        self.assertTrue(plan.calibrate_again(10, 101, 2))
        self.assertFalse(plan.calibrate_again(10, 100, 2))

    def test_a_failed_second_run_keeps_the_first_choice(self):
        runner = ModelRunner(0.008, 4e-8, fail=(2,))
        sized, records = self.sized(runner)
        self.assertEqual(runner.counts, [10000, 600000])
        self.assertEqual([r["ok"] for r in records], [True, False])
        self.assertEqual(records[1]["chosen_iters"], 600000)
        self.assertEqual(sized["iters"], 600000)

    def test_a_failed_first_run_keeps_the_planned_count(self):
        runner = ModelRunner(0.008, 4e-8, fail=(1,))
        sized, records = self.sized(runner)
        self.assertEqual(runner.counts, [10000])
        self.assertEqual((sized["iters"], sized["timeout"]), (10000, runners.RUN_TIMEOUT))


class StaleShmTest(unittest.TestCase):
    def test_only_regions_of_dead_processes_go(self):
        with tempfile.TemporaryDirectory() as d:
            # No process has pid 2^31 - 1 (pid_max is at most 2^22).
            for name in ("2147483647:0:0", f"{os.getpid()}:0:0", "ucx_shm_posix_1", "12ab:0"):
                open(os.path.join(d, name), "w").close()
            self.assertEqual(harness.clear_stale_shm(d), 1)
            self.assertEqual(sorted(os.listdir(d)),
                             sorted([f"{os.getpid()}:0:0", "ucx_shm_posix_1", "12ab:0"]))

    def test_a_missing_directory_is_nothing_to_do(self):
        self.assertEqual(harness.clear_stale_shm("/nonexistent/shm"), 0)


class StemTest(unittest.TestCase):
    def names(self, d, *names):
        for n in names:
            open(os.path.join(d, n), "w").close()

    def test_next_free_run(self):
        with tempfile.TemporaryDirectory() as d:
            self.names(d, "host-2026-12-01.json", "host-2026-12-01.md",
                       "host-2026-12-01-latency.png", "host-2026-12-01-run2.json",
                       "host-2026-12-01-run2.md", "host-2026-12-01-run2-bandwidth.png",
                       "softroce-2026-12-02.json")
            stem = harness.results_stem(d, "host-2026-12-01")
            self.assertEqual(stem, os.path.join(d, "host-2026-12-01-run3"))
            # Reserved: the next run, even before this one wrote anything, takes run4.
            self.assertTrue(os.path.exists(stem + ".json"))
            self.assertEqual(harness.results_stem(d, "host-2026-12-01"),
                             os.path.join(d, "host-2026-12-01-run4"))
            self.assertEqual(harness.results_stem(d, "softroce-2026-12-01"),
                             os.path.join(d, "softroce-2026-12-01"))

    def test_any_file_of_a_stem_takes_it(self):
        for left in ("host-d-cpu-bulk.png", "host-d.md", "host-d.json.tmp"):
            with tempfile.TemporaryDirectory() as d:
                self.names(d, left)
                self.assertEqual(harness.results_stem(d, "host-d"),
                                 os.path.join(d, "host-d-run2"), left)


@unittest.skipUnless(os.environ.get("WIMM"), "WIMM: the wimm executable (ctest sets it)")
class CalibrationTest(unittest.TestCase):
    def case(self, fabric):
        s = plan.Settings(full=False, rounds=5)
        groups = plan.build(s, [fabric], set())
        return [[c for g in groups for c in g if c["key"] == f"rate|{fabric}|write_imm|8"]]

    def test_calibration_sizes_the_rounds(self):
        with tempfile.TemporaryDirectory() as work:
            runner = harness.Runner(os.environ["WIMM"], work, "127.0.0.1")
            records, failed = [], {}
            groups = harness.calibrate(runner, self.case("ofi:tcp"), 0.2, None, failed, records)
        (case,), = groups
        # The planned count, then the count it chose (a third run only if that chose 10x more).
        self.assertIn(len(records), (2, 3))
        record = records[0]
        for r in records:
            self.assertTrue(r["ok"], r.get("error"))
            self.assertTrue(r["calibration"])
            self.assertEqual(r["chosen_iters"], plan.count_for_seconds(
                r["msg_rate"], 10000, 0.2, 8))
        self.assertEqual(record["iters"], 10000)
        self.assertEqual(records[1]["iters"], record["chosen_iters"])
        best = max(records, key=lambda r: (r["chosen_iters"], r["chosen_timeout"]))
        self.assertEqual(case["args"][case["args"].index("-n") + 1], str(case["iters"]))
        self.assertEqual(case["iters"], best["chosen_iters"])
        self.assertEqual(case["timeout"], best["chosen_timeout"])
        self.assertGreaterEqual(case["timeout"], runners.RUN_TIMEOUT)
        self.assertEqual((failed, runner.records), ({}, []))

    def test_failed_calibration_keeps_the_planned_count(self):
        with tempfile.TemporaryDirectory() as work:
            runner = harness.Runner(os.environ["WIMM"], work, "127.0.0.1")
            records, failed = [], {}
            groups = harness.calibrate(runner, self.case("nosuch:fabric"), 0.2, None, failed,
                                       records)
            harness.run_rounds(runner, groups, 5, None, failed=failed)
        (case,), = groups
        self.assertEqual((case["iters"], case["timeout"]), (10000, runners.RUN_TIMEOUT))
        self.assertFalse(records[0]["ok"])
        self.assertEqual(records[0]["chosen_iters"], 10000)
        self.assertIn("server did not start", records[0]["error"])
        # A server that did not start would not in later rounds either: they skip it.
        self.assertIn("rate|nosuch:fabric|write_imm|8", failed)
        self.assertEqual([(r["round"], r["ok"]) for r in runner.records],
                         [(n, False) for n in range(1, 6)])
        for r in runner.records:
            self.assertRegex(r["error"], "^skipped, as an earlier run timed out or did not "
                             "start: .*server did not start")


@unittest.skipUnless(os.environ.get("WIMM"), "WIMM: the wimm executable (ctest sets it)")
class WimmRunTest(unittest.TestCase):
    def test_fabric_other_than_asked_is_refused(self):
        # "auto" opens a real fabric and wimm names it: not the one asked for.
        with tempfile.TemporaryDirectory() as work:
            with self.assertRaisesRegex(runners.TransportError, "asked for auto"):
                runners.run_wimm(os.environ["WIMM"], work, "pingpong", "auto", ["-n", "100"])

    def test_atomics_asked_of_each_fabric(self):
        with tempfile.TemporaryDirectory() as work:
            runner = harness.Runner(os.environ["WIMM"], work, "127.0.0.1")
            have, lacking = harness.probe_atomics(runner, ["ipc", "ofi:tcp"])
        self.assertEqual(have, ["ipc"])
        self.assertEqual(list(lacking), ["ofi:tcp"])
        self.assertRegex(lacking["ofi:tcp"], r"^wimm: client: .*\(WIMM_E_NOTSUP\).*FI_ATOMIC")

    def test_failed_run_says_why(self):
        with tempfile.TemporaryDirectory() as work:
            with self.assertRaisesRegex(runners.RunError, "server did not start"):
                runners.run_wimm(os.environ["WIMM"], work, "pingpong", "nosuch:fabric",
                                 ["-n", "100"])


class UsageTest(unittest.TestCase):
    HARNESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness.py")

    def harness(self, env, *args):
        return subprocess.run([sys.executable, self.HARNESS] + list(args), capture_output=True,
                              text=True, env=dict(os.environ, **env), timeout=60)

    def test_too_few_rounds_refused(self):
        for rounds in ("3", "x"):
            done = self.harness({"BENCH_ROUNDS": rounds}, "--build", "/nonexistent")
            self.assertEqual(done.returncode, 2)
            self.assertIn(f"BENCH_ROUNDS={rounds!r}: give a number of at least 5", done.stderr)

    def test_bad_only_refused(self):
        done = self.harness({}, "--only", "rate|(", "--build", "/nonexistent")
        self.assertEqual(done.returncode, 2)
        self.assertIn("--only: not a regular expression: 'rate|('", done.stderr)

    @unittest.skipUnless(os.environ.get("WIMM"), "WIMM: the wimm executable (ctest sets it)")
    def test_only_matching_nothing_refused(self):
        build = os.path.dirname(os.path.dirname(os.path.abspath(os.environ["WIMM"])))
        with tempfile.TemporaryDirectory() as out:
            done = self.harness({}, "--only", "^nosuch\\|", "--build", build, "--out", out)
            self.assertEqual(os.listdir(out), [])  # refused before any run or file
        self.assertEqual(done.returncode, 2)
        self.assertIn("--only '^nosuch\\|': no case matches (keys look like", done.stderr)

    def test_narrowed_to_the_matching_cases(self):
        groups = plan.build(plan.Settings(False, 5), ["ofi:tcp", "ipc"], {"ucx_perftest"})
        only = harness.only_filter(r"^rate\|(ipc\|write_imm|intra-host\|ucp_am_bw.*)\|8$")
        self.assertEqual([[c["key"] for c in g] for g in harness.narrow(groups, only)],
                         [["rate|ipc|write_imm|8", "rate|intra-host|ucp_am_bw UCX_TLS=sm|8"]])
        self.assertIs(harness.narrow(groups, None), groups)

    def test_missing_build_named(self):
        done = self.harness({}, "--build", "/nonexistent")
        self.assertEqual(done.returncode, 1)
        self.assertIn("no wimm executable under /nonexistent", done.stderr)


class ScriptedLevels(harness.Runner):
    """A runner whose probe reads LEVELS in turn and whose runs all succeed."""

    def __init__(self, levels):
        super().__init__("wimm", "/nonexistent", "127.0.0.1")
        self.levels = iter(levels)

    def host_line(self):
        return next(self.levels)

    def execute(self, case, device):
        return {"avg_us": 1.0}


class HostLineTest(unittest.TestCase):
    """The host's level: wimm_line_probe, its record beside each run, its table."""

    def probe(self):
        wimm = os.environ.get("WIMM")
        path = wimm and os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(wimm))),
                                     "bench", "wimm_line_probe")
        if not path or not os.access(path, os.X_OK):
            self.skipTest("no wimm_line_probe beside $WIMM (ctest sets it)")
        return path

    def test_the_probe_measures_a_round_trip(self):
        ns = runners.run_line_probe(self.probe(), ms=5)
        self.assertIsNotNone(ns)
        self.assertGreaterEqual(ns, 10.0)

    def test_a_probe_that_fails_is_no_figure(self):
        self.assertIsNone(runners.run_line_probe("/bin/false"))
        self.assertIsNone(runners.run_line_probe("/nonexistent/wimm_line_probe"))

    def test_each_run_of_a_round_carries_the_level_before_it(self):
        r = ScriptedLevels([100.0, 500.0, 110.0, 520.0])
        cases = [{"key": "a", "tool": "wimm"}, {"key": "b", "tool": "fi_pingpong"}]
        harness.run_rounds(r, [cases], 2, None)
        # Round 2 runs the group in reverse order.
        self.assertEqual([(x["key"], x["round"], x["host_line_ns"]) for x in r.records],
                         [("a", 1, 100.0), ("b", 1, 500.0), ("b", 2, 110.0), ("a", 2, 520.0)])

    def test_a_case_with_more_rounds_runs_on_alone(self):
        r = ScriptedLevels([100.0] * 8)
        lat = [{"key": "lat-w", "tool": "wimm", "rounds": 3},
               {"key": "lat-p", "tool": "fi_pingpong", "rounds": 3}]
        harness.run_rounds(r, [lat, [{"key": "rate-w", "tool": "wimm"}]], 2, None)
        self.assertEqual([(x["key"], x["round"]) for x in r.records],
                         [("lat-w", 1), ("lat-p", 1), ("rate-w", 1),
                          ("lat-p", 2), ("lat-w", 2), ("rate-w", 2),
                          ("lat-w", 3), ("lat-p", 3)])
        self.assertEqual(harness.total_runs([lat, [{"key": "rate-w"}]], 2), 8)

    def test_the_latency_goals_have_three_times_the_rounds(self):
        host, guest = plan.Settings(False, 5), plan.Settings(False, 5, guest=True)
        self.assertEqual((host.lat_rounds, guest.lat_rounds), (15, 15))
        groups = plan.build(host, ["ipc"], {"fi_pingpong"})
        rounds = {c["key"]: c.get("rounds", 5) for g in groups for c in g}
        self.assertEqual(rounds["lat|ipc|write_imm|8"], 15)
        self.assertEqual(rounds["lat|intra-host|fi_pingpong -p shm -e rdm|8"], 15)
        self.assertEqual(rounds["curve_lat|ipc|write_imm|1"], 5)
        self.assertEqual(rounds["rate|ipc|write_imm|8"], 5)

    def test_a_run_waits_while_a_cpu_is_taken(self):
        # Busy twice, then a level: the run starts after two pauses.
        self.assertEqual(ScriptedLevels([2e6, 1.2e6, 130.0]).settle(pause=0), (130.0, [2e6, 1.2e6]))
        # Busy every time: it starts after TRIES pauses, the last figure kept.
        self.assertEqual(ScriptedLevels([9e5] * 4).settle(tries=3, pause=0), (9e5, [9e5] * 3))
        # No probe: no figure, no wait.
        self.assertEqual(ScriptedLevels([None]).settle(pause=0), (None, []))

    def test_the_report_shows_the_level_per_round(self):
        runs = []
        for rnd, (w, p) in enumerate(((120.0, 121.0), (510.0, 130.0)), start=1):
            runs.append(run("lat|ipc|write_imm|8", "lat", rnd, avg_us=1.0 * rnd, host_line_ns=w))
            runs.append(run("lat|shm|fi|8", "lat", rnd, tool="fi_pingpong", avg_us=2.0,
                            host_line_ns=p))
        row = {"goal": "latency 8 B", "fabric": "ipc", "keys": ("lat|ipc|write_imm|8",
                                                                 "lat|shm|fi|8"),
               "field": "avg_us"}
        text = report.host_detail(Index(runs), [row, {"goal": "bandwidth"}])
        self.assertIn("| latency 8 B | ipc | 0.50x: 120 / 121, 1.00x: 510 / 130 |", text)
        self.assertIn("before each of 4 runs: median 126 ns, 120-510 ns", report.host_line(runs))
        self.assertNotIn("waited", report.host_line(runs))
        runs[0]["host_busy_ns"] = [2e6]
        self.assertIn("1 runs first waited", report.host_line(runs))
        self.assertIsNone(report.host_line([run("k", "lat", 1, avg_us=1.0)]))
        self.assertIsNone(report.host_detail(Index([]), [row]))


class ReportTest(unittest.TestCase):
    def test_report_of_a_results_file(self):
        settings = plan.Settings(False, 5)
        settings.lat_sizes, settings.curve_sizes = [8, 1200], [65536]
        meta = {"date": "d", "machine": {"cpu": "c", "cores": 2, "kernel": "k", "note": ""},
                "load_before": "1", "load_after": "2", "versions": {}, "peers": ["fi_pingpong"],
                "settings": settings.describe(), "fabrics": ["ofi:tcp"],
                "unusable": {"ofi:sockets": "wimm: client: timed out"}}
        runs = []
        for rnd in range(1, 6):
            for size in (8, 1200):
                runs.append(run(f"lat|ofi:tcp|write_imm|{size}", "lat", rnd, fabric="ofi:tcp",
                                cls="tcp", size=size, label="write_imm", avg_us=4.0 + rnd,
                                median_us=4.0))
                runs.append(run(f"lat|tcp|fi_pingpong -p tcp -e msg|{size}", "lat", rnd,
                                tool="fi_pingpong", cls="tcp", size=size,
                                label="fi_pingpong -p tcp -e msg", avg_us=8.0))
            runs.append(run("rate|ofi:tcp|write_imm|8", "rate", rnd, fabric="ofi:tcp", cls="tcp",
                            size=8, op="write_imm", label="write_imm", msg_rate=1e6 * rnd))
            runs.append(run("lat|ofi:tcp|write_send|1200", "lat", rnd, fabric="ofi:tcp",
                            cls="tcp", size=1200, label="write_send", ok=rnd != 3,
                            median_us=6.0, error="wimm: client: the peer left"))
        ix = Index(runs)
        rows = goals.latency(ix, meta)
        self.assertEqual([r["verdict"] for r in rows], ["met", "met"])
        # A fabric without atomics has no write_atomic row; one with them has.
        self.assertNotIn("write_atomic", {r["op"] for r in goals.rates(ix, meta)})
        with_atomics = dict(meta, atomics=["ofi:tcp"])
        self.assertIn("write_atomic", {r["op"] for r in goals.rates(ix, with_atomics)})
        meta = dict(meta, atomics=[], no_atomics={
            "ofi:tcp": "wimm rate: client 1, server 1: operation not supported by this "
                       "fabric (WIMM_E_NOTSUP)"})
        self.assertAlmostEqual(rows[0]["ratio"], 7.0 / 8.0)
        # Round by round, wimm's (4 + round) against the peer's 8.
        self.assertEqual(rows[0]["rounds"], [(4.0 + k) / 8.0 for k in range(1, 6)])
        claim = goals.write_send_claim(ix, meta)[0]
        self.assertEqual((claim["ratio"], claim["verdict"]), (1.5, "holds"))
        calibration = [dict(run("rate|ofi:tcp|write_imm|8", "rate", None, msg_rate=123456.0),
                            iters=10000, chosen_iters=62000, calibration=True),
                       dict(run("rate|ofi:tcp|send_imm|8", "rate", None, ok=False,
                                error="wimm: client: the peer left | wimm: server: gone"),
                            iters=10000, chosen_iters=10000, calibration=True)]
        with tempfile.TemporaryDirectory() as d:
            stem = os.path.join(d, "t")
            with open(stem + ".json", "w") as f:
                json.dump({"meta": meta, "calibration": calibration, "runs": runs}, f)
            with open(stem + ".json") as f:
                text = report.render(json.load(f), stem)
            self.assertTrue(os.path.exists(stem + "-latency.png"))
        self.assertIn("| latency 8 B, write_imm vs fi_pingpong -p tcp -e msg (avg/avg) | ofi:tcp"
                      " | 7.00 µs | 8.00 (fi_pingpong -p tcp -e msg) | 0.88x"
                      " | 0.62, 0.75, 0.88, 1.00, 1.12 | ≤ 1.00x | **met** |", text)
        self.assertIn("1 of 5 runs failed: wimm: client: the peer left", text)
        self.assertIn("fabric ofi:sockets: unusable, not measured: wimm: client: timed out", text)
        self.assertIn("runs on the fabrics with atomics: none. ofi:tcp: wimm rate: client 1, "
                      "server 1: operation not supported by this fabric (WIMM_E_NOTSUP).", text)
        self.assertIn("the rate and bandwidth runs were sized to about 0.5 s each by the "
                      "largest count its calibration runs chose (the planned count, then the "
                      "count that run chose, and once more when the second chose more than 10x "
                      "its own), never fewer than the planned count", text)
        self.assertIn("| rate\\|ofi:tcp\\|write_imm\\|8 | 10000 | 123456 | 62000 |", text)
        self.assertIn("| rate\\|ofi:tcp\\|send_imm\\|8 | 10000 | failed: wimm: client: the "
                      "peer left \\| wimm: server: gone | 10000 |", text)
        # The median of the rounds (1..5 M/s): the calibration run's 0.123 M/s is in none.
        self.assertIn("| ofi:tcp | 8 | write_imm | 3.000 |", text)
        # A results file of before the calibration runs says its counts were fixed.
        old = {k: v for k, v in meta["settings"].items()
               if k not in ("rate_seconds", "rate_max_msgs", "rate_max_bytes")}
        self.assertIn("Counts: fixed per case", report.header(dict(meta, settings=old)))
        # One of before the repeated calibration runs, that it had one per case.
        once = {k: v for k, v in meta["settings"].items() if not k.startswith("calibration_")}
        self.assertIn("0.5 s each by one calibration run of the planned count, never fewer",
                      report.header(dict(meta, settings=once)))
        # The run of 2026-12-06 00:04 UTC, where the last calibration run decided.
        last = {k: v for k, v in meta["settings"].items() if k != "calibration_min_runs"}
        self.assertIn("at most 3 runs, the last one deciding), never fewer",
                      report.header(dict(meta, settings=last)))
        # The order: side by side only where the results file says so.
        side = "a latency goal's two runs side by side"
        self.assertNotIn(side, report.header(meta))
        self.assertIn(f"in turn, {side}, the order reversed",
                      report.header(dict(meta, side_by_side=True)))


if __name__ == "__main__":
    unittest.main()
