"""Load balancing, streaming, retries, cancellation, timeouts and scale-from-zero through the proxy."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import orjson
import pytest

from kaiwo_ctrl.serving.routing.balance import Endpoint, Ring
from proxy_support import backends, create_model, get_model, proxy, server_pod, set_pod_ready  # noqa: F401 - fixtures
from support import eventually

pytestmark = pytest.mark.integration


async def test_least_load_avoids_the_backend_holding_requests(proxy, admin, namespace, backends):
    create_model(admin, namespace, "ll", autoscalingDisabled=True)
    slow, fast = await backends("slow"), await backends("fast")
    slow.hold.clear()
    server_pod(admin, namespace, "ll", slow)
    server_pod(admin, namespace, "ll", fast)
    await proxy.wait_endpoints(namespace, "ll", 2)
    held = []
    while not slow.held:  # ties may go either way; fast answers at once
        held.append(asyncio.create_task(proxy.post("/openai/v1/completions", {"model": "ll", "prompt": "x"})))
        await asyncio.sleep(0.05)
        assert len(held) < 20
    before = len(fast.requests)
    for _ in range(10):
        code, _, raw = await proxy.post("/openai/v1/completions", {"model": "ll", "prompt": "x"})
        assert code == 200 and orjson.loads(raw)["server"] == "fast"
    assert len(fast.requests) - before == 10 and slow.held == 1
    slow.hold.set()
    await asyncio.gather(*held)


async def test_prefix_hash_is_sticky_per_prefix_and_spreads_prefixes(proxy, admin, namespace, backends):
    create_model(admin, namespace, "ph", autoscalingDisabled=True,
                 loadBalancing={"strategy": "PrefixHash", "prefixHash": {"prefixCharLength": 12}})
    bs = [await backends(f"ph{i}") for i in range(3)]
    server_of = {f"{namespace}/{server_pod(admin, namespace, 'ph', b)}": b.name for b in bs}
    await proxy.wait_endpoints(namespace, "ph", 3)
    # the ring's homes, from the Pods' keys alone (names are random: how many prefixes each endpoint is home to varies)
    ring = Ring(256)
    for key in server_of:
        ring.add(key)
    eps = {key: Endpoint(key, "") for key in server_of}
    home: dict[str, str] = {}
    for rnd in range(3):
        for t in range(24):
            prompt = f"tenant-{t:03d} | shared system prompt, then question {rnd}"
            body = {"model": "ph", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": prompt}]}
            code, _, raw = await proxy.post("/openai/v1/chat/completions", body)
            server = orjson.loads(raw)["server"]
            assert code == 200
            assert home.setdefault(prompt[:12], server) == server, "same prefix, same endpoint"
    assert home == {k: server_of[ring.choose(k, eps, 0, 125).endpoint.key] for k in home}, "each prefix at its ring home"
    assert len(set(home.values())) >= 2, home
    assert proxy.metric("kaiwo_proxy_prefixhash_choices_total", outcome="home") == 72


async def test_sse_is_passed_through_chunk_by_chunk(proxy, admin, namespace, backends):
    create_model(admin, namespace, "sse", autoscalingDisabled=True)
    b = await backends("sse")
    b.sse_chunks, b.sse_delay = 4, 0.4
    server_pod(admin, namespace, "sse", b)
    await proxy.wait_endpoints(namespace, "sse", 1)
    t0 = time.monotonic()
    arrivals = []
    async with proxy.http.post(proxy.url + "/openai/v1/chat/completions",
                               json={"model": "sse", "stream": True, "messages": []}) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        async for line in r.content:
            if line.startswith(b"data: "):
                arrivals.append((time.monotonic() - t0, line))
    assert [a[1] for a in arrivals][-1] == b"data: [DONE]\n"
    assert len(arrivals) == 5
    # the server sleeps 0.4 s after each chunk: a buffering proxy would deliver them all at the end
    gaps = [b2[0] - a2[0] for a2, b2 in zip(arrivals, arrivals[1:])]
    assert sum(g >= 0.3 for g in gaps) >= 3, gaps


async def test_a_stream_broken_off_upstream_is_broken_off_for_the_client(proxy, admin, namespace, backends):
    create_model(admin, namespace, "brk", autoscalingDisabled=True)
    b = await backends("brk")
    b.break_stream = True
    server_pod(admin, namespace, "brk", b)
    await proxy.wait_endpoints(namespace, "brk", 1)
    with pytest.raises(aiohttp.ClientPayloadError):
        async with proxy.http.post(proxy.url + "/openai/v1/chat/completions", json={"model": "brk", "stream": True}) as r:
            assert r.status == 200
            await r.read()
    ep = proxy.server.handler.tracker.groups[(namespace, "brk")].endpoints
    await eventually(lambda: all(e.in_flight == 0 for e in ep.values()), what="in-flight slot released")


async def test_retries_on_503_with_a_new_choice_then_passes_the_last_answer(proxy, admin, namespace, backends):
    create_model(admin, namespace, "rt", autoscalingDisabled=True)
    a, b = await backends("rt-a"), await backends("rt-b")
    a.fail_next = b.fail_next = 1
    server_pod(admin, namespace, "rt", a)
    server_pod(admin, namespace, "rt", b)
    await proxy.wait_endpoints(namespace, "rt", 2)
    code, _, raw = await proxy.post("/openai/v1/completions", {"model": "rt", "prompt": "x"})
    assert code == 200, raw
    assert len(a.requests) + len(b.requests) == 3 and len(a.requests) >= 1 and len(b.requests) >= 1
    assert proxy.metric("kaiwo_proxy_upstream_retries_total", reason="503") == 2
    a.fail_next = b.fail_next = 10
    code, _, raw = await proxy.post("/openai/v1/completions", {"model": "rt", "prompt": "x"})
    assert code == 503 and orjson.loads(raw) == {"error": "busy"}
    assert len(a.requests) + len(b.requests) == 3 + 4, "4 attempts in all"
    a.fail_next, a.fail_status = 1, 400
    b.fail_next, b.fail_status = 1, 400
    code, _, _ = await proxy.post("/openai/v1/completions", {"model": "rt", "prompt": "x"})
    assert code == 400 and len(a.requests) + len(b.requests) == 8, "a 400 is not retried"


async def test_transport_error_retries_elsewhere_and_ends_in_502(proxy, admin, namespace, backends):
    create_model(admin, namespace, "dead", autoscalingDisabled=True)
    live, gone = await backends("live"), await backends("gone")
    server_pod(admin, namespace, "dead", live)
    server_pod(admin, namespace, "dead", gone)
    await proxy.wait_endpoints(namespace, "dead", 2)
    await gone.stop()  # connection refused from now on
    for _ in range(4):
        code, _, raw = await proxy.post("/openai/v1/completions", {"model": "dead", "prompt": "x"})
        assert code == 200 and orjson.loads(raw)["server"] == "live"
    await live.stop()
    code, _, raw = await proxy.post("/openai/v1/completions", {"model": "dead", "prompt": "x"})
    assert code == 502 and orjson.loads(raw)["error"]["message"] == "Bad Gateway"


async def test_client_disconnect_cancels_upstream_and_frees_the_slot(proxy, admin, namespace, backends):
    create_model(admin, namespace, "dc", autoscalingDisabled=True)
    b = await backends("dc")
    b.hold.clear()
    server_pod(admin, namespace, "dc", b)
    await proxy.wait_endpoints(namespace, "dc", 1)
    with pytest.raises(asyncio.TimeoutError):
        await proxy.post("/openai/v1/completions", {"model": "dc", "prompt": "x"}, timeout=aiohttp.ClientTimeout(total=1))
    await eventually(lambda: b.disconnects == 1, what="the upstream request cancelled")
    ep = proxy.server.handler.tracker.groups[(namespace, "dc")].endpoints
    await eventually(lambda: all(e.in_flight == 0 for e in ep.values()), what="in-flight slot released")
    await eventually(lambda: proxy.metric("kaiwo_proxy_active_requests", model_namespace=namespace, model_name="dc") == 0)


async def test_per_model_timeout_annotation_gives_504(proxy, admin, namespace, backends):
    create_model(admin, namespace, "to", autoscalingDisabled=True, annotations={"kaiwo.silogen.ai/request-timeout": "1s"})
    await proxy.wait_model(namespace, "to")
    t0 = time.monotonic()
    code, _, raw = await proxy.post("/openai/v1/completions", {"model": "to", "prompt": "x"})  # no endpoint at all
    assert code == 504 and "timeout" in orjson.loads(raw)["error"]["message"]
    assert time.monotonic() - t0 >= 1.0
    b = await backends("to")
    b.hold.clear()
    server_pod(admin, namespace, "to", b)
    await proxy.wait_endpoints(namespace, "to", 1)
    code, _, _ = await proxy.post("/openai/v1/completions", {"model": "to", "prompt": "x"})
    assert code == 504
    await eventually(lambda: b.disconnects == 1, what="the upstream request cancelled at the deadline")


async def test_scale_from_zero_sets_one_replica_and_holds_the_request(proxy, admin, namespace, backends):
    create_model(admin, namespace, "sfz", replicas=0, minReplicas=0)
    await proxy.wait_model(namespace, "sfz")
    pending = [asyncio.create_task(proxy.post("/openai/v1/completions", {"model": "sfz", "prompt": str(i)})) for i in range(3)]
    await eventually(lambda: get_model(admin, namespace, "sfz")["spec"].get("replicas") == 1, what="replicas set to 1")
    await asyncio.sleep(0.3)
    assert not any(p.done() for p in pending), "held until an endpoint is Ready"
    assert proxy.metric("kaiwo_proxy_active_requests", model_namespace=namespace, model_name="sfz") == 3
    # the Model controller's part: a server Pod that becomes Ready
    b = await backends("sfz")
    name = server_pod(admin, namespace, "sfz", b, ready=False)
    await asyncio.sleep(0.3)
    assert not any(p.done() for p in pending)
    set_pod_ready(admin, namespace, name, b.host)
    results = await asyncio.wait_for(asyncio.gather(*pending), 30)
    assert [r[0] for r in results] == [200, 200, 200]
    # autoscaling disabled: nothing writes replicas
    create_model(admin, namespace, "manual", replicas=0, autoscalingDisabled=True,
                 annotations={"kaiwo.silogen.ai/request-timeout": "500ms"})
    await proxy.wait_model(namespace, "manual")
    code, _, _ = await proxy.post("/openai/v1/completions", {"model": "manual", "prompt": "x"})
    assert code == 504 and get_model(admin, namespace, "manual")["spec"]["replicas"] == 0
