#!/usr/bin/python3
"""The report of one results file: markdown tables with the verdicts and PNG
plots of the curves, beside the JSON.

  report.py RESULTS.json     writes RESULTS.md and RESULTS-*.png, prints the markdown
"""
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import goals  # noqa: E402
from plan import BUSY_LINE_NS, BUSY_PAUSE_S, BUSY_TRIES, WAIT_MODES, transport_class  # noqa: E402
from stats import Index  # noqa: E402


def num(v, digits=2, scale=1.0):
    return "n/a" if v is None else f"{v * scale:.{digits}f}"


def size_label(n):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def table(head, rows, align=None):
    align = align or "l" + "r" * (len(head) - 1)
    out = ["| " + " | ".join(head) + " |",
           "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


UNIT_SCALE = {"µs": (1.0, 2), "Mmsg/s": (1e-6, 3), "GB/s": (1e-9, 2)}


def goal_table(rows):
    out = []
    for r in rows:
        scale, digits = UNIT_SCALE[r["unit"]]
        sign = "≤" if r["lower"] else "≥"
        out.append((r["goal"], r["fabric"], f"{num(r['wimm'], digits, scale)} {r['unit']}",
                    f"{num(r['peer'], digits, scale)} ({r['peer_label']})",
                    num(r["ratio"]) + "x" if r["ratio"] is not None else "n/a",
                    ", ".join(num(x) for x in r["rounds"]) or "n/a",
                    f"{sign} {r['target']:.2f}x", f"**{r['verdict']}**"))
    return table(("goal", "fabric", "wimm", "peer", "ratio", "per round", "target", "verdict"),
                 out, "lllrrrll")


def version_of(text):
    """The first dotted version number in a tool's --version output."""
    m = re.search(r"\d+\.\d+(\.\d+)?", text)
    return m.group(0) if m else text


def header(meta):
    m = meta["machine"]
    s = meta["settings"]
    mode = "BENCH_FULL (long curves)" if s["full"] else "quick default (BENCH_FULL=1: long curves)"
    where = "Soft-RoCE guest (QEMU TCG), two processes on the rxe device's address" \
        if s["guest"] else "two processes on 127.0.0.1"
    lines = [f"## wimm vs peers, like for like ({meta['date']})", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, Linux {m['kernel']}; load average "
             f"before / after: {meta['load_before']} / {meta.get('load_after', '?')}."
             + (f" {m['note']}." if m.get("note") else ""),
             f"Run: {mode}, {s['rounds']} interleaved rounds"
             + (f", {s['lat_rounds']} for the latency goals"
                if s.get("lat_rounds", s["rounds"]) != s["rounds"] else "")
             + " (wimm's runs and the peers' in turn, "
             + ("a latency goal's two runs side by side, " if meta.get("side_by_side") else "")
             + f"the order reversed every other round), {meta.get('minutes', '?')} min; "
             f"{where}. Each figure is the median over the rounds of each run's figure; every "
             "run is in the JSON file beside this one.",
             "Versions: " + ", ".join(f"{k} {version_of(v)}"
                                      for k, v in meta["versions"].items()) + ".",
             "Like for like: fi_pingpong prints only an average, so wimm's average is compared "
             "with it (avg/avg); ucx_perftest and perftest print a median (50.0%ile, "
             "t_typical), compared with wimm's median (median/median). All latencies are "
             "one-way: each tool's round trip / 2. Rates are messages/s; bandwidth is bytes/s "
             "computed from each tool's own unit (UCX MB = 2^20, fi_pingpong and wimm "
             "MB = 10^6, perftest from its message rate)."]
    lines.append(counts_line(s))
    if meta.get("only"):
        lines.append(f"Narrowed to the cases whose key matches `{meta['only']}` (--only).")
    if meta.get("clocksource"):
        lines.append(f"Guest clocksource: {meta['clocksource']}.")
    if meta.get("aborted"):
        lines.append(f"**The run was aborted:** {meta['aborted']}")
    return "\n".join(lines)


def counts_line(s):
    """How the runs' message counts were chosen, from the settings."""
    if "rate_seconds" not in s:  # a results file of before the calibration runs
        return "Counts: fixed per case (bench/plan.py), the same in every round."
    if "calibration_min_runs" in s:
        how = (f"the largest count its calibration runs chose (the planned count, then the "
               f"count that run chose, and once more when the second chose more than "
               f"{s['calibration_growth']}x its own)")
    elif "calibration_max_runs" in s:  # 2026-12-06 00:04 UTC: the last run decided
        how = (f"calibration runs (one of the planned count; another of the count it chose "
               f"when that was more than {s['calibration_growth']}x its own, at most "
               f"{s['calibration_max_runs']} runs, the last one deciding)")
    else:  # a results file of before the repeated calibration runs
        how = "one calibration run of the planned count"
    return (f"Counts: latency runs a fixed count per case; the rate and bandwidth runs were "
            f"sized to about {s['rate_seconds']:g} s each by {how}, never fewer than the "
            f"planned count and at most {s['rate_max_msgs']} messages and "
            f"{size_label(s['rate_max_bytes'])} per run, the same count in every round. The "
            "calibration runs are in the JSON (`\"calibration\": true`), in no median.")


def cell(text):
    """TEXT in a table cell: a | of a case key or a tool's message would end it."""
    return str(text).replace("|", "\\|")


def calibration_detail(records):
    rows = []
    for r in records:
        measured = num(r.get("msg_rate"), 0) if r.get("ok") else \
            f"failed: {last_line(r.get('error'))[:80]}"
        rows.append((cell(r["key"]), r["iters"], cell(measured), r["chosen_iters"]))
    return table(("case", "calibration messages", "calibration msg/s", "messages per round"),
                 rows, "lrrr") if rows else "- none"


def latency_detail(ix, meta):
    rows = []
    for c in sorted(ix.cases("lat"), key=lambda c: (c.get("fabric", c["cls"]), c["size"])):
        ok, n = ix.count(c["key"])
        who = c["fabric"] if c["tool"] == "wimm" else c["cls"]
        rows.append((who, c["size"], c["label"], num(ix.median(c["key"], "median_us")),
                     num(ix.median(c["key"], "avg_us")), f"{ok}/{n}"))
    return table(("fabric / class", "bytes", "tool", "median µs", "avg µs", "runs ok"), rows,
                 "lrlrrr")


def host_lines(runs):
    """Every run's host cache-line round trip (ns), in run order."""
    return [r["host_line_ns"] for r in runs if r.get("host_line_ns") is not None]


def host_line(runs):
    """The sentence on the host's level over the whole run, or None."""
    lines = host_lines(runs)
    if not lines:
        return None
    waited = sum(1 for r in runs if r.get("host_busy_ns"))
    return (f"The host: a cache line's round trip between two processes, measured "
            f"(`wimm_line_probe`, 20 ms) before each of {len(lines)} runs: median "
            f"{statistics.median(lines):.0f} ns, {min(lines):.0f}-{max(lines):.0f} ns. On a VM "
            "the host places the two vCPUs near or far from one run to the next, and every "
            "intra-host latency moves with it (below: each latency goal's rounds)."
            + (f" {waited} runs first waited ({BUSY_PAUSE_S} s at a time, at most {BUSY_TRIES} "
               f"times) while a probe took {BUSY_LINE_NS / 1000:.0f} µs or more: another "
               "process held a CPU." if waited else ""))


def host_detail(ix, rows):
    """Per latency goal and round: the round's ratio, and the host's line
    round trip before wimm's run and before the peer's."""
    out = []
    for r in rows:
        if "keys" not in r:
            continue
        wkey, pkey = r["keys"]
        w, p = ix.by_round(wkey, "host_line_ns"), ix.by_round(pkey, "host_line_ns")
        ratios = ix.round_ratio_map(wkey, pkey, r["field"])
        cells = [f"{num(ratios.get(k))}x: {num(w.get(k), 0)} / {num(p.get(k), 0)}"
                 for k in sorted(set(w) | set(p) | set(ratios))]
        if w or p:
            out.append((r["goal"], r["fabric"], ", ".join(cells)))
    if not out:
        return None
    return table(("goal", "fabric", "per round: wimm / peer, then the host's line round trip "
                  "(ns) before wimm's run / before the peer's"), out, "lll")


def rate_detail(rows):
    out = []
    for r in rows:
        peers = ", ".join(f"{k} {num(v, 3, 1e-6)}" for k, v in r.get("peers", {}).items())
        out.append((r["fabric"], r["size"], r["op"], num(r["wimm"], 3, 1e-6), peers or "n/a",
                    num(r["ratio"]) + "x" if r["ratio"] else "n/a",
                    ", ".join(num(x) for x in r["rounds"]) or "n/a", f"**{r['verdict']}**"))
    return table(("fabric", "bytes", "strategy", "wimm Mmsg/s", "peers Mmsg/s", "vs best",
                  "per round", "≥ 1.00x"), out, "lrlrlrrl")


def curve_tables(ix, meta, kind, field, scale, digits, unit):
    out = []
    for fabric in meta["fabrics"]:
        sizes, curves = goals.curve(ix, meta, kind, fabric, field)
        head = ["bytes"] + [f"{k} {unit}" for k in curves]
        rows = [[size_label(s)] + [num(v[i], digits, scale) for v in curves.values()]
                for i, s in enumerate(sizes)]
        out.append(f"{fabric}:\n\n" + table(head, rows))
    return "\n\n".join(out)


def cpu_detail(ix, meta):
    rows, notes = [], []
    for fabric in meta["fabrics"]:
        rates, curves = goals.cpu_curves(ix, meta, fabric)
        for mode in WAIT_MODES:
            rows.append([fabric, mode] + [num(v) for v in curves[mode]])
    for c in goals.cpu_crossings(ix, meta):
        if c["crossing"] is None:
            notes.append(f"- {c['fabric']}: {c['a']} and {c['b']} do not cross between "
                         f"{meta['settings']['cpu_rates'][0]} and "
                         f"{meta['settings']['cpu_rates'][-1]} msg/s")
        else:
            x, how = c["crossing"]
            first = c["a"] if how.startswith("a above") else c["b"]
            notes.append(f"- {c['fabric']}: {c['a']} and {c['b']} cross at about {x:.0f} "
                         f"msg/s ({first} costs more CPU below it)")
    head = ["fabric", "wait"] + [f"{r} msg/s" for r in meta["settings"]["cpu_rates"]]
    return table(head, rows, "ll" + "r" * len(meta["settings"]["cpu_rates"])) + "\n\n" + \
        "\n".join(notes)


def bulk_detail(rows, meta):
    out, notes = [], []
    for r in rows:
        each_t, each_c = r["series"]["each"]
        last_t, last_c = r["series"]["last"]
        for i, chunk in enumerate(r["chunks"]):
            out.append((r["fabric"], size_label(chunk), num(each_t[i]), num(last_t[i]),
                        num(each_c[i]), num(last_c[i])))
        for what, x in (("completion time", r["time_crossing"]),
                        ("receiver CPU", r["cpu_crossing"])):
            if x is None:
                notes.append(f"- {r['fabric']}: per-chunk and final-doorbell {what} do not "
                             "cross in the measured chunk sizes")
            else:
                notes.append(f"- {r['fabric']}: {what} curves cross at a chunk of about "
                             f"{size_label(int(x[0]))}")
    head = ("fabric", "chunk", "each ms", "last ms", "each rx CPU ms", "last rx CPU ms")
    return f"{size_label(meta['settings']['bulk_size'])} per transfer; `each`: a write_imm " \
        "per chunk, `last`: plain writes + one write_imm; time per transfer (median of the " \
        "run's transfers) and receiver CPU per transfer (getrusage).\n\n" + \
        table(head, out) + "\n\n" + "\n".join(notes)


def atomics_note(meta):
    """Which fabrics measured write_atomic (a plain write, then a fetch-and-add
    on a signal word the receiver polls), and why the others did not."""
    if "atomics" not in meta:
        return "`write_atomic` was not measured in this run (the harness did not yet ask " \
            "the fabrics for atomics)."
    have = ", ".join(meta["atomics"]) or "none"
    text = f"`write_atomic` (a plain write, then a fetch-and-add on a signal word that the " \
        f"receiver polls) runs on the fabrics with atomics: {have}."
    for fabric, why in meta.get("no_atomics", {}).items():
        text += f" {fabric}: {last_line(why)}."
    return text


def last_line(text):
    lines = (text or "").strip().splitlines()
    return lines[-1][:300] if lines else "(no message)"


def failures(ix, meta):
    lines = [f"- fabric {f}: unusable, not measured: {last_line(e)}"
             for f, e in meta.get("unusable", {}).items()]
    for key, runs in ix.by_key.items():
        ok, n = ix.count(key)
        if ok < n:
            lines.append(f"- {key}: {n - ok} of {n} runs failed: "
                         f"{last_line(ix.error(key))}")
    return "\n".join(lines) if lines else "- none"


def _line(ax, xs, ys, scale=1.0, **style):
    pts = [(x, y * scale) for x, y in zip(xs, ys) if y is not None]
    if pts:
        ax.plot(*zip(*pts), marker="o", **style)


def _axes(ax, title, xlabel, ylabel, base=10):
    ax.set_xscale("log", base=base)
    ax.set_yscale("log")
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def plots(ix, meta, stem):
    """PNG files of the curves; returns their names."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = []
    classes = sorted({transport_class(f) for f in meta["fabrics"]})
    for kind, field, scale, ylabel, tag in (
            ("curve_lat", "median_us", 1.0, "one-way latency, µs (median; fi_pingpong: avg)",
             "latency"),
            ("curve_bw", "bw_Bps", 1e-9, "bandwidth, GB/s", "bandwidth")):
        fig, axes = plt.subplots(1, len(classes), figsize=(6.5 * len(classes), 4.5),
                                 squeeze=False)
        for ax, cls in zip(axes[0], classes):
            drawn = set()
            for fabric in [f for f in meta["fabrics"] if transport_class(f) == cls]:
                sizes, curves = goals.curve(ix, meta, kind, fabric, field)
                if kind == "curve_lat":
                    # wimm's average too, the statistic fi_pingpong prints.
                    _, avg = goals.curve(ix, meta, kind, fabric, "avg_us")
                    curves[f"wimm {fabric} (avg)"] = avg[f"wimm {fabric}"]
                for label, ys in curves.items():
                    if label in drawn:
                        continue
                    drawn.add(label)
                    _line(ax, sizes, ys, scale, ms=3, label=label,
                          ls=(":" if label.endswith("(avg)") else "-")
                          if label.startswith("wimm") else "--")
            _axes(ax, f"{tag}: {cls}", "message size, bytes", ylabel, base=2)
        fig.tight_layout()
        names.append(f"{os.path.basename(stem)}-{tag}.png")
        fig.savefig(f"{stem}-{tag}.png", dpi=110)
        plt.close(fig)
    fabrics = meta["fabrics"]
    fig, axes = plt.subplots(2, len(fabrics), figsize=(5 * len(fabrics), 7.5), squeeze=False)
    for col, fabric in enumerate(fabrics):
        rates, curves = goals.cpu_curves(ix, meta, fabric)
        ax = axes[0][col]
        for mode, ys in curves.items():
            _line(ax, rates, ys, label=mode)
        _axes(ax, f"receiver CPU per doorbell: {fabric}", "offered doorbells/s",
              "µs of CPU per doorbell")
        ax = axes[1][col]
        for r in goals.bulk(ix, meta):
            if r["fabric"] != fabric:
                continue
            for notify in ("each", "last"):
                t, c = r["series"][notify]
                for ys, style, what in ((t, "-", "time"), (c, ":", "rx CPU")):
                    _line(ax, r["chunks"], ys, ls=style, label=f"{notify}: {what}")
        _axes(ax, f"{size_label(meta['settings']['bulk_size'])} transfer: {fabric}",
              "chunk, bytes", "ms per transfer", base=2)
    fig.tight_layout()
    names.append(f"{os.path.basename(stem)}-cpu-bulk.png")
    fig.savefig(f"{stem}-cpu-bulk.png", dpi=110)
    plt.close(fig)
    return names


def render(data, stem):
    meta, ix = data["meta"], Index(data["runs"])
    rate_rows = goals.rates(ix, meta)
    verdicts = goals.latency(ix, meta) + goals.bandwidth(ix, meta)
    met = sum(1 for r in verdicts + rate_rows if r["verdict"] == "met")
    missed = sum(1 for r in verdicts + rate_rows if r["verdict"] == "missed")
    claim_a = goals.write_send_claim(ix, meta)
    parts = [header(meta),
             f"### Verdicts: {met} met, {missed} missed (the goals below and the message rates "
             "after them)",
             goal_table(verdicts),
             "The ratio and the verdict are those of the medians over the rounds; `per round` "
             "is wimm's figure over the peer's in each round, for the rounds both have. The two "
             "runs of one round are seconds to minutes apart: on a host whose speed changes "
             "between them, the rounds show it where the medians cannot.",
             *[x for x in (host_line(data["runs"]), host_detail(ix, verdicts)) if x],
             "### Message rate of the strategies vs the rate peers (msg/s, median of rounds)",
             "A `ucp_put_bw` put tells the receiver nothing (only the sender's final flush "
             "completes), like `write_poll`; a `ucp_am_bw` message runs a handler at the "
             "receiver, like a `write_imm` doorbell; `ib_write_bw` and `ib_send_bw` likewise. "
             "The verdict compares each strategy with the best of them, as the goal says. "
             "wimm's clock stops when the receiver has acknowledged the last message, "
             "ucx_perftest's when its sender has handed the last one to the transport: its "
             "tcp runs therefore send at least 64 MiB (at most 1M messages), so that the "
             "socket buffers hold a small part of the run (docs/performance.md).",
             atomics_note(meta),
             rate_detail(rate_rows),
             "### Latency at the goal sizes, every run's median and average (µs, one-way)",
             latency_detail(ix, meta),
             "### Claim (a): write_send / write_imm latency at 1200 B (median/median)",
             table(("fabric", "write_send µs", "write_imm µs", "ratio", "claim: write_send "
                    "slower (> 1.00x)"),
                   [(r["fabric"], num(r["write_send"]), num(r["write_imm"]),
                     num(r["ratio"]) + "x" if r["ratio"] else "n/a", f"**{r['verdict']}**")
                    for r in claim_a], "lrrrl"),
             "### Claim (b): a bulk transfer, a doorbell per chunk vs plain writes + one",
             bulk_detail(goals.bulk(ix, meta), meta),
             "### Receiver CPU per doorbell (µs) at fixed offered rates, write_imm 8 B",
             "getrusage of the receiver process over the timed round divided by its doorbells; "
             "a rate the fabric did not sustain (achieved < 0.9x offered), or above its "
             "write_imm 8 B rate in calibration (not run), shows n/a.",
             cpu_detail(ix, meta),
             "### Latency curves, write_imm (one-way µs; wimm median, peers their own "
             "statistic: fi_pingpong avg, UCX median)",
             curve_tables(ix, meta, "curve_lat", "median_us", 1.0, 2, "µs"),
             "### Bandwidth curves, write_imm stream (GB/s)",
             curve_tables(ix, meta, "curve_bw", "bw_Bps", 1e-9, 3, "GB/s")]
    if meta["fabrics"]:
        names = plots(ix, meta, stem)
        parts.append("### Plots\n\n" + "\n".join(f"![{n}]({n})" for n in names))
    if "rate_seconds" in meta["settings"]:
        parts += ["### Counts of the rate and bandwidth runs, from their calibration runs",
                  calibration_detail(data.get("calibration", []))]
    parts += ["### Failed runs and unusable fabrics", failures(ix, meta)]
    return "\n\n".join(parts) + "\n"


def write(stem):
    with open(stem + ".json") as f:
        data = json.load(f)
    text = render(data, stem)
    with open(stem + ".md", "w") as f:
        f.write(text)
    sys.stdout.write(text)


def main():
    if len(sys.argv) != 2 or not sys.argv[1].endswith(".json"):
        print(__doc__, file=sys.stderr)
        return 2
    write(sys.argv[1][:-len(".json")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
