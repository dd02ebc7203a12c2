#!/usr/bin/env python
"""Draw each Grafana dashboard of config/monitoring/dashboards as a PNG, from
the scrapes bench/bench_dashboards.py recorded (matplotlib: the ``bench`` extra).

Each panel's PromQL is evaluated over the recorded scrapes by a small
evaluator that knows exactly the forms the dashboards use: a selector with
label matchers, ``rate``/``increase``/``changes`` over a range,
``sum``/``max by (...)`` and ``histogram_quantile`` (an unknown form stops the
run, so a new panel cannot silently draw nothing). A panel whose series the run
did not produce says so instead of drawing an empty frame.

    .venv/bin/python bench/render_dashboards.py [--scrapes bench/results/dashboards.jsonl] [--out docs/images]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[1]
Labels = frozenset  # of (name, value)
Vector = dict  # Labels -> float
RATE_INTERVAL = 30.0  # seconds, for $__rate_interval


class Scrapes:
    """Samples by time: ``at[t][(name, labels)] = value`` (targets at one time merged)."""

    def __init__(self, path: Path) -> None:
        at: dict[float, dict[tuple[str, Labels], float]] = defaultdict(dict)
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            t = round(rec["t"] / 5) * 5  # one scrape round shares a time
            for fam in text_string_to_metric_families(rec["text"]):
                for s in fam.samples:
                    labels = Labels({**s.labels, **rec["labels"]}.items())
                    at[t][(s.name, labels)] = s.value
        self.times = sorted(at)
        self.at = at

    def select(self, name: str, matchers: list[tuple[str, str, str]], t: float) -> Vector:
        out = {}
        for (n, labels), v in self.at[t].items():
            if n == name and _matches(dict(labels), matchers):
                out[labels] = v
        return out


def _matches(labels: dict[str, str], matchers: list[tuple[str, str, str]]) -> bool:
    for key, op, value in matchers:
        have = labels.get(key, "")
        ok = {"=": have == value, "!=": have != value, "=~": re.fullmatch(value, have) is not None,
              "!~": re.fullmatch(value, have) is None}[op]
        if not ok:
            return False
    return True


def _seconds(text: str) -> float:
    if text == "$__rate_interval":
        return RATE_INTERVAL
    return float(text[:-1]) * {"s": 1, "m": 60, "h": 3600}[text[-1]]


def _split_args(text: str) -> list[str]:
    depth, start, out = 0, 0, []
    for i, ch in enumerate(text):
        depth += ch in "({[" and 1 or ch in ")}]" and -1 or 0
        if ch == "," and depth == 0:
            out.append(text[start:i].strip())
            start = i + 1
    return out + [text[start:].strip()]


def compile_query(q: str) -> Callable[[Scrapes, float], Vector]:
    q = q.strip()
    if m := re.fullmatch(r"(sum|max) by \(([^)]*)\) \((.*)\)", q, re.S):
        op, keys, inner = m.group(1), [k.strip() for k in m.group(2).split(",")], compile_query(m.group(3))
        return lambda s, t: _aggregate(op, keys, inner(s, t))
    if m := re.fullmatch(r"(rate|increase|changes)\((.*)\[([^\]]+)\]\)", q, re.S):
        fn, sel, window = m.group(1), m.group(2), _seconds(m.group(3))
        name, matchers = _selector(sel)
        return lambda s, t: _over_time(fn, s, name, matchers, t, window)
    if m := re.fullmatch(r"histogram_quantile\(([\d.]+), (.*)\)", q, re.S):
        quantile, inner = float(m.group(1)), compile_query(m.group(2))
        return lambda s, t: _histogram_quantile(quantile, inner(s, t))
    name, matchers = _selector(q)
    return lambda s, t: s.select(name, matchers, t)


def _selector(text: str) -> tuple[str, list[tuple[str, str, str]]]:
    m = re.fullmatch(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})?", text.strip(), re.S)
    if not m:
        raise SystemExit(f"render_dashboards: a query form this evaluator does not know: {text!r}")
    matchers = [(k, op, v) for k, op, v in re.findall(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"', m.group(2) or "")]
    return m.group(1), matchers


def _aggregate(op: str, keys: list[str], vec: Vector) -> Vector:
    groups: dict[Labels, list[float]] = defaultdict(list)
    for labels, v in vec.items():
        d = dict(labels)
        groups[Labels((k, d.get(k, "")) for k in keys)].append(v)
    return {g: (sum(vs) if op == "sum" else max(vs)) for g, vs in groups.items()}


def _over_time(fn: str, s: Scrapes, name: str, matchers, t: float, window: float) -> Vector:
    times = [x for x in s.times if t - window <= x <= t]
    if len(times) < 2:
        return {}
    series: dict[Labels, list[float]] = defaultdict(list)
    for x in times:
        for labels, v in s.select(name, matchers, x).items():
            series[labels].append(v)
    out = {}
    for labels, vs in series.items():
        if len(vs) < 2:
            continue
        if fn == "changes":
            out[labels] = float(sum(a != b for a, b in zip(vs, vs[1:])))
            continue
        grow = sum(b - a if b >= a else b for a, b in zip(vs, vs[1:]))  # a reset starts again from 0
        out[labels] = grow / (times[-1] - times[0]) if fn == "rate" else grow
    return out


def _histogram_quantile(q: float, vec: Vector) -> Vector:
    by: dict[Labels, list[tuple[float, float]]] = defaultdict(list)
    for labels, v in vec.items():
        d = dict(labels)
        le = float(d.pop("le"))
        by[Labels(d.items())].append((le, v))
    out = {}
    for labels, buckets in by.items():
        buckets.sort()
        total = buckets[-1][1]
        if total <= 0:
            continue
        rank, prev_le, prev_c = q * total, 0.0, 0.0
        for le, c in buckets:
            if c >= rank:
                out[labels] = le if math.isinf(le) else prev_le + (le - prev_le) * (rank - prev_c) / max(c - prev_c, 1e-12)
                if math.isinf(le):
                    out[labels] = prev_le
                break
            prev_le, prev_c = le, c
    return out


def legend(fmt: str, labels: Labels) -> str:
    d = dict(labels)
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: d.get(m.group(1), ""), fmt) or ", ".join(f"{k}={v}" for k, v in sorted(labels))


SCALE = {"s": (1e3, "ms"), "percent": (1, "%"), "reqps": (1, "req/s"), "short": (1, "")}


def render(dashboard: dict, scrapes: Scrapes, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted(dashboard["panels"], key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"]))
    rows = math.ceil(len(panels) / 2)
    fig, axes = plt.subplots(rows, 2, figsize=(14, 3.2 * rows), squeeze=False)
    t0 = scrapes.times[0]
    for ax, panel in zip(axes.flat, panels):
        factor, unit = SCALE.get(panel["fieldConfig"]["defaults"].get("unit", "short"), (1, ""))
        drawn = 0
        for target in panel["targets"]:
            fn = compile_query(target["expr"])
            series: dict[Labels, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
            for t in scrapes.times:
                for labels, v in fn(scrapes, t).items():
                    if math.isfinite(v):
                        series[labels][0].append((t - t0) / 60)
                        series[labels][1].append(v * factor)
            for labels, (xs, ys) in sorted(series.items(), key=lambda kv: sorted(kv[0])):
                ax.plot(xs, ys, label=legend(target.get("legendFormat", ""), labels)[:40], linewidth=1.4)
                drawn += 1
        ax.set_title(panel["title"], fontsize=10, loc="left")
        ax.set_ylabel(unit, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if drawn:
            if drawn <= 14:
                ax.legend(fontsize=5 if drawn > 8 else 6, loc="upper left", ncol=2 if drawn > 8 else 1)
        else:
            ax.text(0.5, 0.5, "no series in this run", ha="center", va="center", transform=ax.transAxes, color="gray")
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("minutes into the bench run", fontsize=8)
    fig.suptitle(f"{dashboard['title']}  (bench/bench_dashboards.py on the simulated cluster)", fontsize=12)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scrapes", type=Path, default=REPO / "bench" / "results" / "dashboards.jsonl")
    p.add_argument("--dashboards", type=Path, default=REPO / "config" / "monitoring" / "dashboards")
    p.add_argument("--out", type=Path, default=REPO / "docs" / "images")
    args = p.parse_args()
    scrapes = Scrapes(args.scrapes)
    args.out.mkdir(parents=True, exist_ok=True)
    for path in sorted(args.dashboards.glob("*.json")):
        target = args.out / f"dashboard-{path.stem}.png"
        render(json.loads(path.read_text()), scrapes, target)
        print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
