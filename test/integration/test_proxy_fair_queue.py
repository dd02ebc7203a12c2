"""Fair queuing per tenant through the live proxy (issue #41), with a fake engine that reports vLLM metrics.

The proxy runs with ``--proxy-auth none``, so a tenant is the client's address (127.0.0.2 floods, 127.0.0.3 is
the other tenant): the address the server recorded, not anything the request says.

* saturated Model: the flooding tenant's extra requests wait and the other's are released before them;
* a tenant's full queue answers 429 with ``Retry-After`` in OpenAI's error shape, and no engine receives it;
* an unsaturated Model adds no queueing: every request goes straight to the pick.
"""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
import pytest

from kaiwo_ctrl.serving.limits import FairLimits, ProxyLimits
from proxy_support import backends, create_model, server_pod, start_proxy, stop_proxy  # noqa: F401 - fixtures
from support import eventually

pytestmark = pytest.mark.integration

A, B = "127.0.0.2", "127.0.0.3"


def engines_reported(p, ns: str, model: str) -> bool:
    g = p.server.handler.tracker.groups.get((ns, model))
    return g is not None and bool(g.endpoints) and all(e.engine is not None for e in g.endpoints.values())


async def post_from(session: aiohttp.ClientSession, p, model: str, prompt: str) -> tuple[int, dict, bytes]:
    async with session.post(p.url + "/openai/v1/completions", data=orjson.dumps({"model": model, "prompt": prompt}),
                            headers={"Content-Type": "application/json"}) as r:
        return r.status, dict(r.headers), await r.read()


def client(address: str) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(address, 0), limit=0),
                                 timeout=aiohttp.ClientTimeout(total=60))


@pytest.fixture
async def fair_proxy(control_plane):
    limits = ProxyLimits(fair=FairLimits(enabled=True, max_queue=4, max_wait=20.0, max_pending=1))
    p = await start_proxy(control_plane, limits=limits)
    yield p
    await stop_proxy(p)


async def test_the_flooding_tenant_waits_and_the_other_is_released_first(fair_proxy, admin, namespace, backends):
    p = fair_proxy
    create_model(admin, namespace, "fq", autoscalingDisabled=True)
    engine = await backends("engine")
    engine.engine = True
    engine.hold.clear()
    server_pod(admin, namespace, "fq", engine)
    await p.wait_endpoints(namespace, "fq", 1)
    await eventually(lambda: engines_reported(p, namespace, "fq"), what="the engine reported")
    gate, key = p.server.handler.fair, (namespace, "fq")
    async with client(A) as a, client(B) as b:
        # A's first request goes straight to the engine, which holds it: the Model is saturated (a request
        # without a first token at the only engine)
        tasks = [asyncio.create_task(post_from(a, p, "fq", "a0"))]
        await eventually(lambda: engine.held == 1, what="a0 held at the engine")
        for i in range(1, 5):  # A floods: 4 more wait in A's queue
            tasks.append(asyncio.create_task(post_from(a, p, "fq", f"a{i}")))
        await eventually(lambda: gate.waiting(key, A) == 4, what="A's 4 extra requests queued")
        for i in range(2):  # then B asks
            tasks.append(asyncio.create_task(post_from(b, p, "fq", f"b{i}")))
        await eventually(lambda: gate.waiting(key, B) == 2, what="B's 2 requests queued")
        assert engine.held == 1 and len(engine.requests) == 1, "nothing queued reached the engine"

        # A's queue is full: a 5th waiting request is refused at once, in OpenAI's shape, with Retry-After
        code, headers, raw = await post_from(a, p, "fq", "a-refused")
        assert code == 429 and headers["Retry-After"] == "20"
        err = orjson.loads(raw)["error"]
        assert err["code"] == 429 and err["type"] == "rate_limit_exceeded" and "queue" in err["message"]
        assert gate.waiting(key, B) == 2, "B's queue is its own"

        engine.hold.set()  # the engine frees capacity: the queues are released one at a time, round-robin
        results = await asyncio.gather(*tasks)
    assert [r[0] for r in results] == [200] * 7
    received = [orjson.loads(r["body"])["prompt"] for r in engine.requests]
    assert received == ["a0", "a1", "b0", "a2", "b1", "a3", "a4"], "B was released before A's later requests"
    assert "a-refused" not in received
    assert p.metric("kaiwo_proxy_fair_requests_total", model_name="fq", tenant=A, outcome="rejected") == 1
    assert p.metric("kaiwo_proxy_fair_requests_total", model_name="fq", tenant=B, outcome="released") == 2
    assert p.metric("kaiwo_proxy_fair_requests_total", model_name="fq", tenant=A, outcome="released") == 4
    assert p.metric("kaiwo_proxy_fair_queue_length", model_name="fq", tenant=A) == 0


async def test_an_unsaturated_model_adds_no_queueing(fair_proxy, admin, namespace, backends):
    p = fair_proxy
    create_model(admin, namespace, "nq", autoscalingDisabled=True)
    one, two = await backends("one"), await backends("two")
    one.engine = two.engine = True
    server_pod(admin, namespace, "nq", one)
    server_pod(admin, namespace, "nq", two)
    await p.wait_endpoints(namespace, "nq", 2)
    await eventually(lambda: engines_reported(p, namespace, "nq"), what="both engines reported")
    async with client(A) as a, client(B) as b:
        for i in range(4):
            assert (await post_from(a, p, "nq", f"a{i}"))[0] == 200
            assert (await post_from(b, p, "nq", f"b{i}"))[0] == 200
    assert len(one.requests) + len(two.requests) == 8
    for tenant in (A, B):
        assert p.metric("kaiwo_proxy_fair_requests_total", model_name="nq", tenant=tenant, outcome="direct") == 4
        assert p.metric("kaiwo_proxy_fair_requests_total", model_name="nq", tenant=tenant, outcome="queued") == 0
