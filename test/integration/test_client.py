"""The raw-JSON client on a real apiserver: verbs, errors, 409 handling, events."""

from __future__ import annotations

import asyncio

import pytest

from kaiwo_ctrl.runtime.api.client import ApiError, retry_on_conflict
from kaiwo_ctrl.runtime.observe.events import EventRecorder
from kaiwo_ctrl.kinds import LOCALQUEUES
from kaiwo_ctrl.runtime.api.resources import CONFIGMAPS, EVENTS
from support import eventually

pytestmark = pytest.mark.integration


async def test_verbs_and_typed_errors(client, namespace):
    cm = {"metadata": {"name": "a", "namespace": namespace}, "data": {"x": "1"}}
    created = await client.create(CONFIGMAPS, cm)
    assert created["kind"] == "ConfigMap" and created["metadata"]["uid"]
    with pytest.raises(ApiError) as e:
        await client.create(CONFIGMAPS, cm)
    assert e.value.already_exists and not e.value.conflict
    assert await client.get_or_none(CONFIGMAPS, "missing", namespace) is None
    # server-side apply with our field manager, idempotent
    applied = await client.apply(CONFIGMAPS, {"metadata": {"name": "b", "namespace": namespace}, "data": {"k": "v"}})
    again = await client.apply(CONFIGMAPS, {"metadata": {"name": "b", "namespace": namespace}, "data": {"k": "v"}})
    assert applied["metadata"]["resourceVersion"] == again["metadata"]["resourceVersion"]
    assert any(m["manager"] == "kaiwo-ctrl" for m in again["metadata"]["managedFields"])
    # a stale resourceVersion is a conflict
    stale = dict(created, data={"x": "2"})
    await client.patch(CONFIGMAPS, "a", {"data": {"x": "3"}}, namespace)
    with pytest.raises(ApiError) as e:
        await client.replace(CONFIGMAPS, stale)
    assert e.value.conflict and e.value.status == 409
    items, rv = await client.list_all(CONFIGMAPS, namespace, page=1)
    assert {i["metadata"]["name"] for i in items} >= {"a", "b"} and rv
    # page by page, the first page at a resourceVersion; later pages follow the continue token
    pages = [(page, prv) async for page, prv in client.list_pages(CONFIGMAPS, namespace, 1, resource_version=rv, resource_version_match="NotOlderThan")]
    assert len(pages) == len(items) and all(len(page) == 1 for page, _ in pages)
    assert {p[0][0]["metadata"]["name"] for p in pages} == {i["metadata"]["name"] for i in items}
    assert await client.delete(CONFIGMAPS, "a", namespace) is not None
    assert await client.delete(CONFIGMAPS, "a", namespace) is None  # already gone: not an error
    with pytest.raises(ApiError) as e:
        await client.create(CONFIGMAPS, {"metadata": {"name": "Bad_Name", "namespace": namespace}})
    assert e.value.invalid and "Bad_Name" in e.value.message


async def test_list_stream_matches_a_plain_list(client, namespace):
    """One list decoded item by item, for a built-in kind (its list's metadata
    comes first) and a custom resource (sorted keys: metadata after the items)."""
    for i in range(30):
        await client.create(CONFIGMAPS, {"metadata": {"name": f"s{i:02}", "namespace": namespace, "labels": {"odd": str(i % 2)}}})
        await client.create(LOCALQUEUES, {"metadata": {"name": f"q{i:02}", "namespace": namespace}, "spec": {"clusterQueue": "cq"}})
    for res, sel in ((CONFIGMAPS, "odd=1"), (CONFIGMAPS, None), (LOCALQUEUES, None)):
        batches = [(list(batch), rv) async for batch, rv in client.list_stream(res, namespace, label_selector=sel, drop_managed_fields=True)]
        got = [obj for batch, _ in batches for obj in batch]
        want, want_rv = await client.list_all(res, namespace)
        if sel:
            want = [o for o in want if o["metadata"].get("labels", {}).get("odd") == "1"]
        for o in want:
            o["metadata"].pop("managedFields", None)
        assert got == want and len(got) >= 15
        assert [rv for _, rv in batches[:-1]] == [None] * (len(batches) - 1)
        assert int(batches[-1][1]) >= int(want_rv) > 0
    with pytest.raises(ApiError) as e:
        [b async for b in client.list_stream(CONFIGMAPS, namespace, field_selector="no.such.field=1")]
    assert e.value.status == 400


async def test_retry_on_conflict_rereads(client, namespace):
    await client.create(CONFIGMAPS, {"metadata": {"name": "counter", "namespace": namespace}, "data": {"n": "0"}})

    async def bump() -> None:
        async def once():
            cur = await client.get(CONFIGMAPS, "counter", namespace)
            cur["data"]["n"] = str(int(cur["data"]["n"]) + 1)
            return await client.replace(CONFIGMAPS, cur)

        await retry_on_conflict(once, attempts=50)

    await asyncio.gather(*(bump() for _ in range(10)))
    final = await client.get(CONFIGMAPS, "counter", namespace)
    assert final["data"]["n"] == "10"  # no lost update


async def test_event_recorder_aggregates(client, namespace):
    obj = await client.create(CONFIGMAPS, {"metadata": {"name": "subject", "namespace": namespace}})
    rec = EventRecorder(client, "test-recorder").for_component("test-recorder")
    for _ in range(3):
        rec.normal(obj, "Synced", "all good")
    rec.warning(obj, "Broken", "something failed")
    await rec.recorder.flush()

    async def events():
        out = await client.list(EVENTS, namespace)
        return {e["reason"]: e for e in out["items"] if e["involvedObject"]["name"] == "subject"}

    got = await eventually(lambda: _both(events), what="two aggregated events")
    assert got["Synced"]["count"] == 3 and got["Synced"]["type"] == "Normal"
    assert got["Broken"]["type"] == "Warning" and got["Broken"]["involvedObject"]["uid"] == obj["metadata"]["uid"]
    await rec.recorder.close()


async def _both(fn):
    ev = await fn()
    return ev if {"Synced", "Broken"} <= set(ev) and ev["Synced"]["count"] == 3 else None


async def test_spam_filter_is_per_component(client, namespace):
    obj = await client.create(CONFIGMAPS, {"metadata": {"name": "noisy", "namespace": namespace}})
    recorder = EventRecorder(client, "x", burst=2, refill_every=3600)
    noisy, quiet = recorder.for_component("noisy-monitor"), recorder.for_component("workload-controller")
    for i in range(5):
        noisy.warning(obj, "Low", f"sample {i}")  # only the first 2 pass the bucket
    quiet.warning(obj, "Terminated", "terminated early")
    await recorder.flush()

    async def reasons():
        out = await client.list(EVENTS, namespace)
        return sorted(e["reason"] for e in out["items"] if e["involvedObject"]["name"] == "noisy")

    got = await eventually(lambda: _when(reasons, lambda r: "Terminated" in r), what="the other component's event")
    assert got.count("Low") == 2
    await recorder.close()


async def _when(fn, pred):
    v = await fn()
    return v if pred(v) else None

