"""Fair queuing per tenant through the live proxy (issue #41), with a fake engine that reports vLLM metrics.

The proxy runs with ``--proxy-auth none``, so a tenant is the client's address (127.0.0.2 floods, 127.0.0.3 is
the other tenant): the address the server recorded, not anything the request says.

* saturated Model: the flooding tenant's extra requests wait and the other's are released before them;
* a tenant's full queue answers 429 with ``Retry-After`` in OpenAI's error shape, and no engine receives it;
* an unsaturated Model adds no queueing: every request goes straight to the pick;
* the saturated Model, and only it, receives a ``Saturated`` Event and then a ``SaturationCleared`` one;
* weights: a namespace annotated ``kaiwo.silogen.ai/serving-weight: "3"`` is released three times for the
  other's once (callers known by real ServiceAccount tokens, ``--proxy-auth kubernetes``);
* a namespace listed under a ClusterQueue of the KaiwoQueueConfig weighs that queue's Kueue fair-sharing weight, read
  from the real API server; its Namespace annotation, once set, wins;
* two proxy replicas in front of the same engine: the fair share holds on both;
* a tenant over its share leaves room on the engine: the quiet tenant's next request reaches the engine at once
  while the flood's wait (``--proxy-fair-reserve``, ``--proxy-fair-prefill-yield``);
* quiet engines (``--proxy-fair-quiet-engines``): once a tenant is over its share, the first engine by key takes
  none of its requests, and the other tenant's new conversation goes there though its ring home is the other.
"""

from __future__ import annotations

import asyncio
import uuid

import aiohttp
import orjson
import pytest

from kaiwo_ctrl.serving.proxy.auth import AuthConfig
from kaiwo_ctrl.serving.routing.balance import Endpoint, Ring
from kaiwo_ctrl.serving.limits import FairLimits, ProxyLimits
from kaiwo_ctrl.settings.namespaces import SERVING_WEIGHT_ANNOTATION
from proxy_support import backends, create_model, server_pod, start_proxy, stop_proxy  # noqa: F401 - fixtures
from support import eventually
from support.tokens import bearer, grant_model_user, service_account_token

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


LIMITS = ProxyLimits(fair=FairLimits(enabled=True, max_queue=4, max_wait=20.0, max_pending=1, event_interval=0.5))


def model_events(admin, ns: str) -> list[tuple[str, str, str, str]]:
    """(involved kind, name, uid, reason) of the Events in ``ns`` written by the proxy."""
    return [(e["involvedObject"].get("kind"), e["involvedObject"].get("name"), e["involvedObject"].get("uid"), e["reason"])
            for e in admin.get(f"/api/v1/namespaces/{ns}/events").json()["items"]
            if e.get("reportingComponent") == "kaiwo-proxy"]


@pytest.fixture
async def fair_proxy(control_plane):
    p = await start_proxy(control_plane, limits=LIMITS)
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
        # A's first request goes straight to the engine, which holds it: no room for A (a request of A's
        # without a first token at the only engine)
        tasks = [asyncio.create_task(post_from(a, p, "fq", "a0"))]
        await eventually(lambda: engine.held == 1, what="a0 held at the engine")
        for i in range(1, 5):  # A floods: 4 more wait in A's queue
            tasks.append(asyncio.create_task(post_from(a, p, "fq", f"a{i}")))
        await eventually(lambda: gate.waiting(key, A) == 4, what="A's 4 extra requests queued")
        assert engine.held == 1 and len(engine.requests) == 1, "nothing queued reached the engine"
        # then B asks: its first request is released at once, ahead of A's 4 (B has its own prefill lane at the
        # engine, which reports room), its second waits behind it in B's queue
        tasks.append(asyncio.create_task(post_from(b, p, "fq", "b0")))
        await eventually(lambda: engine.held == 2, what="b0 released to the engine")
        tasks.append(asyncio.create_task(post_from(b, p, "fq", "b1")))
        await eventually(lambda: gate.waiting(key, B) == 1, what="b1 queued")
        assert gate.waiting(key, A) == 4 and len(engine.requests) == 2

        # A's queue is full: a 5th waiting request is refused at once, in OpenAI's shape, with Retry-After
        code, headers, raw = await post_from(a, p, "fq", "a-refused")
        assert code == 429 and headers["Retry-After"] == "20"
        err = orjson.loads(raw)["error"]
        assert err["code"] == 429 and err["type"] == "rate_limit_exceeded" and "queue" in err["message"]
        assert gate.waiting(key, B) == 1, "B's queue is its own"

        engine.hold.set()  # the engine frees capacity: the queues are released one at a time, round-robin
        results = await asyncio.gather(*tasks)
    assert [r[0] for r in results] == [200] * 7
    received = [orjson.loads(r["body"])["prompt"] for r in engine.requests]
    assert received == ["a0", "b0", "a1", "b1", "a2", "a3", "a4"], "B was released before A's later requests"
    assert "a-refused" not in received
    assert p.metric("kaiwo_proxy_fair_requests_total", model_name="fq", tenant=A, outcome="rejected") == 1
    assert p.metric("kaiwo_proxy_fair_requests_total", model_name="fq", tenant=B, outcome="released") == 2
    assert p.metric("kaiwo_proxy_fair_requests_total", model_name="fq", tenant=A, outcome="released") == 4
    assert p.metric("kaiwo_proxy_fair_queue_length", model_name="fq", tenant=A) == 0

    # the saturated Model received the Events, on the Model itself (its uid), and they name no tenant
    uid = admin.get(f"/apis/kubeai.org/v1/namespaces/{namespace}/models/fq").json()["metadata"]["uid"]
    await eventually(lambda: sorted(r for _, _, _, r in model_events(admin, namespace)) == ["Saturated", "SaturationCleared"],
                     timeout=30, what="Saturated, then SaturationCleared on the Model")
    assert {(k, n, u) for k, n, u, _ in model_events(admin, namespace)} == {("Model", "fq", uid)}
    for e in admin.get(f"/api/v1/namespaces/{namespace}/events").json()["items"]:
        assert A not in e["message"] and B not in e["message"]


async def test_a_quiet_engine_takes_none_of_the_flood_and_the_other_tenants_new_conversation(
        fair_proxy, admin, namespace, backends):
    p = fair_proxy
    create_model(admin, namespace, "qe", autoscalingDisabled=True, loadBalancing={"strategy": "PrefixHash"})
    quiet, busy = await backends("quiet"), await backends("busy")
    for e in (quiet, busy):
        e.engine = True
        e.hold.clear()
    server_pod(admin, namespace, "qe", quiet, name="qe-0")  # the first by key: the quiet engine once A is over
    server_pod(admin, namespace, "qe", busy, name="qe-1")
    await p.wait_endpoints(namespace, "qe", 2)
    await eventually(lambda: engines_reported(p, namespace, "qe"), what="both engines reported")
    ring, eps = Ring(256), {f"{namespace}/qe-{i}": Endpoint(f"{namespace}/qe-{i}", "") for i in range(2)}
    for k in eps:
        ring.add(k)
    new_conversation = next(t for t in (f"b-new-{i}" for i in range(100))
                            if ring.choose(t, eps, 0, 125).endpoint.key == f"{namespace}/qe-1")
    gate, key = p.server.handler.fair, (namespace, "qe")

    def prompts(engine) -> list[str]:
        return [orjson.loads(r["body"])["prompt"] for r in engine.requests]

    async with client(A) as a, client(B) as b:
        tasks = [asyncio.create_task(post_from(b, p, "qe", "b0"))]
        await eventually(lambda: quiet.held + busy.held == 1, what="b0 at an engine")
        # A's first two: not over its share when sent (0, then 1, against B's 1); one prompt per engine each
        for i in range(2):
            tasks.append(asyncio.create_task(post_from(a, p, "qe", f"a{i}")))
            await eventually(lambda: quiet.held + busy.held == 2 + i, what=f"a{i} at an engine")
        at_quiet = prompts(quiet)
        # A holds 2 of 3: over its half. The quiet engine takes none of its next ones; its lane at the other is
        # taken, so they wait in A's queue
        for i in range(2, 5):
            tasks.append(asyncio.create_task(post_from(a, p, "qe", f"a{i}")))
        await eventually(lambda: gate.waiting(key, A) == 3, what="A's next three queued")
        assert prompts(quiet) == at_quiet, "nothing of A's reached the quiet engine once A was over its share"
        # B's new conversation, whose ring home is the other engine, goes to the quiet one
        tasks.append(asyncio.create_task(post_from(b, p, "qe", new_conversation)))
        await eventually(lambda: new_conversation in prompts(quiet), what="B's new conversation at the quiet engine")
        assert new_conversation not in prompts(busy)
        assert prompts(quiet) == [*at_quiet, new_conversation] and gate.waiting(key, A) == 3
        quiet.hold.set()  # then everything ends: with nothing in flight A is over nothing, and goes anywhere
        busy.hold.set()
        results = await asyncio.gather(*tasks)
    assert [r[0] for r in results] == [200] * 7


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
    await p.mgr.recorder.flush()
    assert model_events(admin, namespace) == [], "a Model that never saturated gets no Event"


async def flood_then_release(engine, gate, key, first, floods, others, post, released_at_once: int) -> list:
    """``first`` goes straight to the held engine (no more room for its tenant), ``floods`` then ``others`` queue
    -- but the first ``released_at_once`` of ``others`` reach the engine at once; the callers' tasks."""
    tasks = [asyncio.create_task(post(first))]
    held = engine.held
    await eventually(lambda: engine.held == held + 1, what=f"{first[1]} held at the engine")
    for caller, prompt in floods:
        tasks.append(asyncio.create_task(post((caller, prompt))))
        await eventually(lambda: gate.waiting(key, caller[0]) == len(tasks) - 1, what=f"{prompt} queued")
    for i, (caller, prompt) in enumerate(others):
        tasks.append(asyncio.create_task(post((caller, prompt))))
        if i < released_at_once:
            await eventually(lambda: engine.held == held + 2 + i, what=f"{prompt} released at once")
        else:
            await eventually(lambda: gate.waiting(key, caller[0]) == i + 1 - released_at_once, what=f"{prompt} queued")
    return tasks


async def test_a_namespace_weight_changes_the_release_order(control_plane, admin, namespace, backends):
    """The engine reports no metrics and the proxy allows one request in flight there (--proxy-fair-in-flight-cap
    1): requests are released one at a time as the previous one ends, so the weights alone decide the order."""
    heavy, light = f"heavy-{uuid.uuid4().hex[:6]}", f"light-{uuid.uuid4().hex[:6]}"
    assert admin.post("/api/v1/namespaces", json={"metadata": {"name": heavy, "annotations": {SERVING_WEIGHT_ANNOTATION: "3"}}}).status_code == 201
    assert admin.post("/api/v1/namespaces", json={"metadata": {"name": light, "annotations": {SERVING_WEIGHT_ANNOTATION: "many"}}}).status_code == 201
    tokens = {}
    for ns in (heavy, light):
        tokens[ns] = service_account_token(admin, ns, "caller")
        grant_model_user(admin, namespace, ns, "caller", binding=f"users-{ns}")
    limits = ProxyLimits(fair=FairLimits(enabled=True, max_queue=8, max_wait=20.0, in_flight_cap=1, event_interval=0.5))
    p = await start_proxy(control_plane, limits=limits, auth=AuthConfig(ttl=30.0, deny_ttl=0.3))
    try:
        create_model(admin, namespace, "wq", autoscalingDisabled=True)
        engine = await backends("weights")
        server_pod(admin, namespace, "wq", engine)
        await p.wait_endpoints(namespace, "wq", 1)
        gate, key = p.server.handler.fair, (namespace, "wq")
        await eventually(lambda: gate.weight(heavy) == 3, what="the heavy namespace's weight read")
        assert gate.weight(light) == 1, "a bad weight counts as 1"

        async def post(item) -> tuple[int, bytes]:
            (ns, token), prompt = item
            async with p.http.post(p.url + "/openai/v1/completions", data=orjson.dumps({"model": "wq", "prompt": prompt}),
                                   headers={"Content-Type": "application/json", **bearer(token)}) as r:
                return r.status, await r.read()

        for ns in (heavy, light):  # each caller's review is made (and cached) before the order matters
            await eventually(lambda: _ok(post(((ns, tokens[ns]), f"warm-{ns[:5]}"))), timeout=30, what=f"{ns} allowed")
        engine.requests.clear()
        engine.hold.clear()
        h, lt = (heavy, tokens[heavy]), (light, tokens[light])
        tasks = await flood_then_release(engine, gate, key, (h, "h0"), [(h, f"h{i}") for i in range(1, 7)],
                                         [(lt, "l0"), (lt, "l1")], post, released_at_once=0)
        engine.hold.set()
        results = await asyncio.gather(*tasks)
        assert [r[0] for r in results] == [200] * 9
        received = [orjson.loads(r["body"])["prompt"] for r in engine.requests]
        # weight 3 against 1, smooth: H H L H H H L H (equal weights would give H L H L H H H H)
        assert received == ["h0", "h1", "h2", "l0", "h3", "h4", "h5", "l1", "h6"]
    finally:
        await stop_proxy(p)


async def _ok(call) -> bool:
    return (await call)[0] == 200


async def test_two_replicas_each_release_the_other_tenant_first(control_plane, admin, namespace, backends):
    """Two live proxies before the same engine, each receiving part of both tenants' load: on both, the flooding
    tenant's extra requests wait and the other tenant's are released before them."""
    p1 = await start_proxy(control_plane, limits=LIMITS)
    p2 = await start_proxy(control_plane, limits=LIMITS)
    try:
        create_model(admin, namespace, "rq", autoscalingDisabled=True)
        engine = await backends("replicas")
        engine.engine = True
        engine.max_num_seqs = 8
        server_pod(admin, namespace, "rq", engine)
        for p in (p1, p2):
            await p.wait_endpoints(namespace, "rq", 1)
            await eventually(lambda: engines_reported(p, namespace, "rq"), what="the engine reported")
        engine.hold.clear()
        key = (namespace, "rq")
        async with client(A) as a, client(B) as b:
            sessions = {A: a, B: b}
            tasks = []
            for name, p in (("p1", p1), ("p2", p2)):
                async def post(item, p=p):
                    (tenant,), prompt = item
                    return await post_from(sessions[tenant], p, "rq", prompt)
                tasks += await flood_then_release(engine, p.server.handler.fair, key, ((A,), f"{name}-a0"),
                                                  [((A,), f"{name}-a{i}") for i in range(1, 5)],
                                                  [((B,), f"{name}-b0"), ((B,), f"{name}-b1")], post, released_at_once=1)
            assert engine.held == 4, "each replica sent one request of each tenant, the rest wait in its own queues"
            engine.hold.set()
            results = await asyncio.gather(*tasks)
        assert [r[0] for r in results] == [200] * 14
        received = [orjson.loads(r["body"])["prompt"] for r in engine.requests]
        for name in ("p1", "p2"):
            mine = [x.split("-", 1)[1] for x in received if x.startswith(name + "-")]
            assert mine == ["a0", "b0", "a1", "b1", "a2", "a3", "a4"], f"{name}: B released before A's later requests"
    finally:
        await stop_proxy(p1)
        await stop_proxy(p2)


async def test_a_tenant_over_its_share_leaves_room_for_the_other(control_plane, admin, namespace, backends):
    """An engine without metrics and at most 4 in flight there (--proxy-fair-in-flight-cap 4). Once B is active, A
    (the flood) stops at its share and leaves room, so B's next request is not queued behind A's but reaches the
    engine while A's wait: with a reserve of 2, and (no reserve) by yielding to B's request without an answer
    yet. With neither, the same load fills the cap and B waits."""
    for reserve, prefill_yield, b1_at_once in ((2, False, True), (0, True, True), (0, False, False)):
        limits = ProxyLimits(fair=FairLimits(enabled=True, max_queue=8, max_wait=20.0, in_flight_cap=4, reserve=reserve,
                                             prefill_yield=prefill_yield, event_interval=0.5))
        p = await start_proxy(control_plane, limits=limits)
        try:
            model = f"sq{reserve}{int(prefill_yield)}"
            create_model(admin, namespace, model, autoscalingDisabled=True)
            engine = await backends(model)
            server_pod(admin, namespace, model, engine)
            await p.wait_endpoints(namespace, model, 1)
            gate, key = p.server.handler.fair, (namespace, model)
            engine.hold.clear()
            async with client(A) as a, client(B) as b:
                tasks = [asyncio.create_task(post_from(b, p, model, "b0"))]
                await eventually(lambda: engine.held == 1, what="b0 at the engine")
                for i in range(4):  # A floods: 2 reach the engine (A then holds 2 of 3: over its half), or 3 (the cap)
                    tasks.append(asyncio.create_task(post_from(a, p, model, f"a{i}")))
                sent = 2 if b1_at_once else 3
                await eventually(lambda: engine.held == 1 + sent and gate.waiting(key, A) == 4 - sent,
                                 what=f"{sent} of A's at the engine, the rest waiting")
                tasks.append(asyncio.create_task(post_from(b, p, model, "b1")))
                if b1_at_once:
                    await eventually(lambda: engine.held == 4, what="b1 at the engine while A's wait")
                    assert gate.waiting(key, A) == 2 and gate.waiting(key, B) == 0
                else:
                    await eventually(lambda: gate.waiting(key, B) == 1, what="b1 waits: the flood filled the cap")
                    assert engine.held == 4 and gate.waiting(key, A) == 1
                engine.hold.set()
                results = await asyncio.gather(*tasks)
            assert [r[0] for r in results] == [200] * 6
            received = [orjson.loads(r["body"])["prompt"] for r in engine.requests]
            # without a fence: after A's last, which queued first
            assert received.index("b1") == (3 if b1_at_once else 5), received
        finally:
            await stop_proxy(p)


QC_URL = "/apis/kaiwo.silogen.ai/v1alpha1/kaiwoqueueconfigs"


async def test_a_namespace_weighs_its_clusterqueues_fair_sharing_weight(control_plane, admin, namespace):
    team = f"team-{uuid.uuid4().hex[:6]}"
    assert admin.post("/api/v1/namespaces", json={"metadata": {"name": team}}).status_code == 201
    before = admin.get(f"{QC_URL}/kaiwo")
    queue = {"name": f"serving-{team}", "namespaces": [team], "spec": {"fairSharing": {"weight": "4"}}}
    if before.status_code == 404:
        r = admin.post(QC_URL, json={"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoQueueConfig",
                                     "metadata": {"name": "kaiwo"}, "spec": {"clusterQueues": [queue]}})
    else:
        cur = before.json()
        cur["spec"]["clusterQueues"] = [*(cur["spec"].get("clusterQueues") or []), queue]
        r = admin.put(f"{QC_URL}/kaiwo", json=cur)
    assert r.status_code in (200, 201), r.text
    p = await start_proxy(control_plane, limits=LIMITS)
    try:
        weight = p.server.handler.fair.weight
        await eventually(lambda: weight(team) == 4, what="the ClusterQueue's weight read")
        assert weight(namespace) == 1, "a namespace under no weighted queue weighs 1"
        patch = {"metadata": {"annotations": {SERVING_WEIGHT_ANNOTATION: "2"}}}
        assert admin.patch(f"/api/v1/namespaces/{team}", json=patch,
                           headers={"Content-Type": "application/merge-patch+json"}).status_code == 200
        await eventually(lambda: weight(team) == 2, what="the Namespace's annotation wins")
    finally:
        await stop_proxy(p)
        if before.status_code == 404:
            admin.delete(f"{QC_URL}/kaiwo")
        else:
            cur = admin.get(f"{QC_URL}/kaiwo").json()
            cur["spec"] = before.json()["spec"]
            admin.put(f"{QC_URL}/kaiwo", json=cur)
        admin.delete(f"/api/v1/namespaces/{team}")
