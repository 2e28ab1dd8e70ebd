"""Statistics over the rounds: one figure per run, the median over the runs of
a case, ratios, verdicts and where two curves cross. Nothing here knows a
tool; the figures' names are those runners.py and wimm's JSON use."""
import math
import statistics


def figure(record, name):
    """One figure of one run in common units, or None. Derived figures:
    bw_Bps (wimm prints MB/s, 10^6), cpu_us_per_doorbell, bulk_cpu_ms."""
    if not record.get("ok"):
        return None
    if name == "bw_Bps" and record.get("tool") == "wimm":
        mbps = record.get("bw_mbps")
        return None if mbps is None else mbps * 1e6
    if name == "cpu_us_per_doorbell":
        if record.get("rx_doorbells"):
            cpu = record["rx_cpu_user_s"] + record["rx_cpu_sys_s"]
            return cpu / record["rx_doorbells"] * 1e6
        return None
    if name == "bulk_cpu_ms":
        if "rx_cpu_user_s" in record and record.get("iters"):
            return (record["rx_cpu_user_s"] + record["rx_cpu_sys_s"]) / record["iters"] * 1e3
        return None
    return record.get(name)


class Index:
    """The runs of one results file by case key."""

    def __init__(self, runs):
        self.by_key = {}
        for r in runs:
            self.by_key.setdefault(r["key"], []).append(r)

    def cases(self, kind):
        return [rs[0] for key, rs in self.by_key.items() if rs[0]["kind"] == kind]

    def values(self, key, name):
        return [v for v in (figure(r, name) for r in self.by_key.get(key, [])) if v is not None]

    def by_round(self, key, name):
        """{round: figure} of the runs of a case that succeeded."""
        out = {}
        for r in self.by_key.get(key, []):
            v = figure(r, name)
            if v is not None and r.get("round") is not None:
                out[r["round"]] = v
        return out

    def round_ratios(self, key_a, key_b, name):
        """a / b round by round, for the rounds both have (in round order):
        what the ratio of the medians hides when a host changes speed
        between the two runs of one round."""
        return list(self.round_ratio_map(key_a, key_b, name).values())

    def round_ratio_map(self, key_a, key_b, name):
        """{round: a / b} for the rounds both have, in round order."""
        a, b = self.by_round(key_a, name), self.by_round(key_b, name)
        return {k: ratio(a[k], b[k]) for k in sorted(a) if k in b and b[k]}

    def median(self, key, name):
        """Median over the rounds, or None when no run of the case succeeded."""
        vals = self.values(key, name)
        return statistics.median(vals) if vals else None

    def count(self, key):
        rs = self.by_key.get(key, [])
        return sum(1 for r in rs if r.get("ok")), len(rs)

    def error(self, key):
        return next((r.get("error") for r in self.by_key.get(key, []) if not r.get("ok")), None)


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def verdict(r, target, lower_is_better=True):
    """met / missed against a target ratio; n/a when a side is missing."""
    if r is None:
        return "n/a"
    ok = r <= target if lower_is_better else r >= target
    return "met" if ok else "missed"


def crossing(xs, ya, yb):
    """The x where curve a stops being above b (or below), interpolated on a
    log x scale between the two measured points around it; None if the
    curves do not cross in the measured range. Returns (x, direction)."""
    pts = [(x, a, b) for x, a, b in zip(xs, ya, yb) if a is not None and b is not None]
    for (x0, a0, b0), (x1, a1, b1) in zip(pts, pts[1:]):
        d0, d1 = a0 - b0, a1 - b1
        if d0 == 0:
            return x0, ("a above b before" if d1 < 0 else "a below b before")
        if d0 * d1 < 0:
            t = d0 / (d0 - d1)
            lx = math.log(x0) + t * (math.log(x1) - math.log(x0))
            return math.exp(lx), ("a above b before" if d0 > 0 else "a below b before")
    return None
