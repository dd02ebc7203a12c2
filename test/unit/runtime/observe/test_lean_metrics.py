"""The lean series expose exactly what prometheus_client's own would after the same updates."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kaiwo_ctrl.runtime.observe.lean import LeanCounter, LeanGauge, LeanHistogram
from kaiwo_ctrl.runtime.observe.metrics import Metrics

BUCKETS = (0.001, 0.01, 0.1, 1)
OBSERVED = (0.0005, 0.001, 0.0011, 0.05, 0.1, 0.5, 1.0, 7.0, 0.0)


def _text(registry: CollectorRegistry) -> str:
    m = Metrics.__new__(Metrics)
    m.registry = registry
    return m.render().decode()


def _both(lean: bool) -> str:
    r = CollectorRegistry()
    c, g, h = (LeanCounter, LeanGauge, LeanHistogram) if lean else (Counter, Gauge, Histogram)
    req = c("t_requests", "requests", ("ns", "code"), registry=r)
    active = g("t_active", "active", ("ns",), registry=r)
    dur = h("t_duration_seconds", "duration", ("ns",), buckets=BUCKETS, registry=r)
    plain = h("t_plain_seconds", "no labels", buckets=BUCKETS, registry=r)
    refused = c("t_refused", "never incremented", registry=r)
    req.labels("a", "200").inc()
    req.labels("a", "200").inc(2)
    req.labels("b", "504").inc()
    active.labels("a").inc()
    active.labels("a").inc()
    active.labels("a").dec()
    active.labels("z").set(4)
    for v in OBSERVED:
        dur.labels("a").observe(v)
        plain.observe(v * 2)
    del refused
    return _text(r)


def test_exposition_matches_prometheus_client():
    lean, stock = _both(True), _both(False)
    assert lean == stock
    assert 't_requests_total{code="200",ns="a"} 3.0' in lean
    assert 't_duration_seconds_bucket{le="0.001",ns="a"} 3.0' in lean  # 0.0, 0.0005 and 0.001 (le is inclusive)
    assert 't_duration_seconds_bucket{le="+Inf",ns="a"} 9.0' in lean and "t_refused_total 0.0" in lean


def test_label_count_is_checked():
    r = CollectorRegistry()
    c = LeanCounter("t_x", "x", ("a", "b"), registry=r)
    with pytest.raises(ValueError):
        c.labels("only-one")
    assert r.get_sample_value("t_x_total", {"a": "1", "b": "2"}) is None
    c.labels("1", "2").inc()
    assert r.get_sample_value("t_x_total", {"a": "1", "b": "2"}) == 1.0
