"""The fair-queuing gate in front of the upstream pick (issue #41): one call, :meth:`FairGate.acquire`.

While a Model is not saturated (:mod:`.saturation`) and nothing of it waits,
a request goes straight to the pick: no queue, no timer, no task switch. Else
it waits in its tenant's queue (:mod:`.fairqueue`) and one pump task per
Model releases the queues in fair order among the tenants the Model has room
for, one request at a time, each as soon as there is room (checked every ``POLL`` seconds and at each
endpoint change while anything waits; the released request takes its
endpoint before the next release is considered, so a release is counted by
the next check). The pump ends when the queues are empty. While another
tenant is active, a tenant over its share of the Model's requests in flight
finds less room (:mod:`.fairshare`): it leaves ``--proxy-fair-reserve``
requests free on every engine, yields the prefill to the others, and keeps off
the Model's quiet engines (``--proxy-fair-quiet-engines``), where the tenants
under their share send their new conversations (:meth:`FairGate.quiet_for`).

The tenant is the caller's reviewed namespace (:func:`tenant_of`); with
``--proxy-auth none`` it is the client's address (on the Gateway listener,
the route's namespace), never a request header: a client cannot claim
another tenant's share. Several proxy replicas each queue what they receive;
all of them stop releasing on the same engine reports.

Refusals are 429 with ``Retry-After`` in OpenAI's error shape: a full tenant
queue, too many tenants waiting, or ``max_wait`` spent in the queue.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

from kaiwo_ctrl.serving.routing.endpoints import Group
from kaiwo_ctrl.serving.routing.fairevents import SaturationEvents
from kaiwo_ctrl.serving.routing.fairqueue import FairQueue, QueueFull, clamp_weight
from kaiwo_ctrl.serving.routing.fairshare import NO_SHARE
from kaiwo_ctrl.serving.limits import FairLimits
from kaiwo_ctrl.serving.routing.resolve import ProxyError
from kaiwo_ctrl.serving.routing.saturation import without_room

T = TypeVar("T")
POLL = 0.01  # how often a pump looks for room while requests wait (engine reports and first tokens do not notify)
MAX_TENANT_LABELS = 64  # tenant label values per Model in the metrics; later tenants are labelled "other"
_SA_PREFIX = "system:serviceaccount:"


def tenant_of(user: str | None, address: Hashable) -> str:
    """A request's tenant: a ServiceAccount's namespace, a user's name, else (no reviewed caller) the client's
    address or the Gateway route's namespace as the server recorded it -- never anything the request says."""
    if user:
        if user.startswith(_SA_PREFIX):
            return user[len(_SA_PREFIX):].split(":", 1)[0]
        return user
    if isinstance(address, tuple):  # the Gateway listener's ("namespace", <route namespace>)
        return str(address[-1])
    return str(address) if address is not None else ""


class FairGate:
    def __init__(self, limits: FairLimits, metrics: Any = None, weight: Callable[[str], int] | None = None) -> None:
        self.limits = limits
        self.metrics = metrics  # ProxyMetrics (its fair_* series), or None
        self.weight = weight  # a tenant's weight (.weights: its Namespace's annotation); None: all equal
        self.events: SaturationEvents | None = None  # an Event on the Model when its queue starts and empties
        self._queues: dict[tuple[str, str], FairQueue] = {}
        self._pumps: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._labels: dict[tuple[str, str], set[str]] = {}

    def waiting(self, key: tuple[str, str], tenant: str) -> int:
        q = self._queues.get(key)
        return q.waiting(tenant) if q else 0

    def _weight(self, tenant: str) -> int:
        return clamp_weight(self.weight(tenant)) if self.weight is not None else 1

    def _without_room(self, group: Group, tenant: str) -> frozenset[str] | None:
        """None while the Model has no room for ``tenant``'s request, else its endpoints with none (:mod:`.saturation`;
        a tenant over its share leaves room to the others: :mod:`.fairshare`)."""
        lim, now = self.limits, time.monotonic()
        share = NO_SHARE
        if lim.reserve > 0 or lim.prefill_yield or lim.quiet_engines:
            group.tenants.touch(tenant, now, self._weight)
            quiet = group.quiet(now) if lim.quiet_engines else frozenset()
            share = group.tenants.share(tenant, now, lim.reserve, lim.prefill_yield, quiet)
        return without_room(group.endpoints.values(), now, lim.max_pending, lim.in_flight_cap, tenant, share)

    def quiet_for(self, group: Group, tenant: str) -> frozenset[str]:
        """Where ``tenant``'s new conversations go: the Model's quiet engines while it is under its share and another
        tenant is over (:mod:`.fairshare`), else nowhere in particular (empty)."""
        if not (self.limits.enabled and self.limits.quiet_engines):
            return frozenset()
        now = time.monotonic()
        return group.quiet(now) if group.tenants.under(tenant, now) else frozenset()

    def _label(self, key: tuple[str, str], tenant: str) -> str:
        seen = self._labels.setdefault(key, set())
        if tenant in seen:
            return tenant
        if len(seen) < MAX_TENANT_LABELS:
            seen.add(tenant)
            return tenant
        return "other"

    def _count(self, key: tuple[str, str], tenant: str, outcome: str, waited: float | None = None) -> None:
        m = self.metrics
        if m is None:
            return
        label = self._label(key, tenant)
        m.fair_requests.labels(*key, label, outcome).inc()
        if waited is not None:
            m.fair_wait.labels(*key, label).observe(waited)
        q = self._queues.get(key)
        m.fair_queue.labels(*key, label).set(q.waiting(tenant) if q else 0)

    async def acquire(
        self, key: tuple[str, str], group: Group, tenant: str, pick: Callable[[frozenset[str]], Awaitable[T]],
    ) -> T:
        """``pick(full)`` (the upstream pick, passing over the endpoints in ``full``: those with no room), once this
        request's turn has come; ProxyError 429 past the bounds."""
        if not self.limits.enabled:
            return await pick(frozenset())
        q = self._queues.get(key)
        if q is None or not len(q):
            full = self._without_room(group, tenant)
            if full is not None:
                if self.metrics is not None:
                    self.metrics.fair_requests.labels(*key, self._label(key, tenant), "direct").inc()
                return await pick(full)
        if q is None:
            lim = self.limits
            q = self._queues[key] = FairQueue(lim.max_queue, lim.max_wait, lim.max_tenants, self.weight)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[asyncio.Event] = loop.create_future()
        t0 = loop.time()
        try:
            ticket = q.enqueue(tenant, t0, fut)
        except QueueFull as e:
            self._count(key, tenant, "rejected")
            raise ProxyError(429, f"Too Many Requests: {e}", retry_after=e.retry_after) from None
        self._count(key, tenant, "queued")
        if key not in self._pumps:
            self._pumps[key] = asyncio.create_task(self._pump(key, group, q))
            if self.events is not None:
                self.events.changed(key, True)
        try:
            picked = await fut
        except asyncio.CancelledError:
            q.cancel(ticket)
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                fut.result().set()  # released, then the client went away: the pump goes on at once
            raise
        except TimeoutError:
            self._count(key, tenant, "rejected", loop.time() - t0)
            raise ProxyError(429, "Too Many Requests: waited too long in this tenant's queue for the Model",
                             retry_after=q.retry_after()) from None
        self._count(key, tenant, "released", loop.time() - t0)
        try:
            return await pick(self._without_room(group, tenant) or frozenset())
        finally:
            picked.set()  # the pump may consider the next release

    async def _pump(self, key: tuple[str, str], group: Group, q: FairQueue) -> None:
        loop = asyncio.get_running_loop()
        try:
            while len(q):
                for t in q.expire(loop.time()):
                    if not t.payload.done():
                        t.payload.set_exception(TimeoutError())
                if not len(q):
                    break
                ticket = q.release(lambda tenant: self._without_room(group, tenant) is not None)
                if ticket is None:  # no room for any waiting tenant
                    changed = group.changed()
                    try:
                        async with asyncio.timeout(POLL):
                            await changed.wait()
                    except TimeoutError:
                        pass
                    continue
                if ticket.payload.done():
                    continue
                picked = asyncio.Event()
                ticket.payload.set_result(picked)
                try:
                    async with asyncio.timeout(1.0):  # bounded: a released request that never picks holds up no one
                        await picked.wait()
                except TimeoutError:
                    pass
        finally:
            self._pumps.pop(key, None)
            if not len(q):
                self._queues.pop(key, None)
                if self.events is not None:
                    self.events.changed(key, False)

    async def close(self) -> None:
        for task in list(self._pumps.values()):
            task.cancel()
        self._pumps.clear()
        if self.events is not None:
            self.events.close()
