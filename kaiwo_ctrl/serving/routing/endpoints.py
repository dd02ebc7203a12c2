"""Endpoints of each Model, kept from Pod events (never by listing).

A server Pod is an endpoint of Model ``<namespace>/<label model>`` while it is
Ready, not terminating, has ``status.podIP`` and the ``model-pod-port``
annotation. Its adapters are the names of its ``adapter.kubeai.org/<name>``
labels (presence only). Every Pod event updates just that Pod's endpoint; a
deleted Pod's endpoint goes at once (KubeAI ignores the delete event and
relies on the readiness change before it).

In-flight counts live on the endpoint (with those still waiting for their
first answer byte), and so does the engine's last report (written by
:mod:`.scrape`); choices score both through :func:`.score.endpoint_load`.
Where engines report, PrefixHash also remembers, per Model, the endpoint each
of the last ``RECENT_KEYS`` prefix keys went to (LRU; a key is a hash, an
endpoint that left is forgotten at use), so a conversation's next turn goes
where its prefix is cached. An endpoint that goes away keeps its
count until its requests finish, but no longer counts toward the group total
that PrefixHash's load bound uses.

Requests that find no usable endpoint wait for the group's next change and
are evaluated again on every change (KubeAI stops re-evaluating after a miss,
so such a request only ended when the client gave up).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from kaiwo_ctrl.runtime.cache.cache import Cache
from kaiwo_ctrl.runtime.cache.informer import Informer
from kaiwo_ctrl.runtime.api.resources import PODS
from kaiwo_ctrl.serving.podcontract import ADAPTER_LABEL_PREFIX, POD_SELECTOR
from kaiwo_ctrl.serving.podcontract import ANNOTATION_PORT as PORT_ANNOTATION
from kaiwo_ctrl.serving.podcontract import LABEL_MODEL as MODEL_LABEL
from kaiwo_ctrl.serving.routing.fairshare import TenantLoad, quiet_count
from kaiwo_ctrl.serving.routing.balance import Choice, Endpoint, Ring, hash64, least_load
from kaiwo_ctrl.serving.routing.score import admitting, endpoint_load, fresh, home_acceptable, home_load

GroupKey = tuple[str, str]  # (namespace, model name)
RECENT_KEYS = 4096  # per Model: PrefixHash keys whose last endpoint is remembered (engine-aware choice only)


def model_pod_informer(cache: Cache) -> Informer:
    """The shared informer of model server Pods (label ``app=model``)."""
    return cache.informer(PODS, label_selector=POD_SELECTOR)


def pod_endpoint(pod: Mapping[str, Any]) -> tuple[GroupKey, Endpoint] | None:
    """The endpoint a Pod stands for, or None when it cannot take requests."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    model = labels.get(MODEL_LABEL)
    if not model or meta.get("deletionTimestamp"):
        return None
    status = pod.get("status") or {}
    ip = status.get("podIP")
    port = (meta.get("annotations") or {}).get(PORT_ANNOTATION)
    if not ip or not port or not str(port).isdigit():
        return None
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())
    if not ready:
        return None
    adapters = frozenset(k[len(ADAPTER_LABEL_PREFIX):] for k in labels if k.startswith(ADAPTER_LABEL_PREFIX))
    ns = meta.get("namespace", "")
    host = f"[{ip}]" if ":" in ip else ip
    return (ns, model), Endpoint(f"{ns}/{meta['name']}", f"{host}:{port}", adapters)


def _group_of(pod: Mapping[str, Any]) -> GroupKey | None:
    meta = pod.get("metadata") or {}
    model = (meta.get("labels") or {}).get(MODEL_LABEL)
    return (meta.get("namespace", ""), model) if model else None


class Group:
    """The endpoints of one Model."""

    def __init__(self) -> None:
        self.endpoints: dict[str, Endpoint] = {}
        self.total = 0  # in flight on current endpoints
        self.ring: Ring | None = None
        #: PrefixHash key hash -> (the endpoint its last request from here went to, that request's body size);
        #: LRU, RECENT_KEYS at most
        self.recent: OrderedDict[int, tuple[str, int]] = OrderedDict()
        self.tenants = TenantLoad()  # with fair queuing: this replica's requests in flight per tenant (.fairshare)
        self._quiet: dict[int, frozenset[str]] = {}  # quiet engines by count, until the endpoints change
        self._changed = asyncio.Event()

    def upsert(self, ep: Endpoint) -> None:
        cur = self.endpoints.get(ep.key)
        if cur is not None and cur.address == ep.address:
            if cur.adapters == ep.adapters:
                return
            cur.adapters = ep.adapters
        else:
            if cur is not None:
                self._drop(cur)
            self.endpoints[ep.key] = ep
            if self.ring is not None:
                self.ring.add(ep.key)
        self._notify()

    def remove(self, key: str) -> None:
        cur = self.endpoints.get(key)
        if cur is not None:
            self._drop(cur)
            self._notify()

    def _drop(self, ep: Endpoint) -> None:
        del self.endpoints[ep.key]
        ep.removed = True
        self.total -= ep.in_flight
        if self.ring is not None:
            self.ring.remove(ep.key)

    def _notify(self) -> None:
        self._quiet.clear()
        self._changed.set()
        self._changed = asyncio.Event()

    def changed(self) -> asyncio.Event:
        return self._changed

    def acquire(self, ep: Endpoint, tokens: float = 0.0) -> Endpoint:
        """``tokens``: the request's prompt tokens ``ep`` has to prefill (an estimate)."""
        ep.in_flight += 1
        ep.pending += 1
        ep.pending_tokens += tokens
        self.total += 1
        return ep

    def answered(self, ep: Endpoint, tokens: float = 0.0) -> None:
        """The answer to one request sent to ``ep`` began (or its attempt ended without one); ``tokens`` as acquired."""
        ep.pending -= 1
        ep.pending_tokens = max(0.0, ep.pending_tokens - tokens) if ep.pending else 0.0

    def release(self, ep: Endpoint) -> None:
        ep.in_flight -= 1
        if not ep.removed:
            self.total -= 1

    def quiet(self, now: float) -> frozenset[str]:
        """The keys of the Model's quiet engines (:mod:`.fairshare`): the first ones in key order, so every replica
        picks the same; none while no tenant is over its share."""
        fraction = self.tenants.quiet_fraction(now)
        k = 0 if fraction is None else quiet_count(len(self.endpoints), fraction)
        if not k:
            return frozenset()
        keys = self._quiet.get(k)
        if keys is None:
            keys = self._quiet[k] = frozenset(sorted(self.endpoints)[:k])
        return keys

    def choose_prefix(
        self, key: str, replication: int, mean_load_factor: int, adapter: str, skip: frozenset[str], size: int = 0,
        prefer: frozenset[str] = frozenset(),
    ) -> Choice:
        """``size``: the request body's bytes (how much prompt the key's next request finds cached). ``prefer``: a
        key this replica has not routed goes to the least loaded of these endpoints not in ``skip``, if any (a
        tenant under its fair share: the quiet engines)."""
        if self.ring is None:
            self.ring = Ring(replication)
            for k in self.endpoints:
                self.ring.add(k)
        now = time.monotonic()
        eps = self.endpoints
        if not any(fresh(ep, now) for ep in eps.values()):  # no engine reports: KubeAI's choice
            return self.ring.choose(key, eps, self.total, mean_load_factor, adapter, skip)

        c = self.ring.choose(key, eps, 0, mean_load_factor, adapter, skip)  # the ring's home: first untried on the walk
        h = hash64(key)
        last_key, cached = self.recent.get(h, ("", 0))
        last = eps.get(last_key)
        known = last is not None and last.serves(adapter) and last.key not in skip
        if known:
            c.initial = c.endpoint = last  # where this key's cache is: its last request from here went there
        elif prefer and (quiet := least_load((eps[k] for k in prefer if k in eps and k not in skip), adapter, now=now)):
            c.endpoint = quiet  # a new conversation of a quiet tenant: cached nowhere, so nothing lost by leaving the ring
            self._remember(h, quiet.key, size)
            return c
        home, best = c.endpoint, least_load(eps.values(), adapter, skip, now)
        if home is not None and best is not None and best is not home:
            worth = cached if known and admitting(home.engine if fresh(home, now) else None) else None
            load = endpoint_load if worth is None else home_load  # cached at an admitting home: what delays a first token
            if not home_acceptable(load(home, now, adapter), load(best, now, adapter), worth):
                c.endpoint = best  # a spill: the least loaded, not the next ring position (no better cached there)
        if c.endpoint is not None:
            if known and c.endpoint is last:
                c.cached = cached
            self._remember(h, c.endpoint.key, size)
        return c

    def _remember(self, h: int, key: str, size: int = 0) -> None:
        self.recent[h] = (key, size)
        self.recent.move_to_end(h)
        if len(self.recent) > RECENT_KEYS:
            self.recent.popitem(last=False)

    def choose_least(self, adapter: str, skip: frozenset[str]) -> Endpoint | None:
        return least_load(self.endpoints.values(), adapter, skip, time.monotonic())


class EndpointTracker:
    """Informer event handler that keeps a :class:`Group` per Model."""

    def __init__(self) -> None:
        self.groups: dict[GroupKey, Group] = {}

    def group(self, key: GroupKey) -> Group:
        g = self.groups.get(key)
        if g is None:
            g = self.groups[key] = Group()
        return g

    def _apply(self, pod: Mapping[str, Any]) -> None:
        found = pod_endpoint(pod)
        if found is not None:
            self.group(found[0]).upsert(found[1])
            return
        gk = _group_of(pod)
        if gk is not None and gk in self.groups:
            meta = pod["metadata"]
            self.groups[gk].remove(f"{meta.get('namespace', '')}/{meta['name']}")

    # informer handler interface
    def on_add(self, obj: Mapping[str, Any], initial: bool) -> None:
        self._apply(obj)

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        old_group, new_group = _group_of(old), _group_of(new)
        if old_group is not None and old_group != new_group and old_group in self.groups:
            self.groups[old_group].remove(f"{old['metadata'].get('namespace', '')}/{old['metadata']['name']}")
        self._apply(new)

    def on_delete(self, obj: Mapping[str, Any], tombstone: bool) -> None:
        gk = _group_of(obj)
        if gk is not None and gk in self.groups:
            meta = obj["metadata"]
            self.groups[gk].remove(f"{meta.get('namespace', '')}/{meta['name']}")
