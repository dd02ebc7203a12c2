"""Engine-aware routing and autoscaling through the live proxy, with fake engines that report vLLM metrics.

* a queue built through one proxy replica steers a second replica (which has
  nothing in flight itself) to the idle engine;
* an engine whose metrics fail or hang falls back to the proxy's own counts;
* adapter affinity: among the Pods labelled with the adapter, the one whose
  engine runs it wins; an unlabelled idle Pod gets nothing;
* the autoscaler scales on what the engines report, with no traffic through
  any proxy;
* PrefixHash keeps a long conversation on the engine that caches its prompt
  while a short one moves to balance the load.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import orjson
import pytest

from kaiwo_ctrl.serving.autoscale.autoscaler import AutoscalerConfig
from kaiwo_ctrl.serving.autoscale.setup import setup_autoscaler
from proxy_support import backends, create_model, get_model, proxy, server_pod, start_proxy, stop_proxy  # noqa: F401 - fixtures
from support import eventually

pytestmark = pytest.mark.integration


def fresh_engines(p, ns: str, model: str, n: int) -> bool:
    g = p.server.handler.tracker.groups.get((ns, model))
    return g is not None and sum(e.engine is not None for e in g.endpoints.values()) == n


def engine_of(p, ns: str, model: str, backend):
    g = p.server.handler.tracker.groups[(ns, model)]
    return next(e.engine for e in g.endpoints.values() if e.address == backend.address)


async def servers_of(p, model: str, n: int, body_extra: dict | None = None) -> Counter:
    out: Counter = Counter()
    for _ in range(n):
        code, _, raw = await p.post("/openai/v1/completions", {"model": model, "prompt": "x", **(body_extra or {})})
        assert code == 200, raw
        out[orjson.loads(raw)["server"]] += 1
    return out


async def test_a_queue_built_through_one_replica_steers_the_other(proxy, control_plane, admin, namespace, backends):
    create_model(admin, namespace, "eq", autoscalingDisabled=True)
    queued, idle = await backends("queued"), await backends("idle")
    queued.engine = idle.engine = True
    queued.hold.clear()
    server_pod(admin, namespace, "eq", queued)
    second = await start_proxy(control_plane)
    try:
        await second.wait_endpoints(namespace, "eq", 1)
        # all of this traffic goes through the second replica, to the only Ready engine: 2 run, 6 wait
        held = [asyncio.create_task(second.post("/openai/v1/completions", {"model": "eq", "prompt": str(i)})) for i in range(8)]
        await eventually(lambda: queued.held == 8, what="8 requests held at the queued engine")
        server_pod(admin, namespace, "eq", idle)
        await proxy.wait_endpoints(namespace, "eq", 2)
        await eventually(lambda: fresh_engines(proxy, namespace, "eq", 2), what="both engines reported")
        g = proxy.server.handler.tracker.groups[(namespace, "eq")]
        assert all(e.in_flight == 0 for e in g.endpoints.values()), "this replica has nothing in flight"
        # the queued engine is first in the group: by in-flight counts alone it would get every request
        assert next(iter(g.endpoints.values())).address == queued.address
        before = len(queued.requests)
        assert await servers_of(proxy, "eq", 12) == Counter({"idle": 12})
        assert len(queued.requests) == before
        assert proxy.metric("kaiwo_proxy_engine_requests_waiting", model_namespace=namespace, model_name="eq") == 6
        assert proxy.metric("kaiwo_proxy_engine_requests_running", model_namespace=namespace, model_name="eq") == 2
        queued.hold.set()
        assert [r[0] for r in await asyncio.gather(*held)] == [200] * 8
    finally:
        queued.hold.set()
        await stop_proxy(second)


@pytest.mark.parametrize("failure", ["status", "hang", "garbage"])
async def test_a_failing_scrape_falls_back_to_the_proxy_counts(proxy, admin, namespace, backends, failure):
    model = f"fb-{failure}"
    create_model(admin, namespace, model, autoscalingDisabled=True)
    busy, calm = await backends("busy"), await backends("calm")
    busy.engine = calm.engine = True
    busy.metrics_body = b'vllm:num_requests_running 4\nvllm:num_requests_waiting 50\n'
    server_pod(admin, namespace, model, busy)
    await proxy.wait_endpoints(namespace, model, 1)
    server_pod(admin, namespace, model, calm)
    await proxy.wait_endpoints(namespace, model, 2)
    await eventually(lambda: fresh_engines(proxy, namespace, model, 2), what="both engines reported")
    assert await servers_of(proxy, model, 6) == Counter({"calm": 6})
    if failure == "status":
        busy.metrics_status = 500
    elif failure == "hang":
        busy.metrics_delay = 5.0  # past the 0.5 s scrape timeout
    else:
        busy.metrics_body = b"vllm:num_requests_waiting NaN\n"
    reason = {"status": "status_5xx", "hang": "timeout", "garbage": "invalid"}[failure]
    await eventually(lambda: proxy.metric("kaiwo_proxy_engine_scrape_errors_total", model_name=model, reason=reason) >= 1,
                     what=f"a {reason} scrape error counted")
    await eventually(lambda: fresh_engines(proxy, namespace, model, 1), what="the failed engine's report dropped")
    # back on in-flight counts: both at 0 here, the first endpoint (busy) wins the tie, as in KubeAI
    assert (await servers_of(proxy, model, 4))["busy"] == 4
    busy.metrics_delay = 0.0


async def test_adapter_affinity_prefers_the_engine_running_the_adapter(proxy, admin, namespace, backends):
    create_model(admin, namespace, "lo", autoscalingDisabled=True, adapters=[{"name": "sql", "url": "hf://o/sql"}])
    cold, warm, plain = await backends("cold"), await backends("warm"), await backends("plain")
    for b in (cold, warm, plain):
        b.engine = True
    base = b'vllm:num_requests_running 1\nvllm:num_requests_waiting 0\n'
    cold.metrics_body = base + b'vllm:lora_requests_info{max_lora="1",running_lora_adapters="",waiting_lora_adapters=""} 2\n'
    warm.metrics_body = base + b'vllm:lora_requests_info{max_lora="1",running_lora_adapters="other",waiting_lora_adapters=""} 1\n' \
        + b'vllm:lora_requests_info{max_lora="1",running_lora_adapters="sql",waiting_lora_adapters=""} 2\n'
    plain.metrics_body = b'vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n'
    server_pod(admin, namespace, "lo", cold, adapters=["sql"])
    await proxy.wait_endpoints(namespace, "lo", 1)
    server_pod(admin, namespace, "lo", warm, adapters=["sql"])
    server_pod(admin, namespace, "lo", plain)
    await proxy.wait_endpoints(namespace, "lo", 3)
    await eventually(lambda: fresh_engines(proxy, namespace, "lo", 3), what="all engines reported")
    assert await servers_of(proxy, "lo_sql", 8) == Counter({"warm": 8})
    # the base model goes by load alone: the idle unlabelled Pod
    assert await servers_of(proxy, "lo", 3) == Counter({"plain": 3})
    # a queue outweighs affinity
    warm.metrics_body = warm.metrics_body.replace(b"num_requests_waiting 0", b"num_requests_waiting 3")
    await eventually(lambda: (s := engine_of(proxy, namespace, "lo", warm)) is not None and s.waiting == 3,
                     what="the warm engine's queue seen")
    assert await servers_of(proxy, "lo_sql", 4) == Counter({"cold": 4})


async def test_autoscaler_scales_on_engine_load_without_proxy_traffic(control_plane, admin, namespace, backends):
    create_model(admin, namespace, "as", replicas=1, minReplicas=1, maxReplicas=5, targetRequests=2, scaleDownDelaySeconds=1)
    e = await backends("as")
    e.engine = True
    e.metrics_body = b'vllm:num_requests_running 4\nvllm:num_requests_waiting 4\n'  # traffic that reached it some other way
    cfg = AutoscalerConfig(interval=0.3, time_window=0.6, state_configmap="as-state", namespace=namespace)

    def wire(mgr, server, scraper):
        # the proxy replicas' active requests: this process's own /metrics (0 here: no traffic through it)
        setup_autoscaler(mgr, cfg, self_proxy=True, peer_selector="app=no-such-proxy", engine_load=scraper.model_loads)

    p = await start_proxy(control_plane, wire=wire)
    try:
        server_pod(admin, namespace, "as", e)
        await p.wait_endpoints(namespace, "as", 1)
        await eventually(lambda: get_model(admin, namespace, "as")["spec"]["replicas"] == 4, timeout=30, interval=0.2,
                         what="scaled to ceil(8 / 2) = 4 on engine load")
        assert p.metric("kaiwo_proxy_active_requests", model_namespace=namespace, model_name="as") == 0
        e.metrics_body = b'vllm:num_requests_running 1\nvllm:num_requests_waiting 0\n'
        await eventually(lambda: get_model(admin, namespace, "as")["spec"]["replicas"] == 1, timeout=30, interval=0.2,
                         what="scaled back down with the engine's load")
    finally:
        await stop_proxy(p)


async def chat_server(p, model: str, first: str, size: int) -> str:
    """One turn of a conversation whose first user message is ``first``: a prompt of about ``size`` bytes."""
    body = {"model": model, "messages": [{"role": "user", "content": first}, {"role": "assistant", "content": "ok"},
                                         {"role": "user", "content": "y" * max(0, size - len(first))}]}
    code, _, raw = await p.post("/openai/v1/chat/completions", body)
    assert code == 200, raw
    return orjson.loads(raw)["server"]


async def test_prefix_hash_keeps_a_long_conversation_where_its_prompt_is_cached(proxy, admin, namespace, backends):
    create_model(admin, namespace, "pl", autoscalingDisabled=True, loadBalancing={"strategy": "PrefixHash"})
    a, b = await backends("a"), await backends("b")
    for be in (a, b):
        be.engine = True
        be.metrics_body = b"vllm:num_requests_running 10\nvllm:num_requests_waiting 0\n"
        server_pod(admin, namespace, "pl", be)
    await proxy.wait_endpoints(namespace, "pl", 2)
    await eventually(lambda: fresh_engines(proxy, namespace, "pl", 2), what="both engines reported")
    # two conversations whose first turns (equal loads) went to the same engine: one long, one short
    home = await chat_server(proxy, "pl", "long conversation 0", 40_000)
    short = ""
    for i in range(200):  # half of the prefixes hash to that engine
        if await chat_server(proxy, "pl", f"short conversation {i}", 300) == home:
            short = f"short conversation {i}"
            break
    assert short
    busy = {"a": a, "b": b}[home]
    # that engine now runs 30 more requests (through other replicas): a cached conversation's home is judged on what
    # delays a first token, and decoding requests barely do, while a move costs the whole prefill -- both stay
    busy.metrics_body = b"vllm:num_requests_running 40\nvllm:num_requests_waiting 0\n"
    await eventually(lambda: (s := engine_of(proxy, namespace, "pl", busy)) is not None and s.running == 40,
                     what="the busier engine seen")
    assert await chat_server(proxy, "pl", short, 500) == home
    # its KV cache is 90 % used (it still admits): that outweighs a short prompt's prefill, not 10,000 cached tokens
    busy.metrics_body = b"vllm:num_requests_running 40\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0.9\n"
    await eventually(lambda: (s := engine_of(proxy, namespace, "pl", busy)) is not None and s.kv == 0.9,
                     what="the fuller engine seen")
    assert await chat_server(proxy, "pl", short, 600) != home
    assert await chat_server(proxy, "pl", "long conversation 0", 41_000) == home
    # it queues: a cached prefix saves prefill, not the wait for admission, so the long one moves too
    busy.metrics_body = b"vllm:num_requests_running 40\nvllm:num_requests_waiting 2\nvllm:kv_cache_usage_perc 0.9\n"
    await eventually(lambda: (s := engine_of(proxy, namespace, "pl", busy)) is not None and s.waiting == 2,
                     what="the queueing engine seen")
    assert await chat_server(proxy, "pl", "long conversation 0", 42_000) != home
