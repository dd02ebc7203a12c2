"""The shared informer against a real kube-apiserver: events, restart, 410."""

from __future__ import annotations

import asyncio
import base64
import shutil
from collections import Counter

import httpx
import pytest

from kaiwo_ctrl.local.controlplane import ControlPlane, free_port
from kaiwo_ctrl.runtime.api.client import Client, RestConfig
from kaiwo_ctrl.runtime.cache.informer import Informer
from kaiwo_ctrl.runtime.api.resources import CONFIGMAPS
from support import eventually
from support.netfault import Relay

pytestmark = pytest.mark.integration


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, bool]] = []

    def on_add(self, obj, initial):
        self.events.append(("add", obj["metadata"]["name"], initial))

    def on_update(self, old, new):
        self.events.append(("update", new["metadata"]["name"], False))

    def on_delete(self, obj, tombstone):
        self.events.append(("delete", obj["metadata"]["name"], tombstone))


class Reasons:
    def __init__(self) -> None:
        self.relists: Counter[str] = Counter()
        self.restarts: Counter[str] = Counter()

    def informer_event(self, kind, t):
        pass

    def informer_objects(self, kind, n):
        pass

    def informer_relist(self, kind, reason):
        self.relists[reason] += 1

    def informer_watch_restart(self, kind, reason):
        self.restarts[reason] += 1


def started(client: Client, namespace: str, **kw) -> tuple[Informer, Recorder]:
    """A started ConfigMap informer on ``namespace`` with a recording handler."""
    inf = Informer(client, CONFIGMAPS, namespace=namespace, **kw)
    rec = Recorder()
    inf.add_handler(rec)
    inf.start()
    return inf, rec


def cm(name: str, **data: str) -> dict:
    return {"metadata": {"name": name}, "data": data}


def server_state(admin, ns: str) -> dict[str, str]:
    items = admin.get(f"/api/v1/namespaces/{ns}/configmaps").json()["items"]
    return {i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in items}


def cache_state(inf: Informer) -> dict[str, str]:
    return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in inf.list()}


async def test_sees_create_update_delete(client, admin, namespace):
    admin.post(f"/api/v1/namespaces/{namespace}/configmaps", json=cm("before", a="1"))
    inf, rec = started(client, namespace)
    try:
        assert await inf.wait_synced(30)
        assert rec.events == [("add", "before", True)]
        admin.post(f"/api/v1/namespaces/{namespace}/configmaps", json=cm("x", a="1"))
        await eventually(lambda: inf.get("x", namespace), what="x cached")
        admin.patch(
            f"/api/v1/namespaces/{namespace}/configmaps/x",
            json={"data": {"a": "2"}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        await eventually(lambda: (inf.get("x", namespace) or {}).get("data") == {"a": "2"}, what="update cached")
        admin.delete(f"/api/v1/namespaces/{namespace}/configmaps/x")
        await eventually(lambda: inf.get("x", namespace) is None, what="delete cached")
        assert rec.events[1:] == [("add", "x", False), ("update", "x", False), ("delete", "x", False)]
        # managedFields are trimmed from the cache
        assert "managedFields" not in inf.get("before", namespace)["metadata"]
        # a handler registered late gets the cached objects as initial adds
        late = Recorder()
        inf.add_handler(late)
        assert late.events == [("add", "before", True)]
    finally:
        await inf.stop()


async def test_recovers_after_apiserver_restart(control_plane, client, admin, namespace):
    for n in ("a", "b"):
        admin.post(f"/api/v1/namespaces/{namespace}/configmaps", json=cm(n, v="0"))
    reasons = Reasons()
    inf = Informer(client, CONFIGMAPS, namespace=namespace, metrics=reasons)
    inf._backoff.initial = 0.2
    inf.start()
    try:
        assert await inf.wait_synced(30)
        control_plane.stop_apiserver()
        await asyncio.sleep(1.0)
        control_plane.start_apiserver()
        # change the world right after the restart, before the informer is back
        admin.post(f"/api/v1/namespaces/{namespace}/configmaps", json=cm("c", v="1"))
        admin.delete(f"/api/v1/namespaces/{namespace}/configmaps/a")
        admin.patch(
            f"/api/v1/namespaces/{namespace}/configmaps/b",
            json={"data": {"v": "2"}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        want = server_state(admin, namespace)
        await eventually(lambda: cache_state(inf) == want, timeout=60, what="cache equals server list")
        assert set(want) == {"b", "c"}
        assert sum(reasons.restarts.values()) + sum(reasons.relists.values()) >= 1
        assert inf.last_error is not None  # it did see the outage
    finally:
        await inf.stop()


def _etcd_compact(control_plane) -> int:
    base = f"http://127.0.0.1:{control_plane.etcd_port}"
    rev = int(httpx.post(f"{base}/v3/kv/range", json={"key": base64.b64encode(b"/").decode()}).json()["header"]["revision"])
    r = httpx.post(f"{base}/v3/kv/compaction", json={"revision": str(rev), "physical": True})
    assert r.status_code == 200, r.text
    return rev


async def test_410_gone_leads_to_relist_with_final_state(control_plane, admin, namespace):
    """Watch resumes from a compacted resourceVersion -> 410 -> relist; nothing missed."""
    relay = await Relay(control_plane.api_port).start()
    cfg = await RestConfig.load(str(control_plane.kubeconfig))
    cfg.host = f"https://127.0.0.1:{relay.port}"
    c = Client(cfg)
    for n in ("keep", "gone", "changed"):
        admin.post(f"/api/v1/namespaces/{namespace}/configmaps", json=cm(n, v="0"))
    reasons = Reasons()
    rec = Recorder()
    inf = Informer(c, CONFIGMAPS, namespace=namespace, metrics=reasons)
    inf._backoff.initial = 0.2
    inf.add_handler(rec)
    inf.start()
    try:
        assert await inf.wait_synced(30)
        old_rv = inf.last_sync_rv
        relay.cut()  # the informer is partitioned away
        await asyncio.sleep(0.3)
        admin.delete(f"/api/v1/namespaces/{namespace}/configmaps/gone")
        admin.patch(
            f"/api/v1/namespaces/{namespace}/configmaps/changed",
            json={"data": {"v": "final"}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        admin.post(f"/api/v1/namespaces/{namespace}/configmaps", json=cm("new", v="1"))
        rev = _etcd_compact(control_plane)
        assert rev > int(old_rv)
        # a fresh watch cache starts after the compaction: the old RV is too old everywhere
        control_plane.stop_apiserver()
        control_plane.start_apiserver()
        relay.heal()
        want = server_state(admin, namespace)
        await eventually(lambda: cache_state(inf) == want, timeout=60, what="cache equals server list after 410")
        assert reasons.relists["expired"] >= 1, (reasons.relists, reasons.restarts, inf.last_error)
        assert inf.get("changed", namespace)["data"] == {"v": "final"}
        # the delete we never saw arrives as a tombstone
        assert ("delete", "gone", True) in rec.events
    finally:
        await inf.stop()
        await c.close()
        await relay.close()


async def test_streaming_list_then_the_same_stream_watches(client, admin, namespace):
    """With watch_list, the initial list arrives as a watch with sendInitialEvents: no LIST, one WATCH."""
    for n in ("a", "b", "c"):
        admin.post(f"/api/v1/namespaces/{namespace}/configmaps", json=cm(n, v="0"))
    before = client.counts.copy()
    inf, rec = started(client, namespace, watch_list=True)
    try:
        assert await inf.wait_synced(30)
        assert sorted(rec.events) == [("add", n, True) for n in ("a", "b", "c")]
        assert cache_state(inf) == server_state(admin, namespace)
        assert inf.watch_list and inf.last_sync_rv
        admin.post(f"/api/v1/namespaces/{namespace}/configmaps", json=cm("d", v="1"))
        await eventually(lambda: inf.get("d", namespace), what="d cached")
        assert ("add", "d", False) in rec.events
        assert client.counts["GET"] - before["GET"] == 0  # no LIST
        assert client.counts["WATCH"] - before["WATCH"] == 1
        # managedFields are trimmed as each object arrives
        assert "managedFields" not in inf.get("a", namespace)["metadata"]
    finally:
        await inf.stop()


async def test_one_list_decoded_as_it_arrives_then_a_watch(client, admin, namespace):
    """By default the initial list is one LIST (not paged), its objects taken
    one by one as the response arrives, then one WATCH from its resourceVersion."""
    for i in range(120):  # ~0.5 MiB of list: many reads of the response
        admin.post(f"/api/v1/namespaces/{namespace}/configmaps", json=cm(f"c{i:03}", v="x" * 4000))
    before = client.counts.copy()
    inf, rec = started(client, namespace)
    try:
        assert await inf.wait_synced(30)
        assert not inf.watch_list
        assert client.counts["GET"] - before["GET"] == 1
        assert cache_state(inf) == server_state(admin, namespace)
        assert sorted(rec.events) == [("add", f"c{i:03}", True) for i in range(120)]
        assert inf.get("c007", namespace)["data"] == {"v": "x" * 4000}
        assert "managedFields" not in inf.get("c007", namespace)["metadata"]
        admin.post(f"/api/v1/namespaces/{namespace}/configmaps", json=cm("later", v="1"))
        await eventually(lambda: inf.get("later", namespace), what="later cached over the watch")
        assert ("add", "later", False) in rec.events
        assert client.counts["WATCH"] - before["WATCH"] == 1
    finally:
        await inf.stop()


@pytest.mark.parametrize("watch_list", [False, True], ids=["list", "streaming-list"])
async def test_first_list_cut_short_is_made_whole_by_the_next(client, admin, namespace, watch_list):
    """The first list files objects as they arrive; when it fails
    part-way, the informer is not synced, and the next list replaces what was
    filed: an object deleted meanwhile goes as a tombstone, nothing is left over."""
    for n in ("a", "b", "c"):
        admin.post(f"/api/v1/namespaces/{namespace}/configmaps", json=cm(n, v="0"))
    gate = {"open": False, "passed": []}

    def transform(obj):
        if not gate["open"] and gate["passed"]:
            raise RuntimeError("transform fails after the first object")
        gate["passed"].append(obj["metadata"]["name"])
        return obj

    inf = Informer(client, CONFIGMAPS, namespace=namespace, transform=transform, watch_list=watch_list)
    inf._backoff.initial = 0.2
    rec = Recorder()
    inf.add_handler(rec)
    inf.start()
    try:
        await eventually(lambda: inf.last_error, what="the first list fails part-way")
        first = gate["passed"][0]
        assert not inf.has_synced
        assert [o["metadata"]["name"] for o in inf.list()] == [first]  # filed as it arrived
        late = Recorder()  # registered part-way: gets what is filed so far, then the rest
        inf.add_handler(late)
        assert late.events == [("add", first, True)]
        admin.delete(f"/api/v1/namespaces/{namespace}/configmaps/{first}")
        gate["open"] = True
        assert await inf.wait_synced(30)
        assert cache_state(inf) == server_state(admin, namespace)
        assert ("add", first, True) in rec.events
        assert ("delete", first, True) in rec.events  # a tombstone: the delete itself was never seen
        assert sorted(e for e in rec.events if e[1] != first) == [("add", n, True) for n in ("a", "b", "c") if n != first]
        assert sorted(late.events) == sorted(rec.events)
    finally:
        await inf.stop()


@pytest.mark.parametrize("watch_list", [False, True], ids=["list", "streaming-list"])
async def test_handler_joining_during_the_first_list_gets_every_object_once(client, admin, namespace, watch_list):
    for n in ("a", "b", "c"):
        admin.post(f"/api/v1/namespaces/{namespace}/configmaps", json=cm(n, v="0"))
    late = Recorder()

    def transform(obj):
        if not inf._handlers:
            inf.add_handler(late)  # joins while the first list is being filed
        return obj

    inf = Informer(client, CONFIGMAPS, namespace=namespace, transform=transform, watch_list=watch_list)
    inf.start()
    try:
        assert await inf.wait_synced(30)
        assert sorted(late.events) == [("add", n, True) for n in ("a", "b", "c")]
    finally:
        await inf.stop()


async def test_managed_fields_are_cut_unless_kept(client, admin, namespace):
    """The default informer caches each object exactly as served minus
    metadata.managedFields (cut from the bytes before decoding), from the
    streaming list and from live events, whatever the transform; with
    transform=None, or keep_managed_fields=True for a transform that reads
    them, they are kept."""
    tricky = {"metadata": {"name": "tricky", "labels": {"a": "x"},
                           "annotations": {"note": 'has "managedFields":[ and ] and \\" inside'}},
              "data": {"k": '"]', "back.slash": "\\\\"}}
    r = admin.post(f"/api/v1/namespaces/{namespace}/configmaps", json=tricky)
    assert r.status_code == 201, r.text
    informers = {
        "default": Informer(client, CONFIGMAPS, namespace=namespace),
        "raw": Informer(client, CONFIGMAPS, namespace=namespace, transform=None),
        "identity": Informer(client, CONFIGMAPS, namespace=namespace, transform=lambda o: o),
        "kept": Informer(client, CONFIGMAPS, namespace=namespace, transform=lambda o: o, keep_managed_fields=True),
    }
    for inf in informers.values():
        inf.start()
    try:
        for inf in informers.values():
            assert await inf.wait_synced(30)
        admin.post(f"/api/v1/namespaces/{namespace}/configmaps", json=cm("live", v="1"))
        for name in ("tricky", "live"):
            served = admin.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}").json()
            assert served["metadata"]["managedFields"]
            for inf in informers.values():
                await eventually(lambda inf=inf, name=name: inf.get(name, namespace), what=f"{name} cached")
            want = {**served, "metadata": {k: v for k, v in served["metadata"].items() if k != "managedFields"}}
            assert informers["default"].get(name, namespace) == want
            assert informers["identity"].get(name, namespace) == want
            assert informers["raw"].get(name, namespace) == served
            assert informers["kept"].get(name, namespace) == served
    finally:
        for inf in informers.values():
            await inf.stop()


class _WatchListOff(ControlPlane):
    def apiserver_args(self) -> list[str]:
        return [*super().apiserver_args(), "--feature-gates=WatchList=false"]


async def test_plain_list_when_the_server_refuses_streaming(control_plane, admin, namespace, tmp_path):
    """A second kube-apiserver on the same etcd with WatchList off: an informer
    asked for streaming lists falls back to plain lists and keeps working."""
    shutil.copytree(control_plane.certs, tmp_path / "certs")
    plane = _WatchListOff(directory=tmp_path, assets=control_plane.assets, etcd_port=control_plane.etcd_port, api_port=free_port())
    plane.start_apiserver()
    cfg = await RestConfig.load(str(control_plane.kubeconfig))
    cfg.host = plane.url
    c = Client(cfg)
    for i in range(3):
        admin.post(f"/api/v1/namespaces/{namespace}/configmaps", json=cm(f"p{i}", v="0"))
    inf = Informer(c, CONFIGMAPS, namespace=namespace, watch_list=True)
    inf.start()
    try:
        assert await inf.wait_synced(60)
        assert not inf.watch_list, inf.last_error
        assert "sendInitialEvents" in (inf.last_error or "")
        assert cache_state(inf) == server_state(admin, namespace)
        assert c.counts["GET"] >= 1
        admin.post(f"/api/v1/namespaces/{namespace}/configmaps", json=cm("later", v="1"))
        await eventually(lambda: inf.get("later", namespace), what="later cached over the plain watch")
    finally:
        await inf.stop()
        await c.close()
        plane.stop()
