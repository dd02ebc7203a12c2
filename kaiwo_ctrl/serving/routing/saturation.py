"""Is a Model saturated, and which of its endpoints have room? The predicate that turns fair queuing on (#41).

A Model is saturated when no endpoint has room for another request now. The
rule keeps the engines' own queues empty while the proxy has requests
waiting: a request the proxy sends into an engine's queue waits there first
come, first served, behind every tenant's, and fair order is lost.

* An endpoint whose engine reported recently (:func:`.score.fresh`):

  - never while this replica has ``max_pending`` requests there without a
    first token (an exact count that is never stale) -- of the tenant the
    room is for, when one is named: each tenant has its own prefill lane per
    engine, so a quiet tenant's request does not wait in the proxy for the
    flood's long prompt to be prefilled (it shares that prefill's steps);
  - the engine admitted at once at its report (:func:`.score.admitting`:
    nothing waiting, KV cache not full): room while this replica has sent
    fewer than ``max_pending`` more there than finished since the report
    (releases between two scrapes replace what finished instead of piling up
    in the batch before the next report says so);
  - the engine was full at its report (requests waiting, or the KV cache
    full): room only once more of this replica's requests there finished
    than it sent since the report, beyond its share of the engine's waiting
    requests (the engine admits those first). A finished request is a free
    slot the proxy knows of at once, a scrape interval before the engine's
    next report would say so; the fair queue's next request takes it instead
    of the next one in the engine's queue.

* An endpoint with no fresh report (no metrics, a failed scrape): room while
  this replica's requests in flight there are under ``in_flight_cap`` (0: no
  cap, it always has room -- KubeAI's behaviour, nothing queues).

* For a tenant over its share (:mod:`.fairshare`): each of the rules above
  with ``reserve`` requests fewer, no room on an engine where a tenant
  under its share has a request without a first token, and none on the
  Model's quiet engines. For a tenant under its share, no one-prompt lane on
  the quiet engines (the flood's prompts are not there to share the steps).

With several proxy replicas each replica counts only its own sends and
finishes, and takes only its share of the engine's waiting requests -- its
requests there at the report over the engine's running and waiting ones -- so
together they fill what finished and drain the engine's queue, each from the
same reports. A Model with no endpoints is not "saturated": the wait for an
endpoint is the scaler's and the endpoint wait's business, not the fair queue's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from kaiwo_ctrl.serving.routing.fairshare import NO_SHARE, Share
from kaiwo_ctrl.serving.routing.score import HOME_MAX_KV, Endpoint, EngineSample, admitting, fresh


def waiting_share(s: EngineSample, base: int) -> float:
    """This replica's share of the engine's waiting requests: its requests there at the report (``base``) over the
    engine's running and waiting ones, at most 1."""
    total = s.running + s.waiting
    if total <= 0:
        return 0.0
    return s.waiting * min(1.0, base / total)


def headroom(s: EngineSample, base: int) -> float:
    """Requests this replica may send an admitting engine beyond what finished since its report: its share of
    what the KV cache still holds below the admitting bound, at the running requests' mean use (unbounded for an
    idle engine: the limit on requests without a first token paces the sends)."""
    if s.running <= 0 or s.kv <= 0:
        return math.inf
    share = min(1.0, base / (s.running + s.waiting))
    return share * s.running * max(0.0, HOME_MAX_KV - s.kv) / s.kv


def has_room(ep: Endpoint, now: float, max_pending: int, in_flight_cap: int, tenant: str | None = None,
             share: Share = NO_SHARE) -> bool:
    quiet = ep.key in share.quiet
    if quiet and share.over:
        return False  # a quiet engine: kept from the tenants over their share while they are
    if share.under is not None and any(share.under(t) for t in ep.pending_by):
        return False  # a tenant under its share has a prompt in prefill here: the flood's next one waits
    reserve = share.reserve
    if fresh(ep, now):
        s = ep.engine
        assert s is not None
        if not quiet and (ep.pending if tenant is None else ep.pending_by.get(tenant, 0)) >= max_pending:
            return False
        sent = ep.in_flight - ep.in_flight_base  # sent since the report, less what finished
        if admitting(s):
            return sent + reserve < max(max_pending, headroom(s, ep.in_flight_base))
        return -sent > waiting_share(s, ep.in_flight_base) + reserve  # full: only what finished beyond its queue
    return in_flight_cap <= 0 or ep.in_flight + reserve < in_flight_cap


def without_room(
    endpoints: Iterable[Endpoint], now: float, max_pending: int, in_flight_cap: int, tenant: str | None = None,
    share: Share = NO_SHARE,
) -> frozenset[str] | None:
    """None when the Model is saturated (at least one endpoint, none with room); else the keys of the endpoints
    with no room (empty when all have), which the pick of a request passes over. With ``tenant``, the requests
    without a first token counted are that tenant's only."""
    seen = room = False
    full: list[str] = []
    for ep in endpoints:
        seen = True
        if has_room(ep, now, max_pending, in_flight_cap, tenant, share):
            room = True
        else:
            full.append(ep.key)
    if seen and not room:
        return None
    return frozenset(full)


def saturated(endpoints: Iterable[Endpoint], now: float, max_pending: int, in_flight_cap: int) -> bool:
    """True when there is at least one endpoint and none has room (see the module docstring)."""
    return without_room(endpoints, now, max_pending, in_flight_cap) is None
