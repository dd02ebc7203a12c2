"""The autoscaler's pure parts: window, target, scale-down delay, metric parsing."""

from __future__ import annotations

from kaiwo_ctrl.serving.autoscale.peers import parse_active, peer_addresses
from kaiwo_ctrl.serving.autoscale.window import Window, decide, target_replicas, window_size


def test_window_mean_includes_initial_fill_and_keeps_saved_samples():
    w = Window(4)
    w.push(8)
    assert w.mean() == 2
    w2 = Window(3, fill=5.0)
    assert w2.mean() == 5
    w3 = Window(3, samples=[1, 2, 3, 4, 5])
    assert list(w3.samples) == [3, 4, 5]
    assert window_size(600, 10) == 60 and window_size(1, 10) == 1


def test_target_is_ceil_of_average_over_target_clamped():
    assert target_replicas(0, 100, 0, None) == 0
    assert target_replicas(0.01, 100, 0, None) == 1
    assert target_replicas(250, 100, 0, None) == 3
    assert target_replicas(250, 100, 0, 2) == 2
    assert target_replicas(0, 100, 1, 2) == 1
    assert target_replicas(300, 100, 0, None) == 3


def test_scale_up_is_immediate_scale_down_waits_for_the_delay():
    assert decide(1, 3, 2, 3) == (3, 0)
    assert decide(3, 3, 2, 3) == (None, 0)
    ticks = 0
    for _ in range(3):
        replicas, ticks = decide(3, 1, ticks, 3)
        assert replicas is None
    assert decide(3, 1, ticks, 3) == (1, 0)
    assert decide(3, 1, 0, 0) == (1, 0)


def test_parse_active_sums_series_per_model():
    text = (
        '# HELP kaiwo_proxy_active_requests x\n# TYPE kaiwo_proxy_active_requests gauge\n'
        'kaiwo_proxy_active_requests{model_namespace="a",model_name="m"} 3.0\n'
        'kaiwo_proxy_active_requests{model_namespace="b",model_name="m"} 1.0\n'
        'kaiwo_proxy_active_requests_other{model_namespace="a",model_name="m"} 9.0\n'
    )
    assert parse_active(text) == {"a/m": 3.0, "b/m": 1.0}


def test_peer_addresses_are_ready_pod_ips():
    pods = [
        {"metadata": {"name": "x"}, "status": {"podIP": "10.0.0.2", "conditions": [{"type": "Ready", "status": "True"}]}},
        {"metadata": {"name": "y"}, "status": {"podIP": "10.0.0.3", "conditions": [{"type": "Ready", "status": "False"}]}},
    ]
    assert peer_addresses(pods, 8080) == ["10.0.0.2:8080"]


async def test_load_is_the_larger_of_engines_and_proxies_per_model(monkeypatch):
    from kaiwo_ctrl.serving.autoscale import autoscaler as mod

    proxies = {"ns/a": 5.0, "ns/b": 2.0}

    async def scrape(session, peers, **kw):
        return dict(proxies) if peers else None

    monkeypatch.setattr(mod, "scrape_active", scrape)
    cfg = mod.AutoscalerConfig()
    engines = {"ns/a": 3.0, "ns/c": 7.0}  # a: held requests at the proxies count; c: traffic that bypassed them
    a = mod.Autoscaler(None, None, lambda: ["p:1"], cfg, lambda: dict(engines))  # type: ignore[arg-type]
    assert await a._load(None) == {"ns/a": 5.0, "ns/b": 2.0, "ns/c": 7.0}
    proxies["ns/b"] = 1.0
    engines["ns/b"] = 4.0
    assert (await a._load(None))["ns/b"] == 4.0
    # no proxy replica to read: engine load alone; neither: skip the tick
    assert await mod.Autoscaler(None, None, lambda: [], cfg, lambda: {"ns/c": 1.0})._load(None) == {"ns/c": 1.0}  # type: ignore[arg-type]
    assert await mod.Autoscaler(None, None, lambda: [], cfg, None)._load(None) is None  # type: ignore[arg-type]
    # a proxy replica that cannot be read skips the tick, engine load or not
    monkeypatch.setattr(mod, "scrape_active", lambda *a, **k: _none())
    assert await mod.Autoscaler(None, None, lambda: ["p:1"], cfg, lambda: {"ns/c": 1.0})._load(None) is None  # type: ignore[arg-type]


async def _none():
    return None
