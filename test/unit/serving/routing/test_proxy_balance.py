"""LeastLoad and PrefixHash (CHWBL) choices, and endpoint groups fed by Pod events."""

from __future__ import annotations

import asyncio
from collections import Counter

from kaiwo_ctrl.serving.routing.balance import Endpoint, Ring, hash64, least_load
from kaiwo_ctrl.serving.routing.endpoints import EndpointTracker, pod_endpoint


def eps(n: int, adapters: dict[int, set[str]] | None = None) -> dict[str, Endpoint]:
    adapters = adapters or {}
    return {f"ns/p{i}": Endpoint(f"ns/p{i}", f"10.0.0.{i}:8000", frozenset(adapters.get(i, ()))) for i in range(n)}


def test_least_load_picks_fewest_in_flight_and_respects_adapters():
    e = eps(3, {2: {"lora"}})
    e["ns/p0"].in_flight, e["ns/p1"].in_flight, e["ns/p2"].in_flight = 2, 1, 5
    assert least_load(e.values()).key == "ns/p1"
    assert least_load(e.values(), "lora").key == "ns/p2"
    assert least_load(e.values(), "other") is None


def test_least_load_prefers_untried_endpoints_but_falls_back_to_them():
    e = eps(2)
    e["ns/p0"].in_flight = 0
    e["ns/p1"].in_flight = 9
    assert least_load(e.values(), skip=frozenset({"ns/p0"})).key == "ns/p1"
    assert least_load(e.values(), skip=frozenset({"ns/p0", "ns/p1"})).key == "ns/p0"


def ring_of(e: dict[str, Endpoint], replication: int = 256) -> Ring:
    r = Ring(replication)
    for k in e:
        r.add(k)
    return r


def test_ring_points_are_xxhash64_of_key_and_index():
    r = ring_of(eps(2), replication=4)
    assert len(r) == 8
    assert sorted(r._hashes) == r._hashes
    assert hash64("ns/p0" + "3") in r._hashes


def test_same_key_lands_on_same_home_when_idle():
    e = eps(4)
    r = ring_of(e)
    homes = {r.choose(f"tenant-{i} system prompt", e, 0, 125).endpoint.key for _ in range(3) for i in [7]}
    assert len(homes) == 1
    spread = Counter(r.choose(f"tenant-{i}", e, 0, 125).endpoint.key for i in range(400))
    assert set(spread) == set(e), "keys spread over every endpoint"
    assert max(spread.values()) < 200


def test_bounded_load_spills_to_the_next_endpoint_clockwise():
    e = eps(3)
    r = ring_of(e)
    first = r.choose("key", e, 0, 125)
    assert first.endpoint is first.initial and not first.fallback
    first.endpoint.in_flight = 10  # total 10 over 3 endpoints: bound (11/3)*1.25 = 4.58
    c = r.choose("key", e, 10, 125)
    assert c.endpoint is not first.endpoint and c.initial is first.endpoint and not c.fallback
    assert c.examined >= 2


def test_fallback_when_every_endpoint_is_over_the_bound():
    e = eps(2)
    for ep in e.values():
        ep.in_flight = 10
    r = ring_of(e)
    c = r.choose("key", e, 20, 100)  # bound 21/2 = 10.5 -> both acceptable
    assert not c.fallback
    e["ns/p0"].in_flight = 30
    e["ns/p1"].in_flight = 30
    c = r.choose("key", e, 40, 100)  # bound 20.5 -> none
    assert c.fallback and c.endpoint is c.initial


def test_prefix_hash_skips_endpoints_without_the_adapter():
    e = eps(3, {1: {"a"}})
    r = ring_of(e)
    for i in range(50):
        assert r.choose(f"a{i}", e, 0, 125, adapter="a").endpoint.key == "ns/p1"
    assert r.choose("x", e, 0, 125, adapter="missing").endpoint is None


def test_ring_remove_drops_its_points():
    e = eps(3)
    r = ring_of(e, 8)
    r.remove("ns/p1")
    del e["ns/p1"]
    assert len(r) == 16 and "ns/p1" not in r._owners


def pod(name: str, *, ready=True, ip="10.1.0.1", port="8000", model="m", labels=None, deleting=False) -> dict:
    meta = {"name": name, "namespace": "ns", "labels": {"app": "model", "model": model, **(labels or {})},
            "annotations": {"model-pod-port": port} if port else {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_pod_endpoint_requires_ready_ip_port_and_not_terminating():
    assert pod_endpoint(pod("a"))[1].address == "10.1.0.1:8000"
    assert pod_endpoint(pod("a", ready=False)) is None
    assert pod_endpoint(pod("a", ip=None)) is None
    assert pod_endpoint(pod("a", port=None)) is None
    assert pod_endpoint(pod("a", deleting=True)) is None
    (gk, ep) = pod_endpoint(pod("a", labels={"adapter.kubeai.org/x": "h1", "adapter.kubeai.org/y": ""}))
    assert gk == ("ns", "m") and ep.adapters == {"x", "y"} and ep.key == "ns/a"
    assert pod_endpoint(pod("a", ip="fd00::1"))[1].address == "[fd00::1]:8000"


async def test_tracker_follows_pod_events_and_wakes_waiters():
    t = EndpointTracker()
    g = t.group(("ns", "m"))
    changed = g.changed()
    t.on_add(pod("a", ready=False), False)
    assert not g.endpoints and not changed.is_set()
    t.on_update(pod("a", ready=False), pod("a"))
    assert changed.is_set() and list(g.endpoints) == ["ns/a"]
    ep = g.acquire(g.choose_least("", frozenset()))
    assert g.total == 1
    t.on_update(pod("a"), pod("a", ready=False))
    assert not g.endpoints and g.total == 0 and ep.removed
    g.release(ep)
    assert ep.in_flight == 0 and g.total == 0
    t.on_add(pod("b"), False)
    t.on_delete(pod("b"), False)
    assert not g.endpoints


async def test_in_flight_survives_adapter_label_changes():
    t = EndpointTracker()
    t.on_add(pod("a"), False)
    g = t.group(("ns", "m"))
    ep = g.acquire(g.choose_least("", frozenset()))
    t.on_update(pod("a"), pod("a", labels={"adapter.kubeai.org/x": "1"}))
    assert g.endpoints["ns/a"] is ep and ep.in_flight == 1 and ep.adapters == {"x"}
    await asyncio.sleep(0)
