"""Who holds more than its share of a saturated Model, and what that tenant leaves to the others (issue #41).

Pure code: the caller passes monotonic ``now``.

Releasing in fair order is not enough on its own: once the flooding tenant's
released requests have taken every slot an engine frees, a quiet tenant's
request finds the Model full and waits in the proxy for the next slot to
free, then shares the engine's steps with the flood's prefills. So, while two
or more tenants are active on a Model (on this replica), a tenant that holds
more than its weighted share of this replica's requests in flight there is
*over its share*, and on every engine it

* leaves ``reserve`` requests of room free: it takes what an engine frees
  only beyond that many, so a tenant under its share finds room at once
  instead of waiting for the next request to finish; and
* yields the prefill: it gets no room on an engine where a tenant under its
  share has a request without a first token (prefilling, or about to), so
  that prompt does not share the engine's chunked-prefill steps with a new
  prompt of the flood's.

And while a tenant is over its share, the Model's *quiet engines* are kept
for the others (:meth:`.endpoints.Group.quiet`: the first endpoints by key, so
every replica picks the same ones; as many as the tenants under their share
hold of the requests in flight, at least one, never all): a tenant over its
share gets no room there, and a tenant under it sends its new conversations
there and has no one-prompt lane there. A quiet tenant's prompt then never
waits for a step of the flood's prefill -- on an A100 a step of 2,048 prompt
tokens lasts about 0.2 s, a flood of new prompts keeps the engines prefilling
most of the time, and a request that arrives waits for the step in progress
and for the prompts admitted before it -- and its decode does not share the
flood's batch. The flood loses those engines for new requests while another
tenant is active (in the bench, one of four: the engines' total 4-8% under
the best strategy without fair queuing).

A tenant alone on the Model is never over its share (work-conserving: it gets
the whole Model). A tenant is *active* while it has requests in flight or
waiting here, and for ``ACTIVE_FOR`` seconds after its last one ended: a
steady tenant's think time between two turns does not hand its reserve back
to the flood. The bookkeeping is O(1) per request: running totals of the
requests in flight and of the active tenants' weights (a tenant's weight is
read when it becomes active and kept while it stays active), idle tenants
forgotten oldest first.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

ACTIVE_FOR = 10.0  # seconds a tenant counts as active after its last request here ended
MAX_IDLE = 4096  # idle tenants remembered per Model at most; past it the oldest are forgotten


@dataclass(frozen=True, slots=True)
class Share:
    """What one tenant's request leaves on every engine: ``reserve`` requests of room, and (``under`` set) the
    engines where a tenant for which ``under`` is true has a request without a first token."""

    reserve: int = 0
    under: Callable[[str], bool] | None = None
    quiet: frozenset[str] = frozenset()  # the Model's quiet engines (empty while no tenant is over its share)
    over: bool = False  # the tenant is over its share: no room on the quiet engines (else no one-prompt lane there)


NO_SHARE = Share()


class TenantLoad:
    """One Model's requests in flight on this replica, per tenant, and its active tenants' weights."""

    __slots__ = ("in_flight", "idle_since", "weights", "total", "wsum", "_version", "_split")

    def __init__(self) -> None:
        self.in_flight: dict[str, int] = {}
        self.idle_since: OrderedDict[str, float] = OrderedDict()  # active tenants with nothing in flight, oldest first
        self.weights: dict[str, int] = {}  # every active tenant's weight, as read when it became active
        self.total = 0  # sum of in_flight
        self.wsum = 0  # sum of weights
        self._version = 0  # counts the changes to in_flight and weights
        self._split: tuple[int, float | None] = (-1, None)  # (_version, quiet_fraction then)

    def _activate(self, tenant: str, weight: int) -> None:
        if tenant not in self.weights:
            self.weights[tenant] = weight
            self.wsum += weight
            self._version += 1

    def touch(self, tenant: str, now: float, weight: Callable[[str], int] | None = None) -> None:
        """``tenant`` asks for the Model (a request arrives, or waits): it is active from now (``weight`` is read
        only when it becomes active)."""
        if tenant not in self.weights:
            self._activate(tenant, weight(tenant) if weight is not None else 1)
        if tenant not in self.in_flight:
            self.idle_since[tenant] = now
            self.idle_since.move_to_end(tenant)
            self._bound()

    def started(self, tenant: str) -> None:
        self._activate(tenant, 1)  # touched first in the gate; 1 only for a tenant that never was
        self.in_flight[tenant] = self.in_flight.get(tenant, 0) + 1
        self.total += 1
        self._version += 1
        self.idle_since.pop(tenant, None)

    def ended(self, tenant: str, now: float) -> None:
        n = self.in_flight.get(tenant, 0)
        if n <= 0:
            return
        self.total -= 1
        self._version += 1
        if n > 1:
            self.in_flight[tenant] = n - 1
            return
        del self.in_flight[tenant]
        self.idle_since[tenant] = now
        self.idle_since.move_to_end(tenant)
        self._bound()

    def _forget(self, tenant: str) -> None:
        self.wsum -= self.weights.pop(tenant, 0)
        self._version += 1

    def _bound(self) -> None:
        while len(self.idle_since) > MAX_IDLE:
            self._forget(self.idle_since.popitem(last=False)[0])

    def expire(self, now: float) -> None:
        """Forget the tenants idle for longer than ``ACTIVE_FOR`` (oldest first: stops at the first still active)."""
        while self.idle_since:
            tenant, since = next(iter(self.idle_since.items()))
            if now - since <= ACTIVE_FOR:
                return
            del self.idle_since[tenant]
            self._forget(tenant)

    def over(self, tenant: str) -> bool:
        """More than its weighted share of the requests in flight: in_flight / total > weight / sum of weights."""
        return self.in_flight.get(tenant, 0) * self.wsum > self.weights.get(tenant, 1) * self.total

    def under(self, tenant: str, now: float) -> bool:
        """Is ``tenant`` one of two or more active tenants, and not over its share?"""
        self.expire(now)
        return len(self.weights) >= 2 and not self.over(tenant)

    def quiet_fraction(self, now: float) -> float | None:
        """While two or more tenants are active and one is over its share: the fraction of the requests in flight
        that the tenants under their share hold (0 when they have none in flight now); else None (no quiet
        engines). Recomputed only after a change (O(tenants with requests in flight))."""
        self.expire(now)
        version, fraction = self._split
        if version == self._version:
            return fraction
        fraction = None
        if len(self.weights) >= 2:
            under = sum(n for t, n in self.in_flight.items() if not self.over(t))
            if under < self.total:  # someone holds more than its share
                fraction = under / self.total
        self._split = (self._version, fraction)
        return fraction

    def share(self, tenant: str, now: float, reserve: int, prefill_yield: bool = True,
              quiet: frozenset[str] = frozenset()) -> Share:
        """What ``tenant``'s next request leaves to the others, and (``quiet``: the Model's quiet engines) where it
        may not go or goes without a lane (:data:`NO_SHARE` while it is alone)."""
        self.expire(now)
        if len(self.weights) < 2:
            return NO_SHARE
        if not self.over(tenant):
            return Share(quiet=quiet) if quiet else NO_SHARE
        return Share(reserve, (lambda t: t != tenant and t in self.weights and not self.over(t)) if prefill_yield else None,
                     quiet, True)


def quiet_count(endpoints: int, fraction: float) -> int:
    """How many of a Model's ``endpoints`` are quiet when the tenants under their share hold ``fraction`` of the
    requests in flight: that share of them, rounded up, at least one, never all (0 with fewer than two)."""
    if endpoints < 2:
        return 0
    return min(endpoints - 1, max(1, math.ceil(endpoints * fraction)))
