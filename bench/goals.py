"""The goals of issue 7 as computations over the rounds: each row names the
statistic on both sides, the ratio of the medians over the rounds, the
target, and the verdict the numbers give (met / missed / n/a)."""
from plan import WAIT_MODES, latency_peers, paired_op, rate_peers, strategies, transport_class
from stats import crossing, ratio, verdict

# The statistic each latency peer prints, and wimm's figure compared with it.
LAT_STAT = {"fi_pingpong": ("avg_us", "avg/avg"), "ucx_perftest": ("median_us", "median/median"),
            "ib_send_lat": ("median_us", "median/median"),
            "ib_write_lat": ("median_us", "median/median")}


def _row(goal, fabric, w, w_stat, p, p_label, target, lower=True, unit="µs", rounds=None):
    r = ratio(w, p)
    return {"goal": goal, "fabric": fabric, "wimm": w, "wimm_stat": w_stat, "peer": p,
            "peer_label": p_label, "ratio": r, "target": target, "lower": lower,
            "verdict": verdict(r, target, lower), "unit": unit, "rounds": rounds or []}


def latency(ix, meta):
    rows = []
    available = set(meta["peers"])
    for fabric in meta["fabrics"]:
        cls = transport_class(fabric)
        for size in meta["settings"]["lat_sizes"]:
            for peer in latency_peers(cls, available):
                field, how = LAT_STAT[peer["tool"]]
                op = paired_op(peer["tool"])
                wkey, pkey = f"lat|{fabric}|{op}|{size}", f"lat|{cls}|{peer['label']}|{size}"
                row = _row(f"latency {size} B, {op} vs {peer['label']} ({how})", fabric,
                           ix.median(wkey, field), f"{op} {field[:-3]}",
                           ix.median(pkey, field), peer["label"], 1.00,
                           rounds=ix.round_ratios(wkey, pkey, field))
                row.update(keys=(wkey, pkey), field=field)
                rows.append(row)
    return rows


def rates(ix, meta):
    """Each strategy's message rate against the best of the rate peers."""
    rows = []
    available = set(meta["peers"])
    for fabric in meta["fabrics"]:
        peers = rate_peers(transport_class(fabric), available)
        for size in meta["settings"]["rate_sizes"]:
            figures = {p["label"]: ix.median(f"rate|{transport_class(fabric)}|{p['label']}|{size}",
                                             "msg_rate") for p in peers}
            known = {k: v for k, v in figures.items() if v is not None}
            best = max(known, key=known.get) if known else None
            for op in strategies(fabric, meta.get("atomics", ())):
                wkey = f"rate|{fabric}|{op}|{size}"
                rounds = ix.round_ratios(wkey, f"rate|{transport_class(fabric)}|{best}|{size}",
                                         "msg_rate") if best else []
                row = _row(f"message rate {size} B, {op} vs best peer", fabric,
                           ix.median(wkey, "msg_rate"), "msg/s", known.get(best),
                           best or "no peer", 1.00, lower=False, unit="Mmsg/s", rounds=rounds)
                row.update(peers=figures, size=size, op=op)
                rows.append(row)
    return rows


def curve(ix, meta, kind, fabric, field):
    """{label: [median per size]} for wimm on FABRIC and the peers of its class."""
    cls = transport_class(fabric)
    sizes = meta["settings"]["curve_sizes"]
    available = set(meta["peers"])
    peers = latency_peers(cls, available) if kind == "curve_lat" else rate_peers(cls, available)
    out = {f"wimm {fabric}": [ix.median(f"{kind}|{fabric}|write_imm|{s}", field) for s in sizes]}
    for p in peers:
        # A latency curve compares like with like: fi_pingpong's average
        # with wimm's average, UCX's median with wimm's median.
        pf = LAT_STAT[p["tool"]][0] if kind == "curve_lat" else field
        out[p["label"]] = [ix.median(f"{kind}|{cls}|{p['label']}|{s}", pf) for s in sizes]
    return sizes, out


def bandwidth(ix, meta):
    """At every size >= 64 KiB, wimm's write_imm stream within 0.95x of the best peer."""
    rows = []
    for fabric in meta["fabrics"]:
        sizes, curves = curve(ix, meta, "curve_bw", fabric, "bw_Bps")
        mine = curves.pop(f"wimm {fabric}")
        worst = None
        for i, size in enumerate(sizes):
            if size < 65536:
                continue
            peers = {k: v[i] for k, v in curves.items() if v[i] is not None}
            if not peers or mine[i] is None:
                continue
            best = max(peers, key=peers.get)
            r = mine[i] / peers[best]
            if worst is None or r < worst[0]:
                worst = (r, size, mine[i], peers[best], best)
        if worst is None:
            rows.append(_row("bandwidth >= 64 KiB vs best peer", fabric, None, "B/s", None,
                             "no peer", 0.95, lower=False, unit="GB/s"))
            continue
        r, size, w, p, best = worst
        rounds = ix.round_ratios(f"curve_bw|{fabric}|write_imm|{size}",
                                 f"curve_bw|{transport_class(fabric)}|{best}|{size}", "bw_Bps")
        row = _row(f"bandwidth >= 64 KiB vs best peer (worst size: {size} B)", fabric, w,
                   "B/s", p, best, 0.95, lower=False, unit="GB/s", rounds=rounds)
        rows.append(row)
    return rows


def write_send_claim(ix, meta):
    """Claim (a): write_send / write_imm latency at 1200 B, per fabric (median/median)."""
    rows = []
    for fabric in meta["fabrics"]:
        ws = ix.median(f"lat|{fabric}|write_send|1200", "median_us")
        wi = ix.median(f"lat|{fabric}|write_imm|1200", "median_us")
        r = ratio(ws, wi)
        rows.append({"fabric": fabric, "write_send": ws, "write_imm": wi, "ratio": r,
                     "verdict": "n/a" if r is None else ("holds" if r > 1.0 else "does not hold")})
    return rows


def cpu_curves(ix, meta, fabric):
    """{mode: [µs of receiver CPU per doorbell at each offered rate]}, and the
    achieved rates (a point the fabric could not sustain is dropped)."""
    rates = meta["settings"]["cpu_rates"]
    out = {}
    for mode in WAIT_MODES:
        pts = []
        for rate in rates:
            key = f"cpu|{fabric}|{mode}@{rate}|8"
            got = ix.median(key, "msg_rate")
            cpu = ix.median(key, "cpu_us_per_doorbell")
            pts.append(cpu if got is not None and got >= 0.9 * rate else None)
        out[mode] = pts
    return rates, out


def cpu_crossings(ix, meta):
    rows = []
    for fabric in meta["fabrics"]:
        rates, curves = cpu_curves(ix, meta, fabric)
        for a, b in (("spin", "block"), ("spin", "adaptive"), ("adaptive", "block")):
            c = crossing(rates, curves[a], curves[b])
            rows.append({"fabric": fabric, "a": a, "b": b, "crossing": c})
    return rows


def bulk(ix, meta):
    """Claim (b): per chunk size, each vs last in completion time and receiver CPU."""
    rows = []
    chunks = meta["settings"]["chunks"]
    size = meta["settings"]["bulk_size"]
    for fabric in meta["fabrics"]:
        series = {}
        for notify in ("each", "last"):
            keys = [f"bulk|{fabric}|{notify}@{c}|{size}" for c in chunks]
            series[notify] = ([ix.median(k, "median_ms") for k in keys],
                              [ix.median(k, "bulk_cpu_ms") for k in keys])
        time_x = crossing(chunks, series["each"][0], series["last"][0])
        cpu_x = crossing(chunks, series["each"][1], series["last"][1])
        rows.append({"fabric": fabric, "chunks": chunks, "series": series,
                     "time_crossing": time_x, "cpu_crossing": cpu_x})
    return rows
