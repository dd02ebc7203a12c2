"""bench/render_dashboards.py: its small PromQL evaluator knows every query form the
dashboards use, and computes rate, increase, changes, aggregations and quantiles
as Prometheus does (on scrapes recorded 5 s apart)."""

from __future__ import annotations

import importlib.util
import json

import pytest
from support import REPO

ROOT = REPO


def _renderer():
    spec = importlib.util.spec_from_file_location("render_dashboards", ROOT / "bench" / "render_dashboards.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


R = _renderer()


@pytest.fixture
def scrapes(tmp_path):
    lines = []
    for i in range(13):  # one minute, every 5 s
        text = (
            f'x_total{{controller="a"}} {10 * i}\nx_total{{controller="b"}} {i}\n'
            f'g{{model_name="m",state="desired"}} {1 if i < 6 else 3}\n'
            f'h_bucket{{le="0.1"}} {5 * i}\nh_bucket{{le="0.2"}} {10 * i}\nh_bucket{{le="+Inf"}} {10 * i}\n'
        )
        lines.append(json.dumps({"t": 1000 + 5 * i, "labels": {"pod": "p0"}, "text": text}))
    f = tmp_path / "s.jsonl"
    f.write_text("\n".join(lines) + "\n")
    return R.Scrapes(f)


def test_every_dashboard_query_compiles():
    for path in (ROOT / "config" / "monitoring" / "dashboards").glob("*.json"):
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel["targets"]:
                R.compile_query(target["expr"])  # raises SystemExit on an unknown form


def test_rate_sum_and_max(scrapes):
    t = scrapes.times[-1]
    v = R.compile_query("sum by (controller) (rate(x_total[30s]))")(scrapes, t)
    assert {dict(k)["controller"]: round(x, 3) for k, x in v.items()} == {"a": 2.0, "b": 0.2}
    total = R.compile_query("sum by (pod) (increase(x_total[1m]))")(scrapes, t)
    assert list(total.values()) == [pytest.approx(120 + 12)]  # both controllers, over the whole minute


def test_changes_and_selector(scrapes):
    t = scrapes.times[-1]
    v = R.compile_query('max by (model_name) (changes(g{state="desired"}[1m]))')(scrapes, t)
    assert list(v.values()) == [1.0]
    assert R.compile_query('g{state="ready"}')(scrapes, t) == {}


def test_histogram_quantile(scrapes):
    t = scrapes.times[-1]
    p50 = R.compile_query("histogram_quantile(0.5, sum by (le) (rate(h_bucket[30s])))")(scrapes, t)
    p99 = R.compile_query("histogram_quantile(0.99, sum by (le) (rate(h_bucket[30s])))")(scrapes, t)
    assert list(p50.values()) == [pytest.approx(0.1)] and list(p99.values()) == [pytest.approx(0.198)]


def test_unknown_form_is_refused():
    with pytest.raises(SystemExit):
        R.compile_query("topk(3, x_total)")
