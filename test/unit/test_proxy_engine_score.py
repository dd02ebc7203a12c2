"""The engine-aware scorer, the engine metrics parse (hostile input) and both strategies on engine load."""

from __future__ import annotations

import math

import pytest

from kaiwo_ctrl.serving.proxy.balance import Endpoint, Ring, least_load
from kaiwo_ctrl.serving.proxy.enginemetrics import MAX_ADAPTERS, BadMetrics, parse_engine_metrics
from kaiwo_ctrl.serving.proxy.endpoints import Group
from kaiwo_ctrl.serving.proxy.score import W_AFFINITY, W_KV, W_RUNNING, W_WAITING, EngineSample, endpoint_load

NOW = 100.0


def ep(name: str, *, in_flight: int = 0, sample: EngineSample | None = None, until: float = NOW + 3, base: int | None = None,
       adapters: frozenset[str] = frozenset()) -> Endpoint:
    e = Endpoint(f"ns/{name}", f"10.0.0.1:{8000 + len(name)}", adapters, in_flight)
    e.engine, e.engine_until, e.in_flight_base = sample, until, in_flight if base is None else base
    return e


S = EngineSample


@pytest.mark.parametrize("endpoint, adapter, expected", [
    # no report: KubeAI's measure, the in-flight count here
    (ep("a", in_flight=3), "", 3.0),
    # a stale report is ignored
    (ep("a", in_flight=2, sample=S(running=9, waiting=9), until=NOW - 0.001), "", 2.0),
    # a fresh report: waiting > running > KV use
    (ep("a", in_flight=5, sample=S(running=2, waiting=1, kv=0.5)), "", W_WAITING + 2 * W_RUNNING + 0.5 * W_KV),
    # this replica's in-flight change since the scrape began: 3 more sent ...
    (ep("a", in_flight=4, sample=S(running=1), base=1), "", 4.0),
    # ... or 2 of its requests (counted by the engine) finished since
    (ep("a", in_flight=1, sample=S(running=5), base=3), "", 3.0),
    # never below zero
    (ep("a", in_flight=0, sample=S(running=1), base=4), "", 0.0),
    # adapter already running on the engine: the affinity bonus; another adapter: none
    (ep("a", sample=S(running=1, adapters=frozenset({"lora-a"}))), "lora-a", 1.0 - W_AFFINITY),
    (ep("a", sample=S(running=1, adapters=frozenset({"lora-a"}))), "lora-b", 1.0),
    # without a fresh report there is no affinity from running_lora_adapters
    (ep("a", in_flight=1, sample=S(adapters=frozenset({"x"})), until=0.0), "x", 1.0),
])
def test_endpoint_load_table(endpoint, adapter, expected):
    assert endpoint_load(endpoint, NOW, adapter) == pytest.approx(expected)


def test_weights_order_waiting_over_running_over_kv():
    one_waiting = S(waiting=1)
    one_running = S(running=1)
    full_cache = S(kv=1.0)
    loads = [endpoint_load(ep(n, sample=s), NOW) for n, s in (("w", one_waiting), ("r", one_running), ("k", full_cache))]
    assert loads[0] > loads[1] > 0 and loads[0] > loads[2] > 0
    assert W_AFFINITY < W_RUNNING, "affinity breaks ties, never outweighs a request"


@pytest.mark.parametrize("states, adapter, chosen", [
    # a long queue behind an idle local count loses to an engine with a short batch
    ({"queue": dict(in_flight=0, sample=S(running=8, waiting=20)), "busy": dict(in_flight=0, sample=S(running=3))}, "", "busy"),
    # no reports anywhere: fewest in flight here (KubeAI)
    ({"a": dict(in_flight=2), "b": dict(in_flight=1), "c": dict(in_flight=5)}, "", "b"),
    # mixed: a reporting idle engine vs a silent endpoint with one in flight here
    ({"silent": dict(in_flight=1), "idle": dict(in_flight=0, sample=S())}, "", "idle"),
    # equal engines: the one running the adapter wins; the unlabelled one is no candidate even when idle
    ({"a": dict(sample=S(running=2), adapters=frozenset({"l"})),
      "b": dict(sample=S(running=2, adapters=frozenset({"l"})), adapters=frozenset({"l"})),
      "c": dict(sample=S())}, "l", "b"),
    # affinity does not outweigh a queue
    ({"a": dict(sample=S(running=1), adapters=frozenset({"l"})),
      "b": dict(sample=S(running=1, waiting=2, adapters=frozenset({"l"})), adapters=frozenset({"l"}))}, "l", "a"),
])
def test_least_load_on_engine_state(states, adapter, chosen):
    eps = [ep(n, **kw) for n, kw in states.items()]
    assert least_load(eps, adapter, now=NOW).key == f"ns/{chosen}"


def test_prefix_hash_bound_uses_engine_load():
    g = Group()
    for name in ("p0", "p1", "p2"):
        g.upsert(Endpoint(f"ns/{name}", f"10.0.0.{name[1]}:8000"))
    home = g.choose_prefix("tenant-1", 64, 125, "", frozenset()).endpoint
    assert home is not None
    # another replica's traffic has queued requests at the home engine: nothing in flight here
    import time

    for e in g.endpoints.values():
        e.engine, e.engine_until = S(running=1), time.monotonic() + 60
    home.engine = S(running=8, waiting=6)
    c = g.choose_prefix("tenant-1", 64, 125, "", frozenset())
    assert c.endpoint is not home and c.initial is home and not c.fallback
    # the same with no reports: home, as KubeAI (nothing in flight here)
    for e in g.endpoints.values():
        e.engine = None
    assert g.choose_prefix("tenant-1", 64, 125, "", frozenset()).endpoint is home


def test_ring_choose_without_load_keeps_in_flight_semantics():
    e = {f"ns/p{i}": Endpoint(f"ns/p{i}", f"10.0.0.{i}:8000") for i in range(2)}
    r = Ring(16)
    for k in e:
        r.add(k)
    first = r.choose("key", e, 0, 125).endpoint
    first.in_flight = 10
    assert r.choose("key", e, 10, 125).endpoint is not first


# ------------------------------------------------------------------ parse
VLLM = b"""# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
vllm:num_requests_waiting{engine="0",model_name="m"} 7.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5
vllm:lora_requests_info{max_lora="2",running_lora_adapters="old",waiting_lora_adapters=""} 1.70e9
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a,b",waiting_lora_adapters=""} 1.71e9
vllm:prompt_tokens_total{model_name="m"} 12345
"""


def test_parse_vllm_sums_engines_and_takes_latest_adapters():
    s = parse_engine_metrics(VLLM)
    assert s == S(running=5, waiting=7, kv=0.5, adapters=frozenset({"a", "b"}))


def test_parse_older_and_sglang_names():
    assert parse_engine_metrics(b"vllm:num_requests_running 1\nvllm:gpu_cache_usage_perc 0.75\n") == S(running=1, kv=0.75)
    assert parse_engine_metrics(b"vllm:kv_cache_usage_perc 0.1\nvllm:gpu_cache_usage_perc 0.9\nvllm:num_requests_waiting 0\n").kv == 0.1
    assert parse_engine_metrics(b"sglang:num_running_reqs 2\nsglang:num_queue_reqs 4\nsglang:token_usage 0.3\n") == S(2, 4, 0.3)


@pytest.mark.parametrize("body", [
    b"", b"# nothing here\n", b"process_cpu_seconds_total 3\n", b"\x00\xff" * 1000,
    b"vllm:kv_cache_usage_perc 0.5\n",  # no request figures: nothing to route on
    b"vllm:num_requests_running{unterminated 5\n", b"vllm:num_requests_running{a=\"b\"} notanumber\n",
    b"vllm:num_requests_running\n", b"{" * 10000,
])
def test_parse_gives_nothing_for_answers_without_figures(body):
    assert parse_engine_metrics(body) is None


@pytest.mark.parametrize("line", [
    b"vllm:num_requests_running -1", b"vllm:num_requests_waiting NaN", b"vllm:num_requests_waiting +Inf",
    b"vllm:num_requests_running 1e12", b"vllm:kv_cache_usage_perc 1.5",
])
def test_parse_refuses_impossible_values(line):
    with pytest.raises(BadMetrics):
        parse_engine_metrics(line + b"\n")


def test_parse_bounds_adapters_and_survives_huge_labels():
    names = ",".join(f"a{i}" for i in range(1000)) + "," + "x" * 300
    s = parse_engine_metrics(f'vllm:num_requests_running 0\nvllm:lora_requests_info{{running_lora_adapters="{names}"}} 1\n'.encode())
    assert len(s.adapters) <= MAX_ADAPTERS and all(len(a) <= 253 for a in s.adapters)
    big = b'vllm:lora_requests_info{running_lora_adapters="' + b"y" * 100_000 + b'"} 1\nvllm:num_requests_running 1\n'
    assert parse_engine_metrics(big) == S(running=1)
    assert parse_engine_metrics(b"vllm:num_requests_running 1\nvllm:lora_requests_info{x=\"y\"} nan\n").adapters == frozenset()
    assert math.isfinite(parse_engine_metrics(b"vllm:num_requests_running 1 1700000000000\n").running)


def _group(n: int) -> Group:
    g = Group()
    for i in range(n):
        g.upsert(Endpoint(f"ns/p{i}", f"10.0.0.{i}:8000"))
    return g


def _report(g: Group, **samples: EngineSample) -> None:
    import time

    for e in g.endpoints.values():
        e.engine, e.engine_until = samples.get(e.key.split("/")[1], S(running=4)), time.monotonic() + 60


def test_prefix_hash_passes_over_a_queued_home_even_under_the_bound():
    g = _group(3)
    home = g.choose_prefix("tenant-2", 64, 125, "", frozenset()).endpoint
    # the home runs fewer than the others but has a queue: it admits nothing new now
    _report(g, **{home.key.split("/")[1]: S(running=1, waiting=1)})
    assert endpoint_load(home, NOW) <= 13 / 3 * 1.25  # within the load bound by itself
    c = g.choose_prefix("tenant-2", 64, 125, "", frozenset())
    assert c.endpoint is not home and not c.fallback and c.initial is home


def test_prefix_hash_takes_the_least_loaded_when_every_engine_is_queued():
    g = _group(3)
    home = g.choose_prefix("tenant-3", 64, 125, "", frozenset()).endpoint
    names = [k.split("/")[1] for k in g.endpoints]
    least = next(n for n in names if n != home.key.split("/")[1])
    _report(g, **{n: S(running=8, waiting=9) for n in names} | {least: S(running=8, waiting=2)})
    c = g.choose_prefix("tenant-3", 64, 125, "", frozenset())
    assert c.fallback and c.endpoint.key == f"ns/{least}"
    # without reports the fallback is KubeAI's: the key's home
    for e in g.endpoints.values():
        e.engine = None
        for _ in range(30 if e is home else 10):
            g.acquire(e)
    c = g.choose_prefix("tenant-3", 64, 125, "", frozenset())
    assert c.endpoint is not home  # over the bound: spills to the next under it
