"""Is a Model saturated? The predicate that turns fair queuing on (issue #41).

A Model is saturated when no endpoint has room for another request now:

* an endpoint whose engine reported recently (:func:`.score.fresh`) has room
  while the engine admits at once (:func:`.score.admitting`: no requests
  waiting, KV cache not full) and this replica has fewer than ``max_pending``
  requests there without a first token (an exact count that is never stale)
  and has sent fewer than ``max_pending`` more there than finished since the
  report (so releases between two scrapes replace what finished instead of
  piling up in the engine's batch before its next report says so);
* an endpoint with no fresh report (no metrics, a failed scrape) has room
  while this replica's requests in flight there are under ``in_flight_cap``
  (0: no cap, it always has room -- KubeAI's behaviour, nothing queues).

Every replica reads the same engine reports, so with several proxy replicas
each queues what it receives and all stop releasing when the engines say so.
A Model with no endpoints is not "saturated": the wait for an endpoint is the
scaler's and the endpoint wait's business, not the fair queue's.
"""

from __future__ import annotations

from collections.abc import Iterable

from kaiwo_ctrl.serving.routing.score import Endpoint, admitting, fresh


def has_room(ep: Endpoint, now: float, max_pending: int, in_flight_cap: int) -> bool:
    if fresh(ep, now):
        return admitting(ep.engine) and ep.pending < max_pending and ep.in_flight - ep.in_flight_base < max_pending
    return in_flight_cap <= 0 or ep.in_flight < in_flight_cap


def saturated(endpoints: Iterable[Endpoint], now: float, max_pending: int, in_flight_cap: int) -> bool:
    """True when there is at least one endpoint and none has room (see the module docstring)."""
    seen = False
    for ep in endpoints:
        seen = True
        if has_room(ep, now, max_pending, in_flight_cap):
            return False
    return seen
